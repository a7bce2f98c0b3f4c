"""Grammar: construction, validation errors and model-free byte matching."""

from __future__ import annotations

import copy
import json

import pytest

from llamay.errors import GrammarError
from llamay.grammar import Grammar, SchemaError

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_json_schema_matches_compact_spaced_and_indented() -> None:
    g = Grammar.from_json_schema(PERSON)
    value = {"name": "Ann", "age": 3, "tags": ["a", "é"]}
    for text in (
        json.dumps(value, separators=(",", ":"), ensure_ascii=False),
        json.dumps(value, ensure_ascii=False),
        json.dumps(value, indent=2, ensure_ascii=False),
        json.dumps(value, indent="\t", ensure_ascii=False),
    ):
        assert g.matches(text.encode()), text
    assert not g.matches(json.dumps(value).encode())  # documented: no \\u escapes, raw UTF-8
    assert not g.matches(b'{"name":"","age":3}')
    assert not g.matches(b'{"name":"A","age":-1}')
    assert not g.matches(b'{"name":"A","age":1,"x":1}')
    assert not g.matches(b'{"name":"A","age":1,"tags":["a","b","c","d"]}')
    assert g.accepts_prefix(b'{"name": "A')
    assert not g.accepts_prefix(b'{"nope')
    assert g.kind == "json_schema" and g.lark.startswith("start: %json ") and g.spec


def test_properties_follow_schema_order() -> None:
    g = Grammar.from_json_schema(PERSON)
    assert g.matches(b'{"name":"A","age":1}')
    assert not g.matches(b'{"age":1,"name":"A"}')  # documented: schema order only


def test_whitespace_is_bounded() -> None:
    g = Grammar.from_json_schema({"type": "array"})
    assert g.matches(b"[ 1,\n  2 ]")
    assert not g.matches(b"[\n\n1]")  # at most one newline per gap
    assert not g.matches(b"[" + b" " * 41 + b"1]")
    assert not g.matches(b" []") and not g.matches(b"[] ")


def test_recursive_refs() -> None:
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
        "$ref": "#/$defs/node",
    }
    g = Grammar.from_json_schema(tree)
    assert g.matches(b'{"kids":[{"kids":[{}]},{}]}')
    assert not g.matches(b'{"kids":[{"kids":[1]}]}')


def test_json_object_and_boolean_schemas() -> None:
    assert Grammar.json_object().matches(b'{"a": [1, {"b": null}]}')
    assert not Grammar.json_object().matches(b"[]")
    assert Grammar.from_json_schema(True).matches(b'"anything"')
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(False)
    assert info.value.keyword == "false"


