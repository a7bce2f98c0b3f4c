"""OpenAI-shaped tool calling for several model families, as pure code."""

from .spec import FINISH_TOOL, ToolCall, ToolChoice, ToolSpec, parse_tool_choice, parse_tools

__all__ = ["FINISH_TOOL", "ToolCall", "ToolChoice", "ToolSpec", "parse_tool_choice", "parse_tools"]
