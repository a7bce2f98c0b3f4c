"""Every family's output format, parsed as the pipeline parses it: the dialect and think
markers detected from the family's real chat template (llama.cpp's copy), whether the
prompt opened the think block from the rendered generation prompt, then the reasoning
split and the tool-call parser, over every way the text can arrive in pieces.

The outputs (tests/data/dialect_outputs.json) are the cases llama.cpp's
tests/test-chat.cpp checks for each template, the examples the templates and model
cards give, and a few of llamay's own (each case names its source).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from llamay.chat.reasoning import HarmonyParser, ReasoningParser
from llamay.chat.template import ChatTemplate
from llamay.chat.tools import ContentDelta, ToolArgsDelta, ToolCallStart, parse_tools
from llamay.chat.traits import Traits, detect_traits

from .dialect_support import template

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "dialect_outputs.json").read_text())
SCHEMAS: dict[str, Any] = DATA["tool_schemas"]
CASES: list[dict[str, Any]] = DATA["cases"]


def no_special(text: str) -> int | None:
    return None


def tools_for(names: list[str]) -> list[Any]:
    return parse_tools(
        [
            {
                "type": "function",
                "function": {"name": n, "description": f"The {n} tool.", "parameters": SCHEMAS[n]},
            }
            for n in names
        ],
        loose_names=True,
    )


def traits_of(stem: str) -> Traits:
    return detect_traits(template(stem), no_special)


def prompt_opens_thinking(stem: str, kwargs: dict[str, Any]) -> bool:
    """Whether the template's generation prompt (for `kwargs`) opens the think block;
    rendered without tools, which no generation prompt here depends on."""
    traits = traits_of(stem)
    if traits.reasoning is None:
        return False
    prompt = ChatTemplate(template(stem), bos_token="<s>", eos_token="</s>").render(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, **kwargs
    )
    return traits.reasoning.opened_by(prompt)


def split(traits: Traits, started: bool, tools: list[Any], parts: list[str]) -> dict[str, Any]:
    """The pipeline's two stages (think markers, then tool calls) over `parts`."""
    reasoner: ReasoningParser | HarmonyParser | None = (
        traits.reasoning.parser(started=started) if traits.reasoning is not None else None
    )
    parser = traits.tool_format.parser(tools) if tools else None
    reasoning, deltas = [], []

    def content(text: str) -> None:
        if parser is None:
            deltas.append(ContentDelta(text))
        elif text:
            deltas.extend(parser.push(text))

    for part in parts:
        if reasoner is None:
            content(part)
            continue
        r, c = reasoner.push(part)
        reasoning.append(r)
        content(c)
    if reasoner is not None:
        r, c = reasoner.finish()
        reasoning.append(r)
        content(c)
    if parser is not None:
        deltas.extend(parser.finish())
    return {"reasoning": "".join(reasoning), "deltas": deltas, "parser": parser}


def pieces(text: str, seed: int) -> list[list[str]]:
    """The whole text, one character at a time, every cut in two, and random cuts."""
    out = [[text], list(text)] + [[text[:i], text[i:]] for i in range(1, len(text))]
    rng = random.Random(seed)
    for _ in range(12):
        k = min(len(text) - 1, rng.randint(2, 9))
        cuts = sorted(rng.sample(range(1, len(text)), k)) if k > 0 else []
        bounds = [0, *cuts, len(text)]
        out.append([text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)])
    return out


def case_id(case: dict[str, Any]) -> str:
    return f"{case['template']}:{case['text'][:40]!r}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_output_parses_the_same_in_every_chunking(case: dict[str, Any]) -> None:
    tools = tools_for(case["tools"])
    traits = traits_of(case["template"])
    started = prompt_opens_thinking(case["template"], case["kwargs"])
    reference = None
    for parts in pieces(case["text"], seed=len(case["text"])):
        out = split(traits, started, tools, parts)
        deltas = out["deltas"]
        content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
        starts = [d for d in deltas if isinstance(d, ToolCallStart)]
        args: dict[int, str] = {}
        for d in deltas:
            if isinstance(d, ToolArgsDelta):
                args[d.index] = args.get(d.index, "") + d.fragment
        result = (out["reasoning"], content, [(s.index, s.name, args.get(s.index, "")) for s in starts])
        if reference is None:
            reference = result
            assert out["reasoning"] == case["reasoning"]
            assert content == case["content"]
            assert [s.index for s in starts] == list(range(len(case["calls"])))
            assert [s.name for s in starts] == [c["name"] for c in case["calls"]]
            for s, want in zip(starts, case["calls"], strict=True):
                if "arguments_text" in want:
                    assert args.get(s.index, "") == want["arguments_text"]
                else:
                    assert json.loads(args[s.index]) == want["arguments"]
            parser = out["parser"]
            if parser is not None:  # the parser's summary agrees with its deltas
                assert [(c.name, c.arguments) for c in parser.calls] == [(n, a) for _, n, a in result[2]]
                assert parser.content == content
        assert result == reference, parts


# -- detection -------------------------------------------------------------------------

