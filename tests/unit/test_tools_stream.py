"""ToolStreamParser: same results for every split of the text, per format."""

from __future__ import annotations

import json
import random
import re
from typing import Any

import pytest

from llamay.chat.tools import (
    FINISH_TOOL,
    FORMATS,
    ContentDelta,
    Delta,
    ToolArgsDelta,
    ToolCallStart,
    ToolSpec,
    parse_tools,
)
from llamay.chat.tools.deltas import coalesce
from llamay.chat.tools.jsonscan import JsonScanner, Path

TOOLS = [
    *parse_tools(
        [
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}}}},
        ]
    ),
    FINISH_TOOL,
]  # fmt: skip
ID = re.compile(r"call_[0-9a-f]{24}")

# (format, generated text, expected content, expected [(name, arguments)])
SAMPLES: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    (
        "hermes",
        "Just text, no calls. <tool and <b> stay.\n",
        "Just text, no calls. <tool and <b> stay.\n",
        [],
    ),
    (
        "hermes",
        'Let me look.\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par\\"is </tool_call> é"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "search", "arguments": {"q": "a\\\\b", "n": 3}}\n</tool_call>',
        "Let me look.",
        [("get_weather", '{"city": "Par\\"is </tool_call> é"}'), ("search", '{"q": "a\\\\b", "n": 3}')],
    ),
    (
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "finish", "arguments": {"summary": "It is \\"cold\\" \\u00e9\\ud83d\\ude00\\nBye"}}\n</tool_call>',
        'It is "cold" é😀\nBye',
        [("get_weather", '{"city": "Oslo"}')],
    ),
    (
        "llama3",
        '{"name": "get_weather", "parameters": {"city": "Rome"}}',
        "",
        [("get_weather", '{"city": "Rome"}')],
    ),
    (
        "llama3",
        'Sure. <|python_tag|>{"name": "search", "parameters": {"q": "{\\"name\\": \\"x\\"}"}}; '
        '{"name": "get_weather", "parameters": {}}',
        "Sure.",
        [("search", '{"q": "{\\"name\\": \\"x\\"}"}'), ("get_weather", "{}")],
    ),
    (
        "mistral",
        'Checking [weather] now [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Lyon"}, "id": "a1b2c3d4e"}, '
        '{"name": "search", "arguments": {"q": "x"}}]',
        "Checking [weather] now",
        [("get_weather", '{"city": "Lyon"}'), ("search", '{"q": "x"}')],
    ),
    (
        "mistral",
        '[TOOL_CALLS][{"name": "finish", "arguments": {"summary": "done"}}]',
        "done",
        [],
    ),
    ("generic", ' {"response": "Hello, \\"world\\"\\n\\t!"}', 'Hello, "world"\n\t!', []),
    (
        "generic",
        '{"tool_calls": [{"name": "search", "arguments": {"q": "]}"}}, {"name": "get_weather", "arguments": {"city": "X"}}]}',
        "",
        [("search", '{"q": "]}"}'), ("get_weather", '{"city": "X"}')],
    ),
    (
        "generic",
        '{"tool_calls": [{"name": "finish", "arguments": {"summary": "all good"}}]}',
        "all good",
        [],
    ),
    ("generic", "I will not answer in JSON.", "I will not answer in JSON.", []),
]


def splits(text: str) -> list[list[str]]:
    """The whole text, one character at a time, and random splits."""
    out = [[text], list(text)]
    rng = random.Random(len(text))
    for _ in range(20):
        cuts = (
            sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 8))))
            if len(text) > 1
            else []
        )
        bounds = [0, *cuts, len(text)]
        out.append([text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)])
    return out


def run(
    fmt: str, parts: list[str], tools: list[ToolSpec] = TOOLS, finish: str | None = "finish"
) -> tuple[list[Delta], Any]:
    parser = FORMATS[fmt].parser(tools, finish_tool=finish)
    deltas: list[Delta] = []
    for part in parts:
        deltas += parser.push(part)
    deltas += parser.finish()
    return deltas, parser


def normalized(deltas: list[Delta]) -> list[Delta]:
    """Coalesced deltas with ids replaced by their call index (ids are random)."""
    out: list[Delta] = []
    for d in coalesce(deltas):
        if isinstance(d, ToolCallStart):
            assert ID.fullmatch(d.id)
            d = ToolCallStart(d.index, f"#{d.index}", d.name)
        out.append(d)
    return out