@pytest.mark.parametrize(
    ("schema", "keyword", "path"),
    [
        ({"properties": {"tags": {"type": "array", "uniqueItems": True}}}, "uniqueItems", "/properties/tags"),
        ({"items": {"not": {"items": {"type": "null"}}}}, "not", "/items"),
        ({"anyOf": [{"if": {"pattern": "a"}, "then": {"minLength": 2}}]}, "if", "/anyOf/0"),
        ({"$defs": {"a/b": {"contains": {}}}, "$ref": "#/$defs/a~1b"}, "contains", "/$defs/a~1b"),
        ({"x-guidance": {"lenient": True}}, "x-guidance", "/"),
        ({"enum": []}, "enum", "/"),
        ({"const": "nul\u0000"}, "const", "/"),
        ({"type": "object", "minProperties": 2}, "minProperties", "/"),
        ({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, "oneOf", "/"),
        ({"patternProperties": {"a": {}, "b": {}}}, "patternProperties", "/"),
        ({"$ref": "https://example.com/schema.json"}, "$ref", "/"),
        ({"properties": []}, "properties", "/"),
        ({"items": 3}, "items", "/"),
        ({"minLength": -1}, "minLength", "/"),
    ],
)
def test_refusals_name_keyword_and_path(schema: dict[str, object], keyword: str, path: str) -> None:
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(schema)
    err = info.value
    assert isinstance(err, GrammarError) and err.code == "invalid_grammar" and err.status == 400
    assert (err.keyword, err.path, err.param) == (keyword, path, "response_format")
    assert f"'{keyword}'" in err.message


def test_message_shape() -> None:
    with pytest.raises(
        SchemaError, match=r"^unsupported JSON schema keyword 'uniqueItems' at /properties/tags"
    ):
        Grammar.from_json_schema({"properties": {"tags": {"uniqueItems": True}}})


def test_param_can_be_overridden() -> None:
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema({"not": {}}, param="tools")
    assert info.value.param == "tools"


def test_noop_keywords_and_integral_counts_are_accepted() -> None:
    g = Grammar.from_json_schema({"type": "array", "uniqueItems": False, "maxItems": 2.0, "minItems": 1.0})
    assert g.matches(b"[1,1]") and not g.matches(b"[]") and not g.matches(b"[1,2,3]")
    assert Grammar.from_json_schema({"type": "array", "maxItems": 1, "uniqueItems": True}).matches(b"[1]")
    annotated = {"title": "t", "description": "d", "default": 1, "examples": [1], "x-extra": {"not": 1}}
    assert Grammar.from_json_schema(annotated).matches(b"1")


def test_annotations_and_unknown_keywords_never_refuse() -> None:
    # Unknown keywords (typos included) and unknown formats are annotations in JSON Schema.
    for strict in (True, False):
        g = Grammar.from_json_schema(
            {"type": "string", "minLenght": 3, "format": "iri", "_format": "x", "isUniqueKey": True},
            strict=strict,
        )
        assert g.unenforced == () and g.matches(b'"a"') and not g.matches(b"1")


def test_non_strict_drops_and_reports() -> None:
    schema = {
        "type": "array",
        "items": {"type": "string", "format": "iri"},
        "uniqueItems": True,
        "oneOf": [{"maxItems": 3}, {"minItems": 1}],
    }
    original = copy.deepcopy(schema)
    g = Grammar.from_json_schema(schema, strict=False)
    assert set(g.unenforced) == {"uniqueItems at /", "oneOf at /"}
    assert g.ignored == g.unenforced  # the older name
    assert g.matches(b'["x","x"]')
    assert schema == original and g.schema == original
    assert Grammar.from_json_schema({"type": "integer"}, strict=False).unenforced == ()


def test_keys_cannot_spell_declared_names_with_escapes() -> None:
    # llguidance lets additional keys use \\u escapes: "\\u0061" would be "a" with the
    # wrong type. With \\u escapes disabled it cannot be written.
    g = Grammar.from_json_schema(
        {"properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}}
    )
    assert g.matches(b'{"a":1,"b":"x"}')
    assert not g.matches(b'{"\\u0061":"x"}')
    assert not g.accepts_prefix(b'{"\\u')


def test_formats_are_asserted_strictly() -> None:
    date = Grammar.from_json_schema({"type": "string", "format": "date"})
    assert date.matches(b'"2024-02-29"') and date.matches(b'"2000-02-29"')
    assert not date.matches(b'"2023-02-29"') and not date.matches(b'"1900-02-29"')
    stamp = Grammar.from_json_schema({"type": "string", "format": "date-time"})
    assert stamp.matches(b'"2024-05-01T12:30:00Z"')
    assert not stamp.matches(b'"2023-02-29T12:30:00Z"') and not stamp.matches(b'"2024-05-01T12:30:60Z"')
    host = Grammar.from_json_schema({"type": "string", "format": "hostname"})
    assert host.matches(b'"api.example.com"')
    assert not host.matches(b'"xn--bad.example"') and not host.matches(b'"' + b"a." * 127 + b'a"')


def test_limits() -> None:
    with pytest.raises(GrammarError, match="larger than"):
        Grammar.from_json_schema({"enum": ["x" * 600_000]})
    deep: dict[str, object] = {"type": "integer"}
    for _ in range(200):
        deep = {"items": deep}
    with pytest.raises(SchemaError, match="too deep"):
        Grammar.from_json_schema(deep)


def test_regex() -> None:
    g = Grammar.from_regex(r"^\d{3}-[a-z]+/x$")
    assert g.kind == "regex" and g.matches(b"123-ab/x") and not g.matches(b"12-ab/x")
    assert g.accepts_prefix(b"12") and not g.accepts_prefix(b"x")
    assert not Grammar.from_regex(r"\d").matches("٣".encode())  # \d is ASCII
    with pytest.raises(GrammarError) as info:
        Grammar.from_regex("a(")
    assert info.value.param == "regex"


def test_lark_and_bytes() -> None:
    g = Grammar.from_lark('start: "a" b\nb: /[0-9]+/')
    assert g.matches(b"a12") and not g.matches(b"a")
    assert not g.matches(b"a1\xff")
    with pytest.raises(GrammarError):
        Grammar.from_lark("start: undefined_rule")
