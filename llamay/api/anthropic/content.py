"""Anthropic `system` and `messages` content blocks -> the chat pipeline's OpenAI-shaped
messages. Pure: no model, no I/O.

Mapping (what templates expect):
- `system` (a string or text blocks) -> one `system` message, and so does a message
  with role "system" (text blocks only) where it stands;
- user `text` blocks -> one `user` message; `tool_result` blocks -> `role: "tool"`
  messages (`tool_call_id`, and the tool's `name` when an earlier `tool_use` gave it),
  placed before the user's text as Anthropic requires results to come first;
- assistant `text` -> content, `thinking` -> `reasoning_content`, `tool_use` ->
  `tool_calls` (arguments as JSON text), `redacted_thinking` is dropped;
- a final assistant message holding text only is a prefill: it is not a message but
  text the reply continues (returned separately).
Media blocks (image, document) are refused: models served here read text only.

Cache breakpoints: `Spot` names a block; `chat_messages(..., mark=spot)` appends `MARK`
to that block's text so the caller can find where the block ends in the rendered prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidRequest
from ..fields import Fields

__all__ = ["MARK", "Converted", "Spot", "chat_messages", "block_list", "check_cache_control"]

MARK = "\u2063\u27e6llamay-cache-breakpoint\u27e7\u2063"
_MEDIA = {"image", "document", "search_result", "container_upload"}

Spot = tuple[str, int, int]
"""A block: ("tools", tool, 0), ("system", block, 0) or ("messages", message, block)."""


@dataclass(frozen=True)
class Converted:
    messages: list[dict[str, Any]]
    prefill: str | None  # text of a final assistant turn, which the reply continues


def block_list(content: Any, where: str) -> list[Mapping[str, Any]]:
    """Content as blocks: a string is one text block. Raises InvalidRequest otherwise."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InvalidRequest(f"'{where}' must be a string or an array of content blocks", param=where)
    for k, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            raise InvalidRequest(
                f"'{where}[{k}]' must be a block object with a 'type'", param=f"{where}[{k}]"
            )
    return content


def check_cache_control(value: Any, where: str) -> bool:
    """True when `value` is a cache breakpoint; False when absent. Raises InvalidRequest
    for anything but {"type": "ephemeral", "ttl"?: "5m" | "1h"}."""
    if value is None:
        return False
    f = Fields(value, where)
    if f.text("type", required=True) != "ephemeral":
        raise InvalidRequest(f"'{where}.type' must be \"ephemeral\"", param=f"{where}.type")
    if f.text("ttl") not in (None, "5m", "1h"):
        raise InvalidRequest(f'\'{where}.ttl\' must be "5m" or "1h"', param=f"{where}.ttl")
    return True


def _text(block: Mapping[str, Any], where: str, key: str = "text") -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise InvalidRequest(f"'{where}.{key}' must be a string", param=f"{where}.{key}")
    return value


def _refuse(kind: str, where: str, role: str) -> InvalidRequest:
    if kind in _MEDIA:
        return InvalidRequest(
            f"'{where}': {kind} blocks are not supported: models served here read text only", param=where
        )
    return InvalidRequest(
        f"'{where}': block type {kind!r} is not allowed in a {role} message", param=f"{where}.type"
    )


def _text_parts(
    blocks: list[Mapping[str, Any]], where: str, spot: Spot, mark: Spot | None
) -> list[dict[str, str]]:
    """Text blocks only (a system prompt), as text parts; `spot` names the first block."""
    parts = []
    for k, block in enumerate(blocks):
        if block["type"] != "text":
            raise _refuse(str(block["type"]), f"{where}[{k}]", "system")
        marked = mark == (spot[0], spot[1], spot[2] + k)
        parts.append({"type": "text", "text": _text(block, f"{where}[{k}]") + (MARK if marked else "")})
    return parts


def system_text(system: Any, mark: Spot | None) -> list[dict[str, str]] | None:
    """The `system` field as text parts (None when absent)."""
    if system is None:
        return None
    return _text_parts(block_list(system, "system"), "system", ("system", 0, 0), mark)


