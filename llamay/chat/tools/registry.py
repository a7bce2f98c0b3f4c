"""Format registry and detection from a model's chat template."""

from __future__ import annotations

import functools
import re

from ..template import ChatTemplate
from .base import Special, ToolFormat
from .generic import GenericFormat
from .hermes import HermesFormat
from .llama3 import Llama3Format
from .mistral import MistralFormat

__all__ = ["FORMATS", "detect_format", "get_format", "supports_parallel_calls", "uses_tools"]

FORMATS: dict[str, ToolFormat] = {
    "hermes": HermesFormat(),
    "llama3": Llama3Format(),
    "mistral": MistralFormat(),
    "generic": GenericFormat(),
}

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

    [TOOL_CALLS] -> mistral; <tool_call> -> hermes; <|python_tag|> or the "ipython" role
    -> llama3 (checked in that order: each marker is specific to its family). A template
    that reads `tools` but shows none of these gets hermes when <tool_call> is a special
    token of the vocabulary (Qwen-style models with a reworded template). Anything else,
    including no template at all, gets the generic format; whether that template renders
    system messages is probed so the tool instructions land where the model sees them.
    """
    src = template_source or ""
    if "[TOOL_CALLS]" in src:
        return FORMATS["mistral"]
    if "<tool_call>" in src:
        return FORMATS["hermes"]
    if "<|python_tag|>" in src or "ipython" in src:
        return FORMATS["llama3"]
    if src and uses_tools(src) and special("<tool_call>") is not None:
        return FORMATS["hermes"]
    if not src:
        return FORMATS["generic"]
    return GenericFormat(system_role=_renders_system(src))


def _renders_system(source: str) -> bool:
    # The template's own answer, before the polyfill that folds a system message into the
    # first user turn for templates without a system role.
    try:
        return ChatTemplate(source).needs.system_role
    except ValueError:  # does not compile
        return False
