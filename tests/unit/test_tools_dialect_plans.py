"""Constrained emission in every dialect, against real vocabularies: a forced call
(`tool_choice` required or a named tool) written by a model with random weights comes out
as a call in the family's own format that the family's parser reads back, to an offered
tool, with arguments valid under its schema; one call unless parallel calls are on; a
thinking family thinks first and still calls.

The vocabularies are llama.cpp's `ggml-vocab-*.gguf` (see dialect_support), with each
family's markers added as special tokens where the stand-in lacks them.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from llamay.chat.reasoning import ReasoningMarkers
from llamay.chat.tools import ToolChoice, ToolSpec, parse_tools, think_first
from llamay.chat.traits import Traits, detect_traits

from .dialect_support import Vocab, random_walk, template, vocab
from .test_tools_dialects import split

THINK = ("<think>", "</think>")
MARKERS = {
    "qwen2": (
        *THINK, "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
        "<minimax:tool_call>", "</minimax:tool_call>", "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
        "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
    ),
    "llama-bpe": (
        *THINK, "<|python_tag|>", "<|eom_id|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]",
        "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>",
        "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>",
        "<|tool_call_start|>", "<|tool_call_end|>",
    ),
    "command-r": (
        "<|START_THINKING|>", "<|END_THINKING|>", "<|START_ACTION|>", "<|END_ACTION|>",
        "<|START_RESPONSE|>", "<|END_RESPONSE|>",
    ),
    "starcoder": (*THINK, "<|tool_call|>"),
    "phi-3": (),
    "gemma-4": (),
}  # fmt: skip

# format -> (vocabulary, the family's template)
FAMILIES = {
    "hermes": ("qwen2", "Qwen-Qwen3-0.6B"),
    "qwen3_coder": ("qwen2", "Qwen3.5-4B"),
    "glm": ("qwen2", "GLM-4.6"),
    "minimax": ("qwen2", "MiniMax-M2"),
    "kimi_k2": ("qwen2", "Kimi-K2-Thinking"),
    "llama3": ("llama-bpe", "meta-llama-Llama-3.1-8B-Instruct"),
    "mistral": ("llama-bpe", "mistralai-Mistral-Nemo-Instruct-2407"),
    "mistral_args": ("llama-bpe", "mistralai-Ministral-3-14B-Reasoning-2512"),
    "mistral_ids": ("llama-bpe", "Mistral-Small-3.2-24B-Instruct-2506"),
    "functionary_v3_1": ("llama-bpe", "meetkai-functionary-medium-v3.1"),
    "functionary_v3_2": ("llama-bpe", "meetkai-functionary-medium-v3.2"),
    "firefunction": ("llama-bpe", "fireworks-ai-llama-3-firefunction-v2"),
    "deepseek_r1": ("llama-bpe", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"),
    "deepseek_v3_1": ("llama-bpe", "deepseek-ai-DeepSeek-V3.1"),
    "harmony": ("llama-bpe", "openai-gpt-oss-120b"),
    "pythonic": ("llama-bpe", "LFM2.5-8B-A1B"),
    "command_r_plus": ("command-r", "CohereForAI-c4ai-command-r-plus-tool_use"),
    "command_r7b": ("command-r", "CohereForAI-c4ai-command-r7b-12-2024-tool_use"),
    "granite": ("starcoder", "ibm-granite-granite-3.3-2B-Instruct"),
    "generic": ("phi-3", "microsoft-Phi-3.5-mini-instruct"),
    "gemma4": ("gemma-4", "google-gemma-4-31B-it"),
}

TOOLS = parse_tools(
    [
        {"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]},
                                             "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city"], "additionalProperties": False}}},
        {"type": "function", "function": {"name": "set_alarm", "parameters": {
            "type": "object", "properties": {"at": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"},
                                             "repeat": {"type": ["boolean", "null"]}},
            "required": ["at"]}}},
        {"type": "function", "function": {"name": "ping"}},
    ]
)  # fmt: skip
SCHEMAS = {t.name: t.parameters for t in TOOLS}


def family(fmt: str) -> tuple[Vocab, Traits]:
    name, stem = FAMILIES[fmt]
    v = vocab(name, MARKERS[name])
    traits = detect_traits(template(stem), v.special)
    assert traits.tool_format.name == fmt
    return v, traits


def calls_of(
    text: str, traits: Traits, tools: list[ToolSpec], *, started: bool = False
) -> tuple[Any, list[Any]]:
    out = split(traits, started, tools, [text])
    return out, out["parser"].calls


def check_calls(calls: list[Any], *, named: str | None, parallel: bool, text: str) -> None:
    assert calls, f"no call in {text!r}"
    if not parallel:
        assert len(calls) == 1, text
    for c in calls:
        assert c.name in SCHEMAS and (named is None or c.name == named), text
        jsonschema.validate(json.loads(c.arguments), SCHEMAS[c.name])


CHOICES = [
    (ToolChoice("required"), False),
    (ToolChoice("required"), True),
    (ToolChoice("function", "set_alarm"), False),
]


@pytest.mark.parametrize("fmt", sorted(FAMILIES))
@pytest.mark.parametrize(("choice", "parallel"), CHOICES, ids=["required", "required-parallel", "named"])
def test_random_weights_always_make_a_parseable_call(fmt: str, choice: ToolChoice, parallel: bool) -> None:
    v, traits = family(fmt)
    plan = traits.tool_format.plan(TOOLS, choice, parallel, v.special)
    assert plan.immediate
    for seed in range(3):
        text, ended = random_walk(plan.grammar, v, seed, max_tokens=6000)
        assert ended, f"{fmt}: no end in {text[:300]!r}"
        _, calls = calls_of(text, traits, TOOLS)
        check_calls(calls, named=choice.name, parallel=parallel, text=text)


THINKERS = sorted(f for f in FAMILIES if family(f)[1].reasoning is not None)


@pytest.mark.parametrize("fmt", THINKERS)
def test_a_thinking_family_thinks_then_calls(fmt: str) -> None:
    v, traits = family(fmt)
    markers = traits.reasoning
    assert isinstance(markers, ReasoningMarkers) and markers.close_token is not None
    plan = traits.tool_format.plan(TOOLS, ToolChoice("required"), False, v.special)
    for started in (False, True) if markers.style == "tags" else (False,):
        thinking = think_first(plan, markers, started=started, special=v.special)
        for seed in range(3):
            # The budget closes the think block after 12 tokens (random weights never would).
            text, ended = random_walk(thinking.grammar, v, seed, force=(12, markers.close_token))
            assert ended, text[:300]
            out, calls = calls_of(text, traits, TOOLS, started=started)
            check_calls(calls, named=None, parallel=False, text=text)
            # Whatever was thought is reasoning, never content.
            assert "".join(d.text for d in out["deltas"] if hasattr(d, "text")) == "", text


@pytest.mark.parametrize("fmt", sorted(FAMILIES))
def test_lazy_plans_compile_for_the_vocabulary(fmt: str) -> None:
    v, traits = family(fmt)
    plan = traits.tool_format.plan(TOOLS, ToolChoice("auto"), True, v.special)
    v.cache.get(plan.grammar)  # compiles against the real tokens
    if plan.immediate:  # generic and Functionary v3.2: the whole answer is constrained
        return
    assert plan.trigger_tokens or plan.trigger_text
    for token in plan.trigger_tokens:  # a trigger token is the real special token
        assert token in v.specials.values()


def test_no_random_output_leaves_the_format() -> None:
    """Forced Qwen3-Coder strings are JSON strings: a random model cannot run away in
    bare text that only the closing tag ends."""
    v, traits = family("qwen3_coder")
    plan = traits.tool_format.plan(TOOLS, ToolChoice("function", "get_weather"), False, v.special)
    text, ended = random_walk(plan.grammar, v, 7)
    assert ended and '<parameter=city>\n"' in text