# template -> (tool format, think markers (open, close) or None, answer tags)
DETECTED = {
    "meta-llama-Llama-3.1-8B-Instruct": ("llama3", None),
    "meta-llama-Llama-3.2-3B-Instruct": ("llama3", None),
    "meta-llama-Llama-3.3-70B-Instruct": ("llama3", None),
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": ("hermes", None),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("hermes", None),
    "Qwen-Qwen2.5-7B-Instruct": ("hermes", None),
    "Qwen-Qwen3-0.6B": ("hermes", ("<think>", "</think>")),
    "Qwen-QwQ-32B": ("hermes", ("<think>", "</think>")),
    "Qwen3-Coder": ("qwen3_coder", None),
    "Qwen3.5-4B": ("qwen3_coder", ("<think>", "</think>")),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("deepseek_r1", ("<think>", "</think>")),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("deepseek_r1", ("<think>", "</think>")),
    "llama-cpp-deepseek-r1": ("deepseek_r1", ("<think>", "</think>")),
    "deepseek-ai-DeepSeek-V3.1": ("deepseek_v3_1", ("<think>", "</think>")),
    "mistralai-Mistral-Nemo-Instruct-2407": ("mistral", None),
    "Mistral-Small-3.2-24B-Instruct-2506": ("mistral_ids", None),
    "unsloth-mistral-Devstral-Small-2507": ("mistral_args", None),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("mistral_args", ("[THINK]", "[/THINK]")),
    "microsoft-Phi-3.5-mini-instruct": ("generic", None),
    "google-gemma-2-2b-it": ("generic", None),
    "google-gemma-4-31B-it": ("gemma4", ("<|channel>thought", "<channel|>")),
    "CohereForAI-c4ai-command-r-plus-tool_use": ("command_r_plus", None),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": (
        "command_r7b",
        ("<|START_THINKING|>", "<|END_THINKING|>"),
    ),
    "ibm-granite-granite-3.3-2B-Instruct": ("granite", ("<think>", "</think>")),
    "ibm-granite-granite-4.0": ("hermes", None),
    "meetkai-functionary-medium-v3.1": ("functionary_v3_1", None),
    "meetkai-functionary-medium-v3.2": ("functionary_v3_2", None),
    "fireworks-ai-llama-3-firefunction-v2": ("firefunction", None),
    "HuggingFaceTB-SmolLM3-3B": ("generic", ("<think>", "</think>")),
    "openai-gpt-oss-120b": ("harmony", ("<|channel|>analysis<|message|>", "<|end|>")),
    "moonshotai-Kimi-K2": ("kimi_k2", None),
    "Kimi-K2-Instruct": ("kimi_k2", None),
    "Kimi-K2-Thinking": ("kimi_k2", ("<think>", "</think>")),
    "GLM-4.6": ("glm", ("<think>", "</think>")),
    "MiniMax-M2": ("minimax", ("<think>", "</think>")),
    "LFM2-8B-A1B": ("pythonic", None),
    "LFM2.5-8B-A1B": ("pythonic", ("<think>", "</think>")),
}


@pytest.mark.parametrize(("stem", "expected"), DETECTED.items())
def test_detects_each_familys_dialect_and_think_markers(stem: str, expected: tuple[str, Any]) -> None:
    traits = traits_of(stem)
    assert traits.tool_format.name == expected[0]
    markers = traits.reasoning
    assert (None if markers is None else (markers.open_tag, markers.close_tag)) == expected[1]


def test_answer_tags_and_interrupts_come_from_the_template() -> None:
    granite = traits_of("ibm-granite-granite-3.3-2B-Instruct").reasoning
    assert granite is not None and granite.answer == ("<response>", "</response>")
    r7b = traits_of("CohereForAI-c4ai-command-r7b-12-2024-tool_use").reasoning
    assert r7b is not None and r7b.answer == ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
    kimi = traits_of("Kimi-K2-Thinking").reasoning
    assert kimi is not None and "<|tool_call_begin|>" in kimi.interrupts
    qwen = traits_of("Qwen-Qwen3-0.6B").reasoning
    assert qwen is not None and qwen.answer is None and not qwen.interrupts
    harmony = traits_of("openai-gpt-oss-120b").reasoning
    assert harmony is not None and harmony.style == "harmony" and harmony.resume == "<|start|>assistant"


@pytest.mark.parametrize(
    ("stem", "kwargs", "opened"),
    [
        # llama.cpp's copy of QwQ's template closes the block unless asked to think.
        ("Qwen-QwQ-32B", {"enable_thinking": True}, True),
        ("Qwen-QwQ-32B", {}, False),
        ("Qwen-Qwen3-0.6B", {}, False),
        ("Qwen-Qwen3-0.6B", {"enable_thinking": False}, False),
        ("Qwen3.5-4B", {}, True),
        ("Qwen3.5-4B", {"enable_thinking": False}, False),
        ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", {}, True),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", {"enable_thinking": True}, True),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", {"enable_thinking": False}, False),
        ("deepseek-ai-DeepSeek-V3.1", {"thinking": True}, True),
        ("deepseek-ai-DeepSeek-V3.1", {}, False),
        ("MiniMax-M2", {}, True),
        ("GLM-4.6", {}, False),
        ("openai-gpt-oss-120b", {}, False),
    ],
)
def test_templates_that_open_the_think_block(stem: str, kwargs: dict[str, Any], opened: bool) -> None:
    assert prompt_opens_thinking(stem, kwargs) is opened
