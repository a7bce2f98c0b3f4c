"""Ollama chat messages turned into the shape chat templates and tool formats expect."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InvalidRequest
from ..fields import Fields

__all__ = ["chat_messages", "no_images"]


def no_images(value: Any, param: str) -> None:
    """Images are a 400: the models this server runs read text only."""
    if value:
        raise InvalidRequest(
            f"'{param}': images are not supported; the models this server runs read text only",
            param=param,
        )


def chat_messages(raw: list[Any]) -> list[dict[str, Any]]:
    """Ollama messages -> the OpenAI-like shape templates expect: `thinking` becomes
    `reasoning_content`, `tool_name` also sets `name`, tool calls get `type: function`
    (their arguments stay objects, which templates `tojson`). Images are a 400."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        mf = Fields(m, f"messages[{i}]")
        role = mf.text("role", required=True)
        content = mf.text("content", "") or ""
        no_images(mf.raw("images"), f"messages[{i}].images")
        msg: dict[str, Any] = {"role": role, "content": content}
        thinking = mf.text("thinking")
        if thinking:
            msg["reasoning_content"] = thinking
        tool_name = mf.text("tool_name")
        if tool_name:
            msg["tool_name"] = msg["name"] = tool_name
        calls = mf.array("tool_calls")
        if calls:
            msg["tool_calls"] = [_tool_call(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(calls)]
        out.append(msg)
    return out


def _tool_call(raw: Any, where: str) -> dict[str, Any]:
    fn = Fields(Fields(raw, where).obj("function") or {}, f"{where}.function")
    name = fn.text("name", required=True)
    args = fn.raw("arguments")
    if args is None:
        args = {}
    if not isinstance(args, Mapping | str):
        raise InvalidRequest(
            f"'{where}.function.arguments' must be an object", param=f"{where}.function.arguments"
        )
    return {"type": "function", "function": {"name": name, "arguments": args}}
