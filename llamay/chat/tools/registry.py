"""Format registry and detection from a model's chat template."""

from __future__ import annotations

import re

from ..template import ChatTemplate
from .base import Special, ToolFormat
from .generic import GenericFormat
from .hermes import HermesFormat
from .llama3 import Llama3Format
from .mistral import MistralFormat

__all__ = ["FORMATS", "detect_format", "get_format", "uses_tools"]

FORMATS: dict[str, ToolFormat] = {
    "hermes": HermesFormat(),
    "llama3": Llama3Format(),
    "mistral": MistralFormat(),
    "generic": GenericFormat(),
}

_JINJA_CODE = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.DOTALL)
_TOOLS_VAR = re.compile(r"\btools\b")
_PROBE = "llamay-system-probe"


def get_format(name: str) -> ToolFormat:
    """The format registered as `name` (KeyError if none): for a configured override."""
    return FORMATS[name]


def uses_tools(template_source: str) -> bool:
    """The template reads the `tools` variable (in Jinja code, not in its text)."""
    return any(_TOOLS_VAR.search(code) for code in _JINJA_CODE.findall(template_source))


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
    try:
        template = ChatTemplate(source)
        out = template.render(
            [{"role": "system", "content": _PROBE}, {"role": "user", "content": "hi"}],
            add_generation_prompt=True,
        )
    except Exception:  # a template that rejects system messages raises from raise_exception
        return False
    return _PROBE in out
