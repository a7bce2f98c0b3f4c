"""The reasoning formats beyond a plain think block: answer wrappers (Granite's
`<response>`, Command R7B's `<|START_RESPONSE|>`), call markers that end an unclosed think
block (Kimi K2), and gpt-oss's harmony channels; each the same in every chunking."""

from __future__ import annotations

import pytest

from llamay.chat.reasoning import HARMONY, HarmonyParser, ReasoningMarkers, ReasoningParser, detect_reasoning
from llamay.chat.tools import FORMATS, ToolChoice, parse_tools, think_first

from .test_reasoning import all_splits


def run(parser_factory: object, parts: list[str]) -> tuple[str, str]:
    parser = parser_factory()  # type: ignore[operator]
    reasoning = content = ""
    for part in parts:
        r, c = parser.push(part)
        reasoning, content = reasoning + r, content + c
    r, c = parser.finish()
    reasoning, content = reasoning + r, content + c
    assert (parser.reasoning, parser.content) == (reasoning, content)
    return reasoning, content


GRANITE = ReasoningMarkers(answer=("<response>", "</response>"))
R7B = ReasoningMarkers(
    "<|START_THINKING|>", "<|END_THINKING|>", answer=("<|START_RESPONSE|>", "<|END_RESPONSE|>")
)
KIMI = ReasoningMarkers(interrupts=("<|tool_calls_section_begin|>", "<|tool_call_begin|>"))

CASES = [
    (GRANITE, "<think>Plan it.</think><response>Hello</response>", ("Plan it.", "Hello")),
    (GRANITE, "<think>x</think>\n<response>A </response> B", ("x", "A  B")),
    (GRANITE, "No tags at all.", ("", "No tags at all.")),
    (GRANITE, "<think>x</think><respo", ("x", "<respo")),
    (GRANITE, "<think>x</think>A</resp", ("x", "A</resp")),
    (R7B, "<|START_RESPONSE|>Hi!<|END_RESPONSE|>", ("", "Hi!")),
    (R7B, "<|START_THINKING|>a\nb<|END_THINKING|><|START_ACTION|>[]<|END_ACTION|>", ("a\nb", "<|START_ACTION|>[]<|END_ACTION|>")),
    (KIMI, "<think>call now<|tool_calls_section_begin|>X", ("call now", "<|tool_calls_section_begin|>X")),
    (KIMI, "<think>a<|tool_call_begin|>b</think>", ("a", "<|tool_call_begin|>b</think>")),
    (KIMI, "<think>a</think>b<|tool_call_begin|>c", ("a", "b<|tool_call_begin|>c")),
]  # fmt: skip


@pytest.mark.parametrize(("markers", "text", "expected"), CASES)
def test_wrappers_and_interrupts_in_every_split(
    markers: ReasoningMarkers, text: str, expected: tuple[str, str]
) -> None:
    for parts in all_splits(text):
        assert run(lambda: markers.parser(), parts) == expected, parts


HARMONY_CASES = [
    ("plain text, no header", ("", "plain text, no header")),
    (
        "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>",
        ("ab", ""),
    ),
    ("<|channel|>final<|message|>x<|return|>", ("", "x")),
    ("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>fin", ("a", "")),
    (
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>",
        ("", "<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}<|call|>"),
    ),
    ("<|channel|>commentary to=browser.search<|message|>{}<|call|>", ("", "")),
    ("<|channel|>final<|message|>a <|end|> b", ("", "a  b")),
]


@pytest.mark.parametrize(("text", "expected"), HARMONY_CASES)
def test_harmony_channels_in_every_split(text: str, expected: tuple[str, str]) -> None:
    for parts in all_splits(text):
        assert run(HarmonyParser, parts) == expected, parts


def test_harmony_markers() -> None:
    src = "{{ '<|start|>assistant<|channel|>analysis<|message|>' }}"
    markers = detect_reasoning(src, {"<|end|>": 7}.get)
    assert markers is not None and markers.style == "harmony" and markers.close_token == 7
    assert isinstance(markers.parser(), HarmonyParser)
    assert not markers.opened_by("<|start|>assistant<|channel|>analysis<|message|>")
    assert isinstance(ReasoningMarkers().parser(), ReasoningParser)


def test_empty_wrapper_tags_rejected() -> None:
    with pytest.raises(ValueError):
        ReasoningParser(answer=("", "</response>"))
    with pytest.raises(ValueError):
        ReasoningParser(interrupts=("",))


TOOLS = parse_tools([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])


def test_harmony_thinks_in_its_analysis_channel_before_a_forced_call() -> None:
    plan = FORMATS["harmony"].plan(TOOLS, ToolChoice("required"), False, lambda _: None)
    thinking = think_first(plan, HARMONY, started=False, special=lambda _: None)
    call = "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}"
    assert thinking.grammar.matches(call.encode())
    assert thinking.grammar.matches(
        f"<|channel|>analysis<|message|>hmm<|end|><|start|>assistant{call}".encode()
    )
    assert not thinking.grammar.matches(f"<|channel|>analysis<|message|>hmm<|end|>{call}".encode())
    assert not thinking.grammar.matches(b"<|channel|>final<|message|>no call")


def test_a_long_whitespace_lead_is_answer_text() -> None:
    # After a think block the whitespace goes; without one, past 64 characters of it the
    # open tag is text (so nothing holds an unbounded run back, in any split).
    text = "<think>x</think>" + " " * 100 + "<response>A</response>"
    assert {run(lambda: GRANITE.parser(), parts) for parts in all_splits(text)} == {("x", "A")}
    text = " " * 100 + "<response>A</response>"
    assert {run(lambda: GRANITE.parser(), parts) for parts in all_splits(text)} == {
        ("", " " * 100 + "<response>A")
    }
