"""OpenAI-shaped tool calling for several model families, as pure code.

Per request: `parse_tools` / `parse_tool_choice` validate the fields; the model's
`ToolFormat` (from `detect_format`) `prepare`s the messages and template variables,
`plan`s the grammar and its trigger for the engine, and gives a `ToolStreamParser` that
turns generated content into text deltas and tool-call deltas.
"""

from .base import Special, ToolFormat, ToolPlan, think_first
from .deltas import ContentDelta, Delta, ToolArgsDelta, ToolCallStart
from .generic import GenericFormat
from .hermes import HermesFormat
from .llama3 import Llama3Format
from .mistral import MistralFormat
from .registry import FORMATS, detect_format, get_format, supports_parallel_calls
from .spec import FINISH_TOOL, ToolCall, ToolChoice, ToolSpec, parse_tool_choice, parse_tools
from .stream import ToolStreamParser, new_call_id

__all__ = [
    "FINISH_TOOL",
    "FORMATS",
    "ContentDelta",
    "Delta",
    "GenericFormat",
    "HermesFormat",
    "Llama3Format",
    "MistralFormat",
    "Special",
    "ToolArgsDelta",
    "ToolCall",
    "ToolCallStart",
    "ToolChoice",
    "ToolFormat",
    "ToolPlan",
    "ToolSpec",
    "ToolStreamParser",
    "detect_format",
    "get_format",
    "new_call_id",
    "parse_tool_choice",
    "parse_tools",
    "supports_parallel_calls",
    "think_first",
]
