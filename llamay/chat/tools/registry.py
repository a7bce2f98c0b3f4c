"""Format registry and detection from a model's chat template (and vocabulary).

Each family's template spells its own call syntax out (it renders the history's calls
the way the model writes them), so the markers it contains name the format. Checked
most specific first; see `detect_format`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace

from ..template import ChatTemplate
from .base import Special, ToolFormat
from .gemma import GemmaFormat
from .generic import GenericFormat
from .harmony import HarmonyFormat
from .hermes import HermesFormat
from .lists import COMMAND_R7B, COMMAND_R_PLUS, FIREFUNCTION, GRANITE
from .llama3 import Llama3Format
from .mistral import MistralFormat
from .named import (
    DS_CALLS,
    K_SECTION,
    DeepSeekFormat,
    FunctionaryV31Format,
    FunctionaryV32Format,
    KimiFormat,
    MistralArgsFormat,
)
from .pythonic import PythonicFormat
from .xmlcalls import M_OPEN, GlmFormat, MiniMaxFormat, QwenXmlFormat

__all__ = ["FORMATS", "detect_format", "get_format", "supports_parallel_calls", "uses_tools"]

_ALL: tuple[ToolFormat, ...] = (
    HermesFormat(),
    Llama3Format(),
    MistralFormat(),
    GenericFormat(),
    MistralArgsFormat(),
    MistralArgsFormat(call_ids=True),
    QwenXmlFormat(),
    GlmFormat(),
    MiniMaxFormat(),
    DeepSeekFormat(typed=True),
    DeepSeekFormat(typed=False),
    KimiFormat(),
    FunctionaryV31Format(),
    FunctionaryV32Format(),
    HarmonyFormat(),
    GemmaFormat(),
    PythonicFormat(),
    GRANITE,
    FIREFUNCTION,
    COMMAND_R_PLUS,
    COMMAND_R7B,
)
FORMATS: dict[str, ToolFormat] = {f.name: f for f in _ALL}

_JINJA_CODE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
_TOOLS_VAR = re.compile(r"\btools\b")
# `{% for call in message.tool_calls %}` (any spelling of the access): the template writes
# every call of an assistant turn.
_CALLS_LOOP = re.compile(r"\{%-?\s*for\s+[\w\s,]+\s+in\s+[^%]*\btool_calls\b")
# Meta's Llama 3.x templates refuse a turn with more than one call.
_SINGLE_CALL = re.compile(
    r"single tool[- ]?calls?|tool_calls\s*\|\s*length\s*==\s*1|tool_calls\s*\|\s*length\s*!=\s*1"
)


def get_format(name: str) -> ToolFormat:
    """The format registered as `name` (KeyError if none): for a configured override."""
    return FORMATS[name]


def uses_tools(template_source: str) -> bool:
    """The template reads the `tools` variable (in Jinja code, not in its text)."""
    return any(_TOOLS_VAR.search(code) for code in _JINJA_CODE.findall(template_source))


@functools.lru_cache(maxsize=64)
def supports_parallel_calls(template_source: str | None) -> bool:
    """The template can render an assistant turn holding several tool calls: it loops over
    a message's `tool_calls` and does not insist on exactly one. A model whose template
    cannot show it several calls in one turn has never been taught to make them, and a
    small one asked to keep going invents call after call; so this is the default of
    `parallel_tool_calls` when a request does not say. No template, or one without tool
    support (the generic format), gives False."""
    src = template_source or ""
    if _SINGLE_CALL.search(src):
        return False
    return any(_CALLS_LOOP.search(code) for code in _JINJA_CODE.findall(src))


def detect_format(template_source: str | None, special: Special) -> ToolFormat:
    """The tool format a model's chat template was written for.

    By the markers the template writes (most specific first): harmony channels ->
    harmony; Gemma 4's `<|tool_call>call:`; Kimi's call sections; MiniMax's `<minimax:tool_call>`; GLM's `<arg_key>`;
    DeepSeek's `<｜tool▁calls▁begin｜>` (R1 when the arguments sit in a ```json fence,
    else V3.1); `<function=` with `<parameter=` -> Qwen3-Coder XML; `>>>all` ->
    Functionary v3.2; `<function=` -> Functionary v3.1; `functools[` -> Firefunction;
    `<|START_ACTION|>` -> Command R7B; `Action:` with `tool_name` -> Command R+;
    `<|tool_call|>` -> Granite 3; LFM2's tool list -> Python calls; `[TOOL_CALLS]` ->
    Mistral (`[ARGS]`: name then arguments, `[CALL_ID]`: with ids; else one JSON
    array); `<tool_call>` -> Hermes; `<|python_tag|>` or the "ipython" role -> Llama 3.
    A template that reads `tools` but shows none of these gets hermes when <tool_call>
    is a special token of the vocabulary (Qwen-style models with a reworded template).
    Anything else, including no template at all, gets the generic format; whether that
    template renders system messages is probed so the tool instructions land where the
    model sees them.
    """
    src = template_source or ""
    if not src:
        return FORMATS["generic"]
    has = src.__contains__
    if has("<|channel|>") and has("to="):
        return FORMATS["harmony"]
    if has("<|tool_call>call:"):
        return FORMATS["gemma4"]
    if has(K_SECTION):
        # The first K2 template numbers calls within a message; later ones keep a counter.
        return KimiFormat(per_message="loop.index0" in src and "tool_call_counter" not in src)
    if has(M_OPEN):
        return FORMATS["minimax"]
    if has("<arg_key>") and has("<tool_call>"):
        return FORMATS["glm"]
    if has(DS_CALLS):
        return FORMATS["deepseek_r1" if "```json" in src else "deepseek_v3_1"]
    if has("<function=") and has("<parameter="):
        return FORMATS["qwen3_coder"]
    if has(">>>all"):
        return FORMATS["functionary_v3_2"]
    if has("<function="):
        return FORMATS["functionary_v3_1"]
    if has("functools["):
        return FORMATS["firefunction"]
    if has("<|START_ACTION|>"):
        return FORMATS["command_r7b"]
    if has("Action:") and has("tool_name"):
        return FORMATS["command_r_plus"]
    if has("<|tool_call|>"):
        # Granite 3.3's template never shows the history's calls.
        return replace(GRANITE, render_calls=True) if "tool_calls" not in src else GRANITE
    if has("<|tool_call_start|>") or has("<|tool_list_start|>") or has("List of tools: ["):
        # The first LFM2 templates never show the history's calls.
        return PythonicFormat(render_calls="tool_calls" not in src)
    if has("[TOOL_CALLS]"):
        if has("[ARGS]"):
            return FORMATS["mistral_ids" if has("[CALL_ID]") else "mistral_args"]
        return FORMATS["mistral"]
    if has("<tool_call>"):
        return FORMATS["hermes"]
    if has("<|python_tag|>") or (has("ipython") and has("<|start_header_id|>")):
        return FORMATS["llama3"]
    if uses_tools(src) and special("<tool_call>") is not None:
        return FORMATS["hermes"]
    return GenericFormat(system_role=_renders_system(src))


def _renders_system(source: str) -> bool:
    # The template's own answer, before the polyfill that folds a system message into the
    # first user turn for templates without a system role.
    try:
        return ChatTemplate(source).needs.system_role
    except ValueError:  # does not compile
        return False
