"""`unevaluatedProperties` next to `allOf` / `$ref` is enforced while sampling when what the
members evaluate is known before the value (grammar/unevaluated.py); the grammar then takes
exactly what `jsonschema` accepts on these values (keys in the order the grammar writes them:
the members' first), and where it depends on the value the keyword is still reported as not
enforced."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from llamay.grammar import Constraint, Grammar, byte_compile_cache
from llamay.grammar.schema import SchemaError, prepare_schema
from llamay.grammar.unevaluated import static_evaluated

CACHE = byte_compile_cache()

EXTENDED = {
    "$defs": {
        "base": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "kind": {"type": "string"}},
            "required": ["name"],
        }
    },
    "allOf": [{"$ref": "#/$defs/base"}],
    "properties": {"kind": {"const": "image"}, "ratio": {"type": "string"}},
    "unevaluatedProperties": False,
}


def takes(schema: dict[str, Any], text: str) -> bool:
    c = Constraint(Grammar.from_json_schema(schema, layout="compact"), CACHE)
    return all(c.consume(b) for b in text.encode()) and c.is_accepting()


@pytest.mark.parametrize(
    "text",
    [
        '{"name":"a"}',
        '{"name":"a","kind":"image","ratio":"4:3"}',
        '{"name":"a","extra":1}',
        '{"name":"a","kind":"video"}',
        '{"kind":"image"}',
        '{"name":"b","ratio":"1"}',
    ],
)
def test_the_grammar_takes_what_the_validator_takes(text: str) -> None:
    valid = jsonschema.Draft202012Validator(EXTENDED).is_valid(json.loads(text))
    assert takes(EXTENDED, text) == valid


def test_enforced_so_not_reported() -> None:
    assert prepare_schema(EXTENDED).unenforced == []  # strict: it would raise otherwise


def test_a_member_with_additional_properties_evaluates_every_key() -> None:
    schema = {
        "allOf": [{"type": "object", "additionalProperties": {"type": "integer"}}],
        "unevaluatedProperties": False,
    }
    assert jsonschema.Draft202012Validator(schema).is_valid({"any": 1})
    assert takes(schema, '{"any":1}')


def test_instance_dependent_members_stay_unenforced() -> None:
    schema = {
        "anyOf": [{"properties": {"a": {"type": "string"}}}, {"properties": {"b": {"type": "string"}}}],
        "unevaluatedProperties": False,
    }
    assert any("unevaluatedProperties" in u for u in prepare_schema(schema, strict=False).unenforced)
    with pytest.raises(SchemaError, match="unevaluatedProperties"):
        prepare_schema(schema)


def test_reference_cycles_end() -> None:
    node: dict[str, Any] = {"properties": {"x": {}}, "allOf": [{"$ref": "#"}]}
    got = static_evaluated(node, "", lambda ref, base: (node, base))
    assert got is not None and got.names == {"x"} and not got.every