def _tool_result(block: Mapping[str, Any], where: str, marked: bool, names: dict[str, str]) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(
            f"'{where}.tool_use_id' must be a non-empty string", param=f"{where}.tool_use_id"
        )
    content = block.get("content")
    pieces: list[str] = []
    if content is not None:
        for k, part in enumerate(block_list(content, f"{where}.content")):
            if part["type"] != "text":
                raise _refuse(str(part["type"]), f"{where}.content[{k}]", "tool_result")
            pieces.append(_text(part, f"{where}.content[{k}]"))
    message: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": call_id,
        "content": "\n".join(pieces) + (MARK if marked else ""),
    }
    if call_id in names:
        message["name"] = names[call_id]
    return message


def _user(
    blocks: list[Mapping[str, Any]], i: int, mark: Spot | None, names: dict[str, str]
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    parts: list[dict[str, str]] = []
    for k, block in enumerate(blocks):
        where, marked, kind = f"messages[{i}].content[{k}]", mark == ("messages", i, k), block["type"]
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, where) + (MARK if marked else "")})
        elif kind == "tool_result":
            results.append(_tool_result(block, where, marked, names))
        else:
            raise _refuse(str(kind), where, "user")
    return results + ([{"role": "user", "content": parts}] if parts or not results else [])


def _assistant(
    blocks: list[Mapping[str, Any]], i: int, mark: Spot | None, names: dict[str, str]
) -> dict[str, Any]:
    parts: list[dict[str, str]] = []
    thoughts: list[str] = []
    calls: list[dict[str, Any]] = []
    for k, block in enumerate(blocks):
        where, marked, kind = f"messages[{i}].content[{k}]", mark == ("messages", i, k), block["type"]
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, where) + (MARK if marked else "")})
        elif kind == "thinking":
            thoughts.append(_text(block, where, "thinking"))
        elif kind == "redacted_thinking":
            continue
        elif kind == "tool_use":
            calls.append(_tool_use(block, where, names))
            if marked:  # no text of its own: mark the end of the text before the calls
                parts.append({"type": "text", "text": MARK})
        else:
            raise _refuse(str(kind), where, "assistant")
    message: dict[str, Any] = {"role": "assistant", "content": parts or (None if calls else "")}
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_use(block: Mapping[str, Any], where: str, names: dict[str, str]) -> dict[str, Any]:
    call_id, name, args = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"'{where}.id' must be a non-empty string", param=f"{where}.id")
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"'{where}.name' must be a non-empty string", param=f"{where}.name")
    if not isinstance(args, Mapping):
        raise InvalidRequest(f"'{where}.input' must be an object", param=f"{where}.input")
    names[call_id] = name
    arguments = json.dumps(args, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def chat_messages(system: Any, messages: list[Any], mark: Spot | None = None) -> Converted:
    """Convert a request's `system` and `messages` (see the module docstring). Raises
    InvalidRequest naming the field at fault, e.g. "messages[2].content[0].tool_use_id"."""
    if not messages:
        raise InvalidRequest("'messages' must contain at least one message", param="messages")
    out: list[dict[str, Any]] = []
    parts = system_text(system, mark)
    if parts is not None:
        out.append({"role": "system", "content": parts})
    names: dict[str, str] = {}
    prefill = None
    for i, raw in enumerate(messages):
        f = Fields(raw, f"messages[{i}]")
        role = f.text("role", required=True)
        if f.raw("content") is None:
            raise InvalidRequest(f"'messages[{i}].content' is required", param=f"messages[{i}].content")
        blocks = block_list(f.raw("content"), f"messages[{i}].content")
        if role == "user":
            out.extend(_user(blocks, i, mark, names))
        elif role == "system":  # newer clients may put system turns among the messages
            out.append(
                {
                    "role": "system",
                    "content": _text_parts(blocks, f"messages[{i}].content", ("messages", i, 0), mark),
                }
            )
        elif role == "assistant":
            message = _assistant(blocks, i, mark, names)
            if i == len(messages) - 1 and "tool_calls" not in message:
                text = "".join(p["text"] for p in message["content"] or [])
                prefill = text or None
            else:
                out.append(message)
        else:
            raise InvalidRequest(
                f'\'messages[{i}].role\' must be "user", "assistant" or "system" (got {role!r})',
                param=f"messages[{i}].role",
            )
    return Converted(out, prefill)
