"""A cut-off JSON text parsed as far as it goes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamay.api.anthropic.partial import parse_partial


@pytest.mark.parametrize(("text", "want"), [
    ('{"a": "unfini', {"a": "unfini"}),
    ('{"a": 1, "b', {"a": 1}),  # a key without its value is left out
    ('{"a": 1, "b":', {"a": 1}),
    ('{"a": 1,', {"a": 1}),
    ('{"a": [1, 2', {"a": [1]}),
    ('{"a": [1, {"b": ["c', {"a": [1, {"b": ["c"]}]}),
    ('{"a": tr', {}),  # an unfinished literal is left out
    ('{"a": true', {"a": True}),
    ('{"a": 12', {}),  # it may have been 123
    ('{"a": 12}', {"a": 12}),
    ('{"a": [12, 3', {"a": [12]}),
    ('{"a": -', {}),
    ('{"a": 1.', {}),
    ('{"a": "x\\u00', {"a": "x"}),  # not half an escape
    ('{"a": "x\\u00e9', {"a": "x\u00e9"}),
    ('{"a": "x\\', {"a": "x"}),
    ('{"a": "q\\"', {"a": 'q"'}),
    ('{"a": "\\\\', {"a": "\\"}),
    ('{"a": "}]{["', {"a": "}]{["}),  # brackets inside strings are text
    ('{"a": {"b": "c"}, ', {"a": {"b": "c"}}),
    ("{", {}),
    ('{"a": 1}', {"a": 1}),
    ("", None),
    ("nonsense", None),
])  # fmt: skip
def test_parse_partial(text: str, want: Any) -> None:
    assert parse_partial(text) == want


def is_prefix(part: Any, whole: Any) -> bool:
    """`part` is `whole` or what a cut leaves of it: strings, lists and objects cut short."""
    if isinstance(part, str):
        return isinstance(whole, str) and whole.startswith(part)
    if isinstance(part, list):
        if not isinstance(whole, list) or len(part) > len(whole):
            return False
        return all(p == w for p, w in zip(part[:-1], whole, strict=False)) and (
            not part or is_prefix(part[-1], whole[len(part) - 1])
        )
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and is_prefix(v, whole[k]) for k, v in part.items())
    return part == whole and type(part) is type(whole)


def test_every_prefix_of_a_document_reads_as_a_prefix_of_its_value() -> None:
    doc = {"city": "Paris \u00e9\n", "days": [1, 22, {"t": -3.5, "ok": False}], "note": None, "q": 'a"b\\'}
    text = json.dumps(doc)
    got = [parse_partial(text[:n]) for n in range(1, len(text) + 1)]
    assert got[-1] == doc and got[0] == {}
    assert all(is_prefix(value, doc) for value in got)
    assert {"city": "Paris"} in got and {"city": "Paris \u00e9\n", "days": [1]} in got
