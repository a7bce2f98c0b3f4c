"""Each family's template shows the model its own past calls: rendered through the
template (after the format's `prepare`), an assistant turn with tool calls reads back,
through the same parsers as a generated one, as exactly those calls, and (where the
format has a lazy grammar) the grammar that constrains a triggered call accepts the
template's own layout of it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llamay.chat.template import ChatTemplate
from llamay.chat.tools import ToolChoice, parse_tools, supports_parallel_calls
from llamay.chat.traits import detect_traits

from .dialect_support import template
from .test_tools_dialects import split

TOOLS = parse_tools(
    [
        {"type": "function", "function": {"name": "get_weather", "description": "Weather now.", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "description": "City."}}, "required": ["city"]}}},
        {"type": "function", "function": {"name": "special_function", "description": "Special.", "parameters": {
            "type": "object", "properties": {"arg1": {"type": "integer", "description": "Arg."}}, "required": ["arg1"]}}},
    ]
)  # fmt: skip
CALLS = [
    {
        "id": "call_a1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    },
    {
        "id": "call_b2",
        "type": "function",
        "function": {"name": "special_function", "arguments": '{"arg1": 1}'},
    },
]
WANT = [("get_weather", {"city": "Paris"}), ("special_function", {"arg1": 1})]

# template -> (the assistant header its turn starts with, the end of the turn, whether
# the lazy grammar accepts its layout after the trigger). The turn is what the template
# adds for the assistant message.
TURNS = {
    "meta-llama-Llama-3.1-8B-Instruct": (
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>",
        True,
    ),
    "meta-llama-Llama-3.2-3B-Instruct": (
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>",
        True,
    ),
    "meta-llama-Llama-3.3-70B-Instruct": (
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>",
        True,
    ),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("<|im_start|>assistant\n", "<|im_end|>", True),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<|im_start|>assistant\n", "<|im_end|>", True),
    "Qwen-Qwen2.5-7B-Instruct": ("<|im_start|>assistant\n", "<|im_end|>", True),
    "Qwen-Qwen3-0.6B": ("<|im_start|>assistant\n", "<|im_end|>", True),
    "Qwen-QwQ-32B": ("<|im_start|>assistant\n", "<|im_end|>", True),
    "Qwen3-Coder": ("<|im_start|>assistant\n", "<|im_end|>", True),
    "Qwen3.5-4B": ("<|im_start|>assistant\n", "<|im_end|>", True),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<｜Assistant｜>", "<｜end▁of▁sentence｜>", True),
    "deepseek-ai-DeepSeek-V3.1": ("<｜Assistant｜>", "<｜end▁of▁sentence｜>", True),
    "mistralai-Mistral-Nemo-Instruct-2407": ("[/INST]", "</s>", True),
    "Mistral-Small-3.2-24B-Instruct-2506": ("[/INST]", "</s>", True),
    "unsloth-mistral-Devstral-Small-2507": ("[/INST]", "</s>", True),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("[/INST]", "</s>", True),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>", True),
    "CohereForAI-c4ai-command-r-plus-tool_use": ("<|CHATBOT_TOKEN|>", "<|START_OF_TURN_TOKEN|>", True),
    "fireworks-ai-llama-3-firefunction-v2": (
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eot_id|>",
        True,
    ),
    "ibm-granite-granite-3.3-2B-Instruct": (
        "<|start_of_role|>assistant<|end_of_role|>",
        "<|end_of_text|>",
        True,
    ),
    "ibm-granite-granite-4.0": ("<|start_of_role|>assistant<|end_of_role|>", "<|end_of_text|>", True),
    "meetkai-functionary-medium-v3.1": (
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "<|eom_id|>",
        True,
    ),
    "openai-gpt-oss-120b": ("<|start|>assistant", "<|call|>", True),
    "moonshotai-Kimi-K2": ("<|im_assistant|>assistant<|im_middle|>", "<|im_end|>", True),
    "GLM-4.6": ("<|assistant|>", "<|user|>", True),
    "MiniMax-M2": ("]~b]ai\n", "[e~[", True),
    "LFM2-8B-A1B": ("<|im_start|>assistant\n", "<|im_end|>", True),
    "LFM2.5-8B-A1B": ("<|im_start|>assistant\n", "<|im_end|>", False),  # writes 'Paris', grammar JSON strings
}


def assistant_turn(stem: str, n: int) -> tuple[str, Any]:
    """The text the template writes for an assistant message with `n` of CALLS: after
    the user's words, from the assistant's header to the end of its turn."""
    src = template(stem)
    traits = detect_traits(src, lambda _: None)
    fmt = traits.tool_format
    chat = ChatTemplate(src, bos_token="<s>", eos_token="</s>")
    said = "Weather in Paris?"
    messages, extra = fmt.prepare(
        [{"role": "user", "content": said}, {"role": "assistant", "content": "", "tool_calls": CALLS[:n]}],
        TOOLS,
    )
    full = chat.render(messages, add_generation_prompt=False, **extra)
    start, end, _ = TURNS[stem]
    after = full[full.index(said) + len(said) :]
    turn = after[after.index(start) + len(start) :]
    return turn[: turn.index(end)] if end in turn else turn, traits


def counts(stem: str) -> list[int]:
    """One call; two as well when the template can show several in one turn."""
    return [1, 2] if supports_parallel_calls(template(stem)) else [1]


@pytest.mark.parametrize("stem", sorted(TURNS))
def test_the_templates_own_calls_read_back(stem: str) -> None:
    for n in counts(stem):
        turn, traits = assistant_turn(stem, n)
        out = split(traits, False, TOOLS, [turn])
        calls = out["parser"].calls
        assert [(c.name, json.loads(c.arguments)) for c in calls] == WANT[:n], turn
        assert out["parser"].content == "" and out["reasoning"] == "", turn


@pytest.mark.parametrize("stem", sorted(s for s, t in TURNS.items() if t[2]))
def test_the_lazy_grammar_accepts_the_templates_layout(stem: str) -> None:
    for n in counts(stem):
        turn, traits = assistant_turn(stem, n)
        plan = traits.tool_format.plan(TOOLS, ToolChoice("auto"), n > 1, lambda _: None)
        if plan.immediate:
            assert plan.grammar.matches(turn.encode()), turn
            continue
        assert plan.trigger_text is not None
        if traits.tool_format.name == "harmony":
            continue  # its grammar runs on the raw channels, not on the template's history layout
        at = turn.index(plan.trigger_text)
        assert plan.grammar.matches(turn[at + len(plan.trigger_text) :].encode()), turn
        # ... and nothing else: another tool's name, or arguments against the schema.
        if n == 1:
            wrong = turn.replace("get_weather", "get_wexther")
        else:
            wrong = turn
            for good, bad in NOT_AN_INTEGER:
                wrong = wrong.replace(good, bad)
        assert wrong != turn
        assert not plan.grammar.matches(wrong[at + len(plan.trigger_text) :].encode()), wrong


# special_function's integer argument, as each layout writes it, made a string.
NOT_AN_INTEGER = [
    ('"arg1": 1', '"arg1": "x"'),
    ("<parameter=arg1>\n1\n", "<parameter=arg1>\nx\n"),
    ("<arg_value>1<", "<arg_value>x<"),
    ('name="arg1">1<', 'name="arg1">x<'),
    ("arg1=1", "arg1='x'"),
]


@pytest.mark.parametrize("stem", sorted(TURNS))
def test_a_call_to_a_tool_not_offered_is_not_reported_and_not_lost(stem: str) -> None:
    turn, traits = assistant_turn(stem, 1)
    offered = [t for t in TOOLS if t.name != "get_weather"]
    out = split(traits, False, offered, [turn])
    assert out["parser"].calls == []
    assert "get_weather" in out["parser"].content
