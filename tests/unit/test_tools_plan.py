"""Plan grammars: only the offered tools, arguments under their schema, one call unless
parallel, then the end; triggers as tokens when the model has them."""

from __future__ import annotations

from typing import Any

import pytest

from llamay.chat.reasoning import ReasoningMarkers
from llamay.chat.tools import FORMATS, ToolChoice, ToolPlan, parse_tools, supports_parallel_calls, think_first
from llamay.grammar import Constraint, byte_compile_cache

TOOLS = parse_tools(
    [
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city"], "additionalProperties": False}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {
            "type": "object", "$defs": {"tz": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "properties": {"tz": {"$ref": "#/$defs/tz"}}, "required": ["tz"]}}},
        {"type": "function", "function": {"name": "ping"}},
    ]
)  # fmt: skip

AUTO, REQUIRED = ToolChoice("auto"), ToolChoice("required")
NAMED = ToolChoice("function", "get_time")
# Byte-tokenizer specials standing in for a model's marker tokens.
TOKENS = {"<tool_call>": 256, "</tool_call>": 257, "[TOOL_CALLS]": 258}


def no_special(text: str) -> int | None:
    return None


def accepts(plan: ToolPlan, *parts: str | int) -> bool:
    """The grammar accepts the text (str parts, bytes) and special tokens (int parts)."""
    if not plan.grammar.uses_tokens:
        assert all(isinstance(p, str) for p in parts)
        return plan.grammar.matches("".join(map(str, parts)).encode())
    constraint = Constraint(plan.grammar, byte_compile_cache())
    tokens: list[int] = []
    for p in parts:
        tokens += list(p.encode()) if isinstance(p, str) else [p]
    return all(constraint.consume(t) for t in tokens) and constraint.is_accepting()


def call(fmt: str, name: str, args: str) -> str:
    """One call as the format writes it (without the marker that triggers it)."""
    if fmt == "llama3":
        return f'{{"name": "{name}", "parameters": {args}}}'
    return f'{{"name": "{name}", "arguments": {args}}}'


WEATHER = '{"city": "Paris", "unit": "C"}'
TIME = '{"tz": "UTC"}'


def lazy_text(fmt: str, *calls: str) -> str:
    """What follows the trigger text for `calls` (each a call object)."""
    if fmt == "hermes":
        return "\n" + "\n</tool_call>\n<tool_call>\n".join(calls) + "\n</tool_call>"
    if fmt == "mistral":
        return " [" + ", ".join(calls) + "]"
    assert fmt == "llama3"
    return "; ".join(calls).removeprefix('{"name": "')


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "llama3"])
def test_lazy_text_trigger(fmt: str) -> None:
    plan = FORMATS[fmt].plan(TOOLS, AUTO, False, no_special)
    assert not plan.immediate and not plan.trigger_tokens
    assert (
        plan.trigger_text == {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]", "llama3": '{"name": "'}[fmt]
    )
    ok = call(fmt, "get_weather", WEATHER)
    assert accepts(plan, lazy_text(fmt, ok))
    assert accepts(plan, lazy_text(fmt, call(fmt, "ping", "{}")))
    assert accepts(plan, lazy_text(fmt, call(fmt, "get_weather", '{"city": "Paris"}')))
    assert accepts(plan, lazy_text(fmt, call(fmt, "get_time", TIME)))
    # Unknown tool, arguments against the schema, a second call, text after the call.
    assert not accepts(plan, lazy_text(fmt, call(fmt, "rm_rf", "{}")))
    assert not accepts(plan, lazy_text(fmt, call(fmt, "get_weather", '{"city": 3}')))
    assert not accepts(plan, lazy_text(fmt, call(fmt, "get_weather", '{"unit": "C"}')))
    assert not accepts(plan, lazy_text(fmt, call(fmt, "get_weather", '{"city": "a", "x": 1}')))
    assert not accepts(plan, lazy_text(fmt, call(fmt, "get_weather", '{"city": "a", "unit": "K"}')))
    assert not accepts(plan, lazy_text(fmt, call(fmt, "get_time", '{"tz": "utc"}')))  # via $ref
    assert not accepts(plan, lazy_text(fmt, call(fmt, "ping", "[]")))
    assert not accepts(plan, lazy_text(fmt, ok, call(fmt, "get_time", TIME)))
    assert not accepts(plan, lazy_text(fmt, ok) + " Done.")


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "llama3"])
def test_parallel_allows_several_calls(fmt: str) -> None:
    plan = FORMATS[fmt].plan(TOOLS, AUTO, True, no_special)
    two = lazy_text(fmt, call(fmt, "get_weather", WEATHER), call(fmt, "get_time", TIME))
    assert accepts(plan, two)
    assert not accepts(plan, lazy_text(fmt, call(fmt, "get_weather", WEATHER), call(fmt, "nope", "{}")))


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "llama3"])
def test_required_is_immediate_and_covers_the_marker(fmt: str) -> None:
    plan = FORMATS[fmt].plan(TOOLS, REQUIRED, False, no_special)
    assert plan.immediate and plan.trigger_text is None and not plan.trigger_tokens
    marker = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]", "llama3": '{"name": "'}[fmt]
    assert accepts(plan, marker + lazy_text(fmt, call(fmt, "get_time", TIME)))
    assert not accepts(plan, "Sure! " + marker + lazy_text(fmt, call(fmt, "get_time", TIME)))
    assert not accepts(plan, "I won't call anything.")


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "llama3"])
def test_named_choice_allows_only_that_tool(fmt: str) -> None:
    plan = FORMATS[fmt].plan(TOOLS, NAMED, True, no_special)
    marker = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]", "llama3": '{"name": "'}[fmt]
    assert accepts(plan, marker + lazy_text(fmt, call(fmt, "get_time", TIME)))
    assert not accepts(plan, marker + lazy_text(fmt, call(fmt, "get_weather", WEATHER)))