@pytest.mark.parametrize(("fmt", "text", "content", "calls"), SAMPLES)
def test_every_split_gives_the_same_result(
    fmt: str, text: str, content: str, calls: list[tuple[str, str]]
) -> None:
    reference = None
    for parts in splits(text):
        deltas, parser = run(fmt, parts)
        assert parser.content == content
        assert [(c.name, c.arguments) for c in parser.calls] == calls
        for call in parser.calls:
            assert ID.fullmatch(call.id)
            json.loads(call.arguments)
        # Deltas agree with the summary properties.
        text_out = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
        args: dict[int, str] = {}
        for d in deltas:
            if isinstance(d, ToolArgsDelta):
                args[d.index] = args.get(d.index, "") + d.fragment
        assert text_out == content
        assert [args.get(i, "") for i in range(len(calls))] == [a for _, a in calls]
        starts = [d for d in deltas if isinstance(d, ToolCallStart)]
        assert [(s.index, s.id, s.name) for s in starts] == [
            (i, c.id, c.name) for i, c in enumerate(parser.calls)
        ]
        if reference is None:
            reference = normalized(deltas)
        assert normalized(deltas) == reference


def test_content_streams_before_the_output_ends() -> None:
    parser = FORMATS["hermes"].parser(TOOLS)
    assert parser.push("Hello wor") == [ContentDelta("Hello wor")]
    # "<tool" may start <tool_call>, and the space before it is dropped if it does.
    assert parser.push("ld <tool") == [ContentDelta("ld")]
    assert parser.push("box>") == [ContentDelta(" <toolbox>")]


def test_call_streams_name_then_arguments() -> None:
    parser = FORMATS["hermes"].parser(TOOLS)
    assert parser.push('<tool_call>{"name": "sea') == []
    (start,) = parser.push('rch", "argu')
    assert isinstance(start, ToolCallStart) and start.name == "search" and start.index == 0
    assert parser.push('ments": {"q": "ab') == [ToolArgsDelta(0, '{"q": "ab')]
    assert parser.push('c"}}</tool_call>') == [ToolArgsDelta(0, 'c"}')]
    assert parser.finish() == []


def test_finish_summary_streams_as_it_is_generated() -> None:
    parser = FORMATS["hermes"].parser(TOOLS, finish_tool="finish")
    assert parser.push('<tool_call>{"name": "finish", "arguments": {"summary": "Hel') == [ContentDelta("Hel")]
    assert parser.push("lo\\u00") == [ContentDelta("lo")]
    assert parser.push("e9!") == [ContentDelta("é!")]
    assert parser.calls == []


def test_finish_tool_without_flag_is_an_ordinary_call() -> None:
    _, parser = run(
        "hermes", ['<tool_call>{"name": "finish", "arguments": {"summary": "x"}}</tool_call>'], finish=None
    )
    assert [(c.name, c.arguments) for c in parser.calls] == [("finish", '{"summary": "x"}')]


def test_unknown_tool_becomes_content() -> None:
    _, parser = run("hermes", ['<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>'])
    assert parser.calls == []
    assert parser.content == '{"name": "rm_rf", "arguments": {}}'


def test_truncated_call_keeps_partial_arguments() -> None:
    deltas, parser = run("hermes", ['<tool_call>{"name": "search", "arguments": {"q": "unfini'])
    assert [(c.name, c.arguments) for c in parser.calls] == [("search", '{"q": "unfini')]
    assert parser.content == ""


def test_truncated_marker_without_a_call_is_content() -> None:
    _, parser = run("hermes", ['Hi <tool_call>{"na'])
    assert parser.calls == [] and parser.content == 'Hi<tool_call>{"na'
    _, parser = run("hermes", ["Hi <tool_c"])
    assert parser.content == "Hi <tool_c"


def test_not_json_after_marker_is_content() -> None:
    _, parser = run("mistral", ["[TOOL_CALLS] oops, not JSON"])
    assert parser.calls == []
    assert parser.content == "[TOOL_CALLS] oops, not JSON"


def test_stringified_arguments_are_decoded() -> None:
    # Unconstrained models sometimes send arguments as a JSON string.
    _, parser = run(
        "hermes", ['<tool_call>{"name": "search", "arguments": "{\\"q\\": \\"x\\"}"}</tool_call>']
    )
    assert [(c.name, c.arguments) for c in parser.calls] == [("search", '{"q": "x"}')]


def test_push_after_finish_raises() -> None:
    parser = FORMATS["generic"].parser(TOOLS)
    parser.finish()
    with pytest.raises(RuntimeError):
        parser.push("x")


class _Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, Path, Any]] = []

    def start(self, path: Path, pos: int, char: str) -> None:
        self.events.append(("start", path, char))

    def end(self, path: Path, pos: int) -> None:
        self.events.append(("end", path, pos))

    def text(self, path: Path, chunk: str) -> None:
        self.events.append(("text", path, chunk))


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ('{"a": [1, -2.5e3, true, null, {"b": "\\u00e9"}], "c": {}}', True),
        ("[]", True),
        ('{"a" 1}', False),
        ("[1,]", False),
        ("{,}", False),
        ('"\\x"', False),
        ("[tru]", False),
        ("[01.]", False),
    ],
)
def test_json_scanner(text: str, ok: bool) -> None:
    rec = _Recorder()
    scanner = JsonScanner(rec)
    scanner.feed(text)
    assert (scanner.done and scanner.error is None) == ok
    if ok:
        assert scanner.pos == len(text)
        assert ("end", (), len(text)) in rec.events
