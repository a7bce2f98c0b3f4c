"""Block programs (chat/tools/program.py): the steps give the same results however the
text is split, and a block that turns out not to be a call gives its text back."""

from __future__ import annotations

from typing import Any

import pytest

from llamay.chat.tools import ContentDelta, ToolArgsDelta, ToolCallStart, parse_tools
from llamay.chat.tools.block import CallSyntax
from llamay.chat.tools.program import Args, BlockIO, Lit, Mismatch, Opt, Program, Text, Until
from llamay.chat.tools.stream import ToolStreamParser

from .test_reasoning import all_splits

TOOLS = parse_tools([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])


def toy(io: BlockIO, opener: str) -> Program:
    """`@@name: {json}` then an optional `;;`; `note:` text to the end is content."""
    name, stop = yield Until([":"], 16)
    if name == "note":
        yield Text([], io.content)
        return
    call = io.call(name)
    yield Args(call)
    yield Opt([";;"])
    if not call.known:
        io.content(opener + io.raw)


def caught(io: BlockIO, opener: str) -> Program:
    """Like toy, but a call whose end is malformed is kept (its arguments were complete)."""
    name, _ = yield Until([":"], 16)
    call = io.call(name)
    yield Args(call)
    try:
        yield Lit("!!")
    except Mismatch:
        return


def parse(program: Any, text: str) -> tuple[str, list[tuple[str, str]]]:
    results = set()
    for parts in all_splits(text):
        parser = ToolStreamParser(CallSyntax(openers=(("@@", ""),), program=program), TOOLS)
        deltas = [d for p in parts for d in parser.push(p)] + parser.finish()
        content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
        args = "".join(d.fragment for d in deltas if isinstance(d, ToolArgsDelta))
        starts = [d.name for d in deltas if isinstance(d, ToolCallStart)]
        assert [(c.name, c.arguments) for c in parser.calls] == ([(starts[0], args)] if starts else [])
        results.add((content, tuple((c.name, c.arguments) for c in parser.calls)))
    assert len(results) == 1, results
    content, calls = results.pop()
    return content, list(calls)


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ('Hi @@f: {"a": [1, "}"]};; bye', "Hibye", [("f", '{"a": [1, "}"]}')]),  # spaces at a call dropped
        ('@@f:{"a": 1}', "", [("f", '{"a": 1}')]),
        ('@@f: "{\\"a\\": 2}"', "", [("f", '{"a": 2}')]),  # arguments as a JSON string
        ('@@g: {"a": 1} and', '@@g: {"a": 1}and', []),  # not a tool of the request
        ("@@f: not json", "@@f: not json", []),  # not a call after all
        ("@@" + "x" * 40 + ": {}", "@@" + "x" * 40 + ": {}", []),  # a name past its limit
        ("@@note: anything @@f: {}", " anything @@f: {}", []),  # content streamed by the program
        ('@@f: {"a": 1', "", [("f", '{"a": 1')]),  # cut off: partial arguments kept
        ("@@f", "@@f", []),  # cut off before anything was reported
    ],
)
def test_toy_program(text: str, content: str, calls: list[tuple[str, str]]) -> None:
    assert parse(toy, text) == (content, calls)


def test_a_program_may_catch_a_mismatch() -> None:
    assert parse(caught, '@@f: {"a": 1}!! ok') == ("ok", [("f", '{"a": 1}')])
    assert parse(caught, '@@f: {"a": 1}?? ok') == ("?? ok", [("f", '{"a": 1}')])


def test_until_searches_each_character_once() -> None:
    op = Until(["</end>"], limit=1 << 20)
    buf = ""
    for _ in range(2000):
        buf += "abc</en"[:3]
        n, result = op.step(buf, False)
        assert n == 0 and op._searched == len(buf)
    n, result = op.step(buf + "</end>", False)
    assert result == (buf, "</end>") and n == len(buf) + 6


def test_a_string_parameter_streams_as_it_is_written() -> None:
    from llamay.chat.tools.xmlcalls import QwenXmlFormat

    tools = parse_tools([{"type": "function", "function": {"name": "write", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"}}}}}])  # fmt: skip
    parser = QwenXmlFormat().parser(tools)
    assert [type(d) for d in parser.push("<tool_call>\n<function=write>\n<parameter=text>\nline one\n")] == [
        ToolCallStart,
        ToolArgsDelta,
    ]
    assert parser.calls[0].arguments == '{"text": "line one'  # the newline waits: it may be the layout's
    assert parser.push("line two\n</parameter>\n") == [ToolArgsDelta(0, '\\nline two"')]
    parser.push("<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>")
    parser.finish()
    assert parser.calls[0].arguments == '{"text": "line one\\nline two", "n": 3}'


def test_command_r_plus_may_answer_directly_when_the_choice_is_auto() -> None:
    from llamay.chat.tools import FORMATS, ToolChoice

    fmt = FORMATS["command_r_plus"]
    direct = '\n```json\n[{"tool_name": "directly-answer", "parameters": {}}]\n```'
    parser = fmt.parser(TOOLS)
    parser.push("Action:" + direct)
    parser.finish()
    assert parser.calls == [] and parser.content == ""  # not a call, and nothing to show
    assert fmt.plan(TOOLS, ToolChoice("auto"), False, lambda _: None).grammar.matches(direct.encode())
    forced = fmt.plan(TOOLS, ToolChoice("required"), False, lambda _: None)
    assert not forced.grammar.matches(("Action:" + direct).encode())
    assert forced.grammar.matches(b'Action:\n```json\n[{"tool_name": "f", "parameters": {}}]```')
