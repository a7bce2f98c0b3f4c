"""The API side of JSON schemas: request fields, output limits, and the after-the-fact
check of keywords that were not enforced while sampling."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from llamay.api import jsonformat
from llamay.api.fields import Fields
from llamay.chat.flow import output_limit
from llamay.engine.request import ConstraintPlan
from llamay.errors import InvalidRequest
from llamay.grammar import Grammar, SchemaError

TAGS = {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
        "required": ["tags"]}  # fmt: skip


def test_output_limit_prefers_the_request_then_the_schema_then_the_server() -> None:
    bounded = ConstraintPlan(SimpleNamespace(max_bytes=40), label="json")
    open_ended = ConstraintPlan(SimpleNamespace(max_bytes=None), label="json")
    lazy = ConstraintPlan(SimpleNamespace(max_bytes=40), trigger_tokens=frozenset({7}), label="json")
    assert output_limit(bounded, 10, 2048, 1000) == 10  # asked for
    assert output_limit(bounded, None, 2048, 1000) == 41  # the schema's bytes + end of text
    assert output_limit(open_ended, None, 2048, 1000) == 1000  # the server's, capped by the room left
    assert output_limit(open_ended, None, 300, 1000) == 300
    assert output_limit(lazy, None, 300, 1000) == 300  # free text before the trigger: no schema bound
    assert output_limit(None, None, 300, 1000) == 300  # free text gets the server's budget too
    assert output_limit(None, 5000, 300, 1000) == 1000
    assert output_limit(open_ended, None, 300, 0) == 1


def test_style_fields_are_checked() -> None:
    assert jsonformat.json_style(Fields({})) == jsonformat.JsonStyle(jsonformat.DEFAULT_LAYOUT, "tight")
    style = jsonformat.json_style(Fields({"json_layout": "indented", "schema_shape": "free"}))
    assert (style.layout, style.shape) == ("indented", "free")
    with pytest.raises(InvalidRequest) as err:
        jsonformat.json_style(Fields({"json_layout": "pretty"}))
    assert err.value.param == "json_layout"


def test_strict_refuses_what_non_strict_reports() -> None:
    style = jsonformat.JsonStyle()
    with pytest.raises(SchemaError) as err:
        jsonformat.schema_grammar(TAGS, style, strict=True, param="response_format")
    assert err.value.keyword == "uniqueItems" and "/properties/tags" in err.value.path
    g = jsonformat.schema_grammar(TAGS, style, strict=False, param="response_format")
    assert any(u.startswith("uniqueItems") for u in g.unenforced)
    good = jsonformat.check(g, json.dumps({"tags": ["a", "b"]}), complete=True)
    bad = jsonformat.check(g, json.dumps({"tags": ["a", "a"]}), complete=True)
    cut = jsonformat.check(g, '{"tags": ["a"', complete=False)
    assert good is not None and good["valid"] and good["errors"] == []
    assert bad is not None and not bad["valid"] and bad["errors"]
    assert cut is not None and not cut["valid"]
    assert good["unenforced"] == list(g.unenforced)


def test_no_report_when_everything_was_enforced() -> None:
    g = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert g.unenforced == ()
    assert jsonformat.check(g, '{"a": 1}', complete=True) is None
    assert jsonformat.check(None, "x", complete=True) is None
