"""Grammar.max_bytes is a real upper bound; validate() reports violations safely."""

from __future__ import annotations

import json
from typing import Any

import jsonschema._keywords
import numpy as np
import pytest

import llamay.grammar.validate as validate_module
from llamay.grammar import Grammar
from llamay.grammar.validate import MAX_ERRORS, validate

from .test_grammar_fuzz import sample

BOUNDED: list[dict[str, Any]] = [
    {"enum": ["a", "bé", {"k": [1, None]}, 12.5, True]},
    {"type": "integer", "minimum": -40, "maximum": 1000},
    {"type": "string", "maxLength": 4},
    {"type": "string", "format": "uuid"},
    {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    {"type": "array", "prefixItems": [{"type": "null"}, {"const": "x"}], "items": False},
    {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "minimum": 0, "maximum": 9},
            "b": {"type": "string", "maxLength": 2},
        },
        "additionalProperties": False,
    },
    {"anyOf": [{"type": "boolean"}, {"type": "string", "maxLength": 3}]},
]


@pytest.mark.parametrize("layout", ["compact", "indented", "free"])
def test_max_bytes_bounds_every_generated_text(layout: Any) -> None:
    rng = np.random.default_rng(3)
    for schema in BOUNDED:
        grammar = Grammar.from_json_schema(schema, layout=layout)
        assert grammar.max_bytes is not None, schema
        for _ in range(20):
            # A walk longer than the bound comes back as None: that would be a violation.
            text = sample(grammar, rng, limit=grammar.max_bytes + 1)
            assert text is not None and len(text) <= grammar.max_bytes, (schema, text)


def test_max_bytes_is_none_when_unbounded() -> None:
    for schema in ({"type": "string"}, {"type": "number"}, {"type": "object"}, {"type": "array"}, True):
        assert Grammar.from_json_schema(schema).max_bytes is None
    tight = Grammar.from_json_schema(
        {"properties": {"a": {"type": "boolean"}}, "type": "object"}, shape="tight"
    )
    assert tight.max_bytes is not None


def test_non_json_grammars_have_no_schema() -> None:
    g = Grammar.from_regex("a+")
    assert g.schema is None and g.max_bytes is None and g.unenforced == ()


def test_validate_reports_paths_and_drafts() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"maxLength": 1}}}
    assert validate(schema, {"a": 1, "b": "x"}) == []
    errors = validate(schema, {"a": "x", "b": "yy"})
    assert len(errors) == 2 and errors[0].startswith("at /a: ") and errors[1].startswith("at /b: ")
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "maximum": 5, "exclusiveMaximum": True}
    assert validate(draft4, 4) == [] and validate(draft4, 5)
    assert validate({"format": "date"}, "2024-02-30") and validate({"format": "color"}, "x") == []
    many = validate({"items": {"type": "string"}}, list(range(100)))
    assert len(many) == MAX_ERRORS


def test_validate_never_fetches_remote_refs() -> None:
    errors = validate({"$ref": "http://127.0.0.1:9/schema.json"}, 1)
    assert len(errors) == 1 and "cannot be evaluated" in errors[0]


def test_validate_patterns_do_not_backtrack(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = validate_module.safe_search

    def spy(pattern: str, text: str) -> bool:
        calls.append(pattern)
        return real(pattern, text)

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("Python's backtracking re was used")

    monkeypatch.setattr(validate_module, "safe_search", spy)
    monkeypatch.setattr(jsonschema._keywords.re, "search", forbidden)
    evil = "^(a+)+$"
    assert validate({"type": "string", "pattern": evil}, "a" * 5000 + "b")
    assert validate({"type": "string", "pattern": evil}, "a" * 50) == []
    props = {"patternProperties": {evil: {"type": "integer"}}, "additionalProperties": False}
    assert validate(props, {"a" * 3000 + "b": 1})  # additional, so not allowed
    assert validate(props, {"aaa": 1}) == []
    assert calls and set(calls) <= {evil, "^(a+)+$"}


def test_validate_unsupported_pattern_is_reported() -> None:
    errors = validate({"pattern": "(?<=a)b"}, "ab")
    assert len(errors) == 1 and "cannot be checked" in errors[0]


def test_grammar_keeps_the_original_schema() -> None:
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "x-vendor": 1}
    g = Grammar.from_json_schema(schema)
    assert g.schema == schema and g.schema is not schema
    assert json.loads(json.dumps(g.schema)) == schema