def test_mistral_accepts_its_own_call_ids() -> None:
    plan = FORMATS["mistral"].plan(TOOLS, AUTO, False, no_special)
    assert accepts(plan, '[{"name": "ping", "arguments": {}, "id": "abc123XYZ"}]')
    assert not accepts(plan, '[{"name": "ping", "arguments": {}, "id": "short"}]')


def test_hermes_uses_marker_tokens() -> None:
    special = TOKENS.get
    plan = FORMATS["hermes"].plan(TOOLS, AUTO, True, special)
    assert plan.trigger_tokens == {256} and plan.trigger_text is None and not plan.immediate
    body = "\n" + call("hermes", "get_time", TIME) + "\n"
    assert accepts(plan, body, 257)
    assert accepts(plan, body, 257, "\n", 256, body, 257)
    assert not accepts(plan, body + "</tool_call>")  # spelled out, not the token
    forced = FORMATS["hermes"].plan(TOOLS, REQUIRED, False, special)
    assert forced.immediate and accepts(forced, 256, body, 257)
    assert not accepts(forced, "<tool_call>" + body, 257)


def test_mistral_uses_marker_token() -> None:
    plan = FORMATS["mistral"].plan(TOOLS, REQUIRED, False, TOKENS.get)
    assert accepts(plan, 258, "[" + call("mistral", "ping", "{}") + "]")
    lazy = FORMATS["mistral"].plan(TOOLS, AUTO, False, TOKENS.get)
    assert lazy.trigger_tokens == {258} and lazy.trigger_text is None


@pytest.mark.parametrize("choice", [AUTO, REQUIRED])
def test_generic_is_always_immediate(choice: ToolChoice) -> None:
    plan = FORMATS["generic"].plan(TOOLS, choice, False, no_special)
    assert plan.immediate
    one = '{"tool_calls": [' + call("generic", "get_time", TIME) + "]}"
    two = '{"tool_calls": [' + call("generic", "get_time", TIME) + ", " + call("generic", "ping", "{}") + "]}"
    assert accepts(plan, one)
    assert not accepts(plan, two)
    assert not accepts(plan, '{"tool_calls": [' + call("generic", "nope", "{}") + "]}")
    assert not accepts(plan, '{"tool_calls": [' + call("generic", "get_time", '{"tz": 1}') + "]}")
    assert not accepts(plan, "Plain text")
    assert accepts(plan, '{"response": "Hi \\"there\\""}') is (choice.mode == "auto")
    parallel = FORMATS["generic"].plan(TOOLS, choice, True, no_special)
    assert accepts(parallel, two)


