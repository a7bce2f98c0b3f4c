"""`propertyNames`: key schemas enforced by rewriting the object's own keywords (pattern,
enum/const, length bounds), accepted where they are always true for a JSON key, refused
by name (strict) where no exact rewrite exists. Each case is checked against the
reference validator, so a rewrite that lets a wrong key through, or refuses a right one,
fails here."""

from __future__ import annotations

from typing import Any

import pytest

from llamay.grammar import Grammar, SchemaError
from llamay.grammar.keys import ALL, KeySet, Unenforceable, literal_pattern

from .grammar_diff import reference, write


def _matches(grammar: Grammar, value: Any) -> bool:
    return write(grammar, value, prune=False) is not None


# (schema, values the reference accepts, values it refuses)
CASES: list[tuple[dict[str, Any], list[Any], list[Any]]] = [
    # zod's z.record(z.string(), z.number()): always true for keys
    (
        {"type": "object", "propertyNames": {"type": "string"}, "additionalProperties": {"type": "number"}},
        [{}, {"a": 1, "long key": 2.5}],
        [{"a": "x"}],
    ),
    (
        {"type": "object", "propertyNames": {"pattern": "^a+$"}},
        [{}, {"a": 1, "aaa": None}],
        [{"b": 1}, {"a": 1, "ab": 2}],
    ),
    (
        {
            "type": "object",
            "propertyNames": {"enum": ["foo", "bar"]},
            "additionalProperties": {"type": "integer"},
        },
        [{"foo": 1}, {"bar": 2, "foo": 3}],
        [{"baz": 1}, {"foo": "x"}],
    ),
    (
        {"type": "object", "propertyNames": {"const": "x"}, "properties": {"y": {"type": "string"}}},
        [{}, {"x": [1]}],
        [{"y": "s"}, {"z": 1}],
    ),
    (
        {"type": "object", "propertyNames": {"maxLength": 3}},
        [{"abc": 1, "": 2}, {"é€x": 0}],
        [{"abcd": 1}],
    ),
    (
        {
            "type": "object",
            "propertyNames": {"minLength": 2, "maxLength": 3},
            "additionalProperties": {"type": "boolean"},
        },
        [{"ab": True, "abc": False}],
        [{"a": True}, {"abcd": True}, {"ab": 1}],
    ),
    ({"type": "object", "propertyNames": False}, [{}], [{"a": 1}]),
    # named properties the key schema refuses may not appear
    (
        {
            "type": "object",
            "propertyNames": {"pattern": "^[a-z]+$"},
            "properties": {"ok": {"type": "integer"}, "NO": {"type": "integer"}},
        },
        [{"ok": 1, "other": "s"}],
        [{"NO": 1}, {"Other": 1}, {"ok": "s"}],
    ),
    # a finite set takes the patternProperties schema that matches each key
    (
        {
            "type": "object",
            "propertyNames": {"enum": ["n1", "s1"]},
            "patternProperties": {"^n": {"type": "number"}, "^s": {"type": "string"}},
            "additionalProperties": False,
        },
        [{"n1": 1, "s1": "x"}],
        [{"n1": "x"}, {"s1": 1}, {"n2": 1}],
    ),
    # combinators and references over key schemas
    (
        {
            "type": "object",
            "propertyNames": {"$ref": "#/$defs/key"},
            "$defs": {"key": {"anyOf": [{"const": "a"}, {"const": "b"}]}},
        },
        [{"a": 1, "b": 2}],
        [{"c": 1}],
    ),
    (
        {"type": "object", "propertyNames": {"not": {"enum": ["secret"]}}},
        [{"public": 1}],
        [{"secret": 1}],
    ),
    (
        {"type": "object", "propertyNames": {"allOf": [{"pattern": "^k"}, {"not": {"const": "kx"}}]}},
        [{"k": 1, "key": 2}],
        [{"kx": 1}, {"x": 1}],
    ),
    # keywords that never constrain a string allow every key
    (
        {"type": "object", "propertyNames": {"minimum": 3, "items": False, "required": ["a"], "title": "k"}},
        [{"anything": 1}],
        [[]],
    ),
    # a key schema that is not a string type refuses every key
    ({"type": "object", "propertyNames": {"type": "number"}}, [{}], [{"1": 1}]),
    # draft 4 has no propertyNames: an annotation there
    (
        {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object", "propertyNames": False},
        [{"a": 1}],
        [],
    ),
]


@pytest.mark.parametrize(("schema", "valid", "invalid"), CASES)
def test_key_schemas_are_enforced_exactly(
    schema: dict[str, Any], valid: list[Any], invalid: list[Any]
) -> None:
    check = reference(schema)
    grammar = Grammar.from_json_schema(schema, strict=True)
    assert grammar.unenforced == ()
    for value in valid:
        assert check(value), value
        assert _matches(grammar, value), value
    for value in invalid:
        assert not check(value), value
        assert not _matches(grammar, value), value


@pytest.mark.parametrize(
    ("key_schema", "why"),
    [
        ({"not": {"pattern": "a"}}, "cannot be written as a pattern"),
        ({"allOf": [{"pattern": "^a"}, {"pattern": "b$"}]}, "two different key patterns"),
        ({"if": {"const": "a"}, "then": {"maxLength": 1}}, "conditional"),
        ({"format": "date"}, "format 'date'"),
    ],
)
def test_key_schemas_without_an_exact_rewrite_are_refused_by_name(key_schema: Any, why: str) -> None:
    schema = {"type": "object", "propertyNames": key_schema}
    with pytest.raises(SchemaError, match="propertyNames") as err:
        Grammar.from_json_schema(schema, strict=True)
    assert why in str(err.value)
    # non-strict: dropped and listed, every valid value still writable
    loose = Grammar.from_json_schema(schema, strict=False)
    assert any("propertyNames" in u for u in loose.unenforced)


def test_a_key_pattern_next_to_patternproperties_is_refused() -> None:
    schema = {"type": "object", "propertyNames": {"pattern": "^a"}, "patternProperties": {"^b": {}}}
    with pytest.raises(SchemaError, match="patternProperties"):
        Grammar.from_json_schema(schema, strict=True)


def test_a_key_pattern_that_would_retype_a_named_property_is_refused() -> None:
    schema = {
        "type": "object",
        "propertyNames": {"pattern": "^a"},
        "properties": {"ab": {"type": "string"}},
        "additionalProperties": {"type": "integer"},
    }
    with pytest.raises(SchemaError, match="'ab'"):
        Grammar.from_json_schema(schema, strict=True)


def test_malformed_key_schemas_are_invalid_not_unsupported() -> None:
    for bad in ({"enum": "a"}, {"pattern": 1}, {"maxLength": -1}, {"type": 3}, 7):
        with pytest.raises(SchemaError, match="invalid JSON schema keyword"):
            Grammar.from_json_schema({"type": "object", "propertyNames": bad}, strict=False)


def test_the_search_budget_refuses_huge_key_lists() -> None:
    keys = [f"k{i}" for i in range(400)]
    patterns = {f"^p{i}": {"type": "integer"} for i in range(400)}
    schema = {"type": "object", "propertyNames": {"enum": keys}, "patternProperties": patterns}
    with pytest.raises(SchemaError, match="too many keys"):
        Grammar.from_json_schema(schema, strict=True)


def test_keyset_algebra() -> None:
    ab = KeySet(finite=("a", "b"))
    assert ab.both(KeySet(pattern="^a")).finite == ("a",)
    assert ALL.both(ab.complement()).excluded == {"a", "b"}
    assert ab.complement().complement().finite == ("a", "b")
    either = KeySet(pattern="^x").either(ab)
    assert either.contains("a") and either.contains("xy") and not either.contains("c")
    with pytest.raises(Unenforceable):
        KeySet(pattern="^x").complement()
    lit = literal_pattern("a.]^")
    assert KeySet(pattern=lit).contains("a.]^") and not KeySet(pattern=lit).contains("ab]^")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": {"type": "string"}, "uniqueItems": False},
        {"type": "array", "contains": {"type": "string"}, "minContains": 0},
        {
            "type": "object",
            "unevaluatedProperties": True,
            "dependentRequired": {},
            "dependentSchemas": {"a": True},
        },
        {"type": "array", "unevaluatedItems": {}},
        {"type": "string", "contentEncoding": "base64", "contentMediaType": "image/png", "deprecated": True},
        {"type": "object", "propertyNames": {"type": ["string", "null"], "minLength": 0}},
        {"type": "object", "propertyNames": True},
        {"type": "object", "propertyNames": {}},
        {"if": {"type": "string"}},
        {"not": False},
    ],
)
def test_always_true_keywords_compile_strictly(schema: dict[str, Any]) -> None:
    grammar = Grammar.from_json_schema(schema, strict=True)
    assert grammar.unenforced == ()
