"""JSON schema compiler: drafts, annotations, rewritten assertions, strictness, shape, layout."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamay.grammar import Grammar, SchemaError
from llamay.grammar.schema import draft_of


def accepts(g: Grammar, value: Any) -> bool:
    return g.matches(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def test_draft4_definitions_and_boolean_exclusive_maximum() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-04/schema#",
        "id": "http://example.com/item.json",
        "definitions": {"score": {"type": "number", "maximum": 5, "exclusiveMaximum": True}},
        "type": "object",
        "properties": {"id": {"type": "integer"}, "score": {"$ref": "#/definitions/score"}},
        "required": ["id"],
    }
    assert draft_of(schema) == "draft4"
    g = Grammar.from_json_schema(schema)
    assert g.unenforced == ()
    assert accepts(g, {"id": 1, "score": 4.5})
    assert not accepts(g, {"id": 1, "score": 5})
    assert not accepts(g, {"score": 1})  # draft-4 "id" is a base URI, never a property


@pytest.mark.parametrize(
    ("uri", "draft"),
    [
        ("http://json-schema.org/draft-06/schema#", "draft6"),
        ("http://json-schema.org/draft-07/schema", "draft7"),
        ("https://json-schema.org/draft/2019-09/schema", "draft2019-09"),
        ("https://json-schema.org/draft/2020-12/schema", "draft2020-12"),
        ("https://example.com/custom-meta", "draft2020-12"),
    ],
)
def test_draft_of(uri: str, draft: str) -> None:
    assert draft_of({"$schema": uri}) == draft
    assert draft_of(True) == draft_of({}) == "draft2020-12"


def test_older_forms() -> None:
    tuple_schema = {"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "integer"}],
                    "additionalItems": False}  # fmt: skip
    g = Grammar.from_json_schema(tuple_schema)
    assert accepts(g, [1]) and not accepts(g, [1, 2]) and not accepts(g, ["x"])
    deps = Grammar.from_json_schema({"dependencies": {"a": ["b"]}})  # undeclared: tolerated
    assert accepts(deps, {"a": 1, "b": 2}) and accepts(deps, {"b": 2}) and not accepts(deps, {"a": 1})
    # Drafts 4-7 ignore the siblings of $ref.
    ref = {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"i": {"type": "integer"}},
           "properties": {"x": {"$ref": "#/definitions/i", "minimum": 10}}}  # fmt: skip
    assert accepts(Grammar.from_json_schema(ref), {"x": 1})


def test_refs_with_escapes_anchors_and_recursive_ref() -> None:
    escaped = {"$defs": {"a/b~c d%": {"type": "integer"}}, "$ref": "#/$defs/a~1b~0c%20d%25"}
    g = Grammar.from_json_schema(escaped)
    assert accepts(g, 1) and not accepts(g, "x")
    anchored = {"$id": "https://x.example/s", "$defs": {"n": {"$anchor": "num", "type": "integer"}},
                "properties": {"a": {"$ref": "#num"}, "b": {"$ref": "#/properties/a"}}}  # fmt: skip
    g = Grammar.from_json_schema(anchored)
    assert accepts(g, {"a": 1, "b": 2}) and not accepts(g, {"b": "x"})
    tree = {"$schema": "https://json-schema.org/draft/2019-09/schema", "$recursiveAnchor": True,
            "type": "object", "properties": {"kid": {"$recursiveRef": "#"}}}  # fmt: skip
    g = Grammar.from_json_schema(tree)
    assert accepts(g, {"kid": {"kid": {}}}) and not accepts(g, {"kid": 1})


def test_vendor_keywords_and_unenforceable_formats_are_annotations() -> None:
    schema = {
        "type": "object",
        "preferredOrder": ["a"],
        "titles": {"a": "A"},
        "self": {"href": "x"},
        "properties": {
            "a": {"type": "string", "_format": "x", "isUniqueKey": True, "format": "color"},
            "b": {"type": "string", "format": "uri-reference"},
        },
    }
    for strict in (True, False):
        g = Grammar.from_json_schema(schema, strict=strict)
        assert g.unenforced == ()
        assert accepts(g, {"a": "not a colour", "b": "::"})
    assert not accepts(Grammar.from_json_schema({"type": "string", "format": "uuid"}), "x")  # enforced


DISCRIMINATED = {
    "oneOf": [
        {"type": "object", "properties": {"kind": {"const": "cat"}, "claws": {"type": "integer"}},
         "required": ["kind"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "dog"}, "bark": {"type": "string"}},
         "required": ["kind"], "additionalProperties": False},
    ]
}  # fmt: skip


def test_exclusive_one_of_is_enforced_exactly() -> None:
    g = Grammar.from_json_schema(DISCRIMINATED)
    assert g.unenforced == ()
    assert accepts(g, {"kind": "cat", "claws": 4}) and accepts(g, {"kind": "dog", "bark": "woof"})
    assert not accepts(g, {"kind": "cat", "bark": "woof"}) and not accepts(g, {"kind": "cow"})
    by_type = Grammar.from_json_schema({"oneOf": [{"type": "string"}, {"type": "integer"}]})
    assert accepts(by_type, "x") and accepts(by_type, 1) and not accepts(by_type, None)


def test_non_exclusive_one_of_strict_and_not() -> None:
    schema = {"properties": {"n": {"oneOf": [{"type": "integer"}, {"minimum": 2}]}}}
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(schema)
    assert (info.value.keyword, info.value.path) == ("oneOf", "/properties/n")
    g = Grammar.from_json_schema(schema, strict=False)
    assert g.unenforced == ("oneOf at /properties/n",)
    assert accepts(g, {"n": 3})  # valid under both branches: anyOf's superset


@pytest.mark.parametrize(
    ("negated", "good", "bad"),
    [
        ({"const": "abc"}, ["ab", "abcd", "", 1, None], ["abc"]),
        ({"enum": ["a", "ab", 3, True]}, ["b", "abc", 2, 3.5, False, None, [], {}], ["a", "ab", 3, True]),
        ({"type": ["string", "null"]}, [1, 1.5, {}, [], True], ["x", None]),
        ({"required": ["a", "b"]}, [{"a": 1}, {"b": 1}, {}], [{"a": 1, "b": 2}]),
        ({"minimum": 3}, [2, 2.5], [3, 4, "x"]),  # "x" passes minimum, so fails its negation
    ],
)
def test_not_is_enforced(negated: dict[str, Any], good: list[Any], bad: list[Any]) -> None:
    g = Grammar.from_json_schema({"not": negated})
    assert g.unenforced == () and g.narrowed == ()
    assert all(accepts(g, v) for v in good), [v for v in good if not accepts(g, v)]
    assert not any(accepts(g, v) for v in bad), [v for v in bad if accepts(g, v)]


def test_not_of_general_forms() -> None:
    schema = {"type": "array", "not": {"items": {"type": "string"}}}
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(schema)
    assert (info.value.keyword, info.value.path) == ("not", "/")
    assert Grammar.from_json_schema(schema, strict=False).unenforced == ("not at /",)
    # Dropping inside a not would tighten: the whole not goes instead.
    inner = {"not": {"type": "array", "uniqueItems": True}}
    assert Grammar.from_json_schema(inner, strict=False).unenforced == ("not at /",)
    assert Grammar.from_json_schema({"not": {"const": {"a": 1}}}, strict=False).unenforced == ("not at /",)


def test_unique_items_strict_and_not() -> None:
    schema = {"properties": {"tags": {"type": "array", "uniqueItems": True}}}
    with pytest.raises(SchemaError) as info:
        Grammar.from_json_schema(schema)
    assert info.value.status == 400 and (info.value.keyword, info.value.path) == (
        "uniqueItems",
        "/properties/tags",
    )
    assert Grammar.from_json_schema(schema, strict=False).unenforced == ("uniqueItems at /properties/tags",)


def test_enum_and_const_of_structured_values() -> None:
    g = Grammar.from_json_schema({"enum": [{"a": [1, {"b": None}]}, [1, "x"], 1.5]})
    assert accepts(g, {"a": [1, {"b": None}]}) and accepts(g, [1, "x"]) and accepts(g, 1.5)
    assert not accepts(g, {"a": [1]}) and not accepts(g, [1])


def test_tight_shape_closes_objects_only_where_safe() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert accepts(Grammar.from_json_schema(schema), {"a": 1, "extra": 2})
    tight = Grammar.from_json_schema(schema, shape="tight")
    assert accepts(tight, {"a": 1}) and not accepts(tight, {"a": 1, "extra": 2})
    # Merged with allOf (also via $ref): closing a member would reject "b".
    merged = {"$defs": {"A": {"properties": {"a": {"type": "integer"}}}},
              "allOf": [{"$ref": "#/$defs/A"}, {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}  # fmt: skip
    assert accepts(Grammar.from_json_schema(merged, shape="tight"), {"a": 1, "b": "x"})
    assert accepts(Grammar.from_json_schema({"type": "object"}, shape="tight"), {"k": 1})


def test_layouts() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "array"}}}
    value = {"a": [1, 2]}
    compact = Grammar.from_json_schema(schema, layout="compact")
    assert compact.matches(b'{"a":[1,2]}') and not compact.matches(b'{"a": [1, 2]}')
    free = Grammar.from_json_schema(schema, layout="free")
    assert free.matches(b'{"a": [1, 2]}') and free.matches(json.dumps(value, indent=2).encode())
    indented = Grammar.from_json_schema(schema, layout="indented")
    assert indented.matches(json.dumps(value, indent=2).encode())
    assert not indented.matches(b'{"a":\t[1,2]}')
