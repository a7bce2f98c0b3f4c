"""The canonical indented layout (grammar/layout.py): what json.dumps(indent=2) writes is
accepted byte by byte, and the gaps a model might choose instead are not."""

from __future__ import annotations

import json

import pytest

from llamay.grammar.layout import MAX_INDENT, Indented

VALUES = [
    {},
    [],
    {"a": 1},
    {"a": [1, {"b": 'x," }', "c": []}], "d": {}, "e": None, "f": [True, False, -1.5e3]},
    [[[]], {"k": {"k": {"k": "v"}}}],
    "plain string",
    42,
]


@pytest.mark.parametrize("value", VALUES)
def test_json_dumps_indent_2_is_the_layout(value: object) -> None:
    text = json.dumps(value, indent=2).encode()
    whole = Indented()
    assert whole.feed(text)
    # token by token (any split) gives the same verdicts
    step = Indented()
    for i in range(len(text)):
        assert step.accepts(text[i : i + 1])
        step.feed(text[i : i + 1])
    assert step.depth == 0 and not step.in_string


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1}',  # compact after the brace
        '{"a": 1 ,"b": 2}',
        '{\n  "a": 1\n  ,\n  "b": 2\n}',  # newline before the comma
        '{\n  "a"\n: 1\n}',  # newline after a key
        '{\n  "a":1\n}',  # no space after the colon
        '{\n  "a":  1\n}',  # two
        '{\n"a": 1\n}',  # wrong depth
        '{\n  "a": {\n  }\n}',  # an empty object is {}
        " {}",
        "{}\n",
        "[\n  1,2\n]",
    ],
)
def test_other_gaps_are_refused(text: str) -> None:
    assert not Indented().feed(text.encode())


def test_a_refused_piece_is_judged_on_a_copy_and_the_state_follows_the_text() -> None:
    scan = Indented()
    scan.feed(b'{\n  "a": ')
    assert not scan.accepts(b"1 }") and scan.accepts(b"1\n}")
    assert scan.gap(ord("1")) == b" " and scan.ws == b" "  # the gap after a colon, written already
    scan.feed(b"1")
    assert scan.gap(ord("}")) == b"\n" and scan.gap(ord(",")) == b""
    assert not scan.feed(b" ,")  # left the layout once ...
    assert scan.feed(b'\n  "b": 2\n}')  # ... and is judged on from where the text is


def test_deep_nesting_keeps_the_widest_indent_the_grammar_allows() -> None:
    depth = MAX_INDENT // 2 + 3
    value: object = 0
    for _ in range(depth):
        value = [value]
    lines = json.dumps(value, indent=2).splitlines()
    capped = "\n".join(" " * min(len(x) - len(x.lstrip()), MAX_INDENT) + x.lstrip() for x in lines)
    assert Indented().feed(capped.encode())


def after(prefix: str) -> Indented:
    scan = Indented()
    scan.feed(prefix.encode())
    return scan


@pytest.mark.parametrize(
    ("prefix", "piece", "respaced"),
    [
        ('[\n  "a"', ', "b"]', ',\n  "b"\n]'),  # an inline list, in the layout
        ('[\n  "v', '"]', '"\n]'),  # a quote joined to a bracket
        ("{", ' "', '\n  "'),
        ('{\n  "a":', "  1", " 1"),
        ('{\n  "a": ', "1 ,", "1,"),
        ('{\n  "a": 1', ",", ","),  # already in the layout: the same bytes
        ('{\n  "a": 1', ", ", ",\n  "),  # a trailing gap after a comma is written whole
        ('{\n  "s": "x', 'y z",', 'y z",'),  # inside a string nothing changes
        ('{\n  "a": 1', " ", None),  # a gap after a value could only lead to a closer
        ('{\n  "a": 1\n ', "}", None),  # the gap written so far does not start the one needed
    ],
)
def test_respace_writes_a_piece_in_the_layout(prefix: str, piece: str, respaced: str | None) -> None:
    scan = after(prefix)
    got = scan.respace(piece.encode())
    assert got == (None if respaced is None else respaced.encode())
    if got is not None:
        assert scan.accepts(got)
    assert scan.ws == after(prefix).ws and scan.prev == after(prefix).prev  # nothing advanced


def test_pending_close_is_the_rest_of_the_gap_before_the_closer() -> None:
    assert after('{\n  "a": [\n    1\n ').pending_close() == b" ]"
    assert after('{\n  "a": 1\n').pending_close() == b"}"
    assert after('{\n  "a": 1').pending_close() is None  # no gap yet
    assert after('{\n  "a": 1,\n').pending_close() is None  # a gap after a comma leads to a key