def test_none_has_no_plan() -> None:
    with pytest.raises(ValueError):
        FORMATS["hermes"].plan(TOOLS, ToolChoice("none"), False, no_special)


@pytest.mark.parametrize("fmt", ["hermes", "mistral", "llama3", "generic"])
def test_grammar_and_parser_agree(fmt: str) -> None:
    """A constrained output (forced plan) parses back into the same calls."""
    plan = FORMATS[fmt].plan(TOOLS, REQUIRED, True, no_special)
    calls = [call(fmt, "get_weather", WEATHER), call(fmt, "get_time", TIME)]
    if fmt == "generic":
        text = '{"tool_calls": [' + ", ".join(calls) + "]}"
    else:
        marker = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]", "llama3": '{"name": "'}[fmt]
        text = marker + lazy_text(fmt, *calls)
    assert accepts(plan, text)
    parser = FORMATS[fmt].parser(TOOLS)
    parser.push(text)
    parser.finish()
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", WEATHER), ("get_time", TIME)]
    assert parser.content == ""


def test_plan_rejects_a_schema_it_cannot_enforce() -> None:
    from llamay.chat.tools import ToolSpec
    from llamay.errors import GrammarError

    bad: Any = ToolSpec(
        "x",
        parameters={"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
        strict=True,
    )
    with pytest.raises(GrammarError):
        FORMATS["hermes"].plan([bad], AUTO, False, no_special)


def test_think_first_text_markers() -> None:
    plan = FORMATS["hermes"].plan(TOOLS, REQUIRED, False, no_special)
    body = '<tool_call>{"name": "ping", "arguments": {}}</tool_call>'
    fresh = think_first(plan, ReasoningMarkers(), started=False, special=no_special)
    assert accepts(fresh, body)
    assert accepts(fresh, "<think>\nWhich tool? </ not yet\n</think>\n\n" + body)
    assert not accepts(fresh, "<think>x</think>Just text")
    opened = think_first(plan, ReasoningMarkers(), started=True, special=no_special)
    assert accepts(opened, "Which tool?\n</think>\n" + body)
    assert not accepts(opened, body)  # the open block must be closed first
    lazy = FORMATS["hermes"].plan(TOOLS, AUTO, False, no_special)
    assert think_first(lazy, ReasoningMarkers(), started=True, special=no_special) is lazy


def test_think_first_token_markers() -> None:
    special = {**TOKENS, "<think>": 259, "</think>": 260}.get
    plan = FORMATS["hermes"].plan(TOOLS, REQUIRED, False, special)
    body: list[str | int] = ['{"name": "ping", "arguments": {}}', 257]
    markers = ReasoningMarkers("<think>", "</think>", 259, 260)
    fresh = think_first(plan, markers, started=False, special=special)
    assert accepts(fresh, 259, "hmm </think> spelled out", 260, "\n\n", 256, *body)
    assert accepts(fresh, 256, *body)
    opened = think_first(plan, markers, started=True, special=special)
    assert accepts(opened, "hmm", 260, 256, *body)
    assert not accepts(opened, 256, *body)


@pytest.mark.parametrize(
    ("template", "several"),
    [
        (None, False),
        ("{% for m in messages %}{{ m['content'] }}{% endfor %}", False),  # no tool support
        ("{%- for tool_call in message.tool_calls %}<tool_call>{{ tool_call }}{% endfor %}", True),
        ("{% for call in message['tool_calls'] %}{{ call.function.name }}{% endfor %}", True),
        (  # Llama 3.1: one call per turn, or the template raises
            "{%- if not message.tool_calls|length == 1 %}{{- raise_exception('This model only supports "
            "single tool-calls at once!') }}{%- endif %}{%- set tool_call = message.tool_calls[0].function %}",
            False,
        ),
        ("{# for tool_call in message.tool_calls #} tool_calls in text only", False),
    ],
)
def test_parallel_calls_follow_what_the_template_can_show(template: str | None, several: bool) -> None:
    assert supports_parallel_calls(template) is several
