"""What routing needs from a request, read without the model: the context it names, the
model it asks for, and token-free hashes of its prompt's prefixes. Pure functions."""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BLOCK", "RouteHint", "prefix_hashes", "read_hint", "rewrite_context"]

# Prompt bytes are hashed in blocks of this size, each hash chained to the one before, so
# two requests share the first k hashes exactly when their first k blocks are equal.
BLOCK = 128
MAX_BLOCKS = 512  # 64 KiB of prompt: a longer shared prefix gains nothing more in routing
PREFIX_BYTES = BLOCK * MAX_BLOCKS

CHAT_PATHS = {"/v1/chat/completions", "/v1/messages", "/api/chat", "/v1/responses"}
TEXT_PATHS = {"/v1/completions", "/api/generate"}
_CONTEXT_PATH = re.compile(r"^/v1/contexts/(?!restore$)([^/]+)(/.*)?$")


@dataclass(frozen=True)
class RouteHint:
    """`context`: the context id the request needs (a session or a /v1/contexts/{id} path);
    `model`: the model named in the body ('' = the replicas' default); `prefix`: chained
    block hashes of the prompt; `pin`: a replica id the ingress itself targets (never read
    from a client)."""

    context: str | None = None
    model: str = ""
    prefix: tuple[int, ...] = ()
    pin: str | None = None
    body: dict[str, Any] | None = field(default=None, compare=False, repr=False)


def prefix_hashes(data: bytes, block: int = BLOCK) -> tuple[int, ...]:
    """Chained 64-bit hashes of each full `block` of `data` (a partial last block is left out:
    it would never match a longer prompt's block)."""
    out: list[int] = []
    h = b""
    for i in range(0, min(len(data), block * MAX_BLOCKS) - block + 1, block):
        h = hashlib.blake2b(h + data[i : i + block], digest_size=8).digest()
        out.append(int.from_bytes(h, "little"))
    return tuple(out)


def _canon(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\x1e"


def prompt_bytes(path: str, body: dict[str, Any]) -> bytes:
    """The parts of a body that become the start of the rendered prompt, in prompt order:
    model, tools, system, then each message (or the raw prompt); messages past the first
    PREFIX_BYTES are left out (they would not be hashed)."""
    parts = [_canon(body.get("model") or "")]
    if path in CHAT_PATHS:
        for key in ("tools", "system", "instructions"):
            if body.get(key):
                parts.append(_canon(body[key]))
        msgs = body.get("messages") if path != "/v1/responses" else body.get("input")
        if isinstance(msgs, list):
            size = sum(map(len, parts))
            for m in msgs:
                if size >= PREFIX_BYTES:
                    break
                parts.append(_canon(m))
                size += len(parts[-1])
        elif isinstance(msgs, str):
            parts.append(_canon(msgs))
    elif path in TEXT_PATHS:
        if body.get("system"):
            parts.append(_canon(body["system"]))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            parts.append(prompt.encode())
    else:
        return b""
    return b"".join(parts)


def read_hint(method: str, path: str, query: dict[str, str], body: bytes) -> RouteHint:
    """The routing hint of one request. A body that is not a JSON object gives no hint from
    the body (the replica answers it, with the error it would give anyway)."""
    parsed: dict[str, Any] | None = None
    if body and method in ("POST", "PUT"):
        try:
            value = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            value = None
        parsed = value if isinstance(value, dict) else None
    context = None
    m = _CONTEXT_PATH.match(path)
    if m:
        context = m.group(1)
    elif parsed is not None and isinstance(parsed.get("llamay_session"), str):
        context = parsed["llamay_session"]
    model = ""
    if parsed is not None and isinstance(parsed.get("model"), str):
        model = parsed["model"]
    elif "model" in query:
        model = query["model"]
    prefix = prefix_hashes(prompt_bytes(path, parsed)) if parsed is not None and context is None else ()
    return RouteHint(context=context, model=model, prefix=prefix, body=parsed)


def rewrite_context(path: str, body: bytes, hint: RouteHint, local: str) -> tuple[str, bytes]:
    """The request with context id `hint.context` replaced by `local` (the id the holding
    replica knows it by, after a move) in the path or the body's `llamay_session` (the body
    is parsed again when the hint does not carry it)."""
    m = _CONTEXT_PATH.match(path)
    if m:
        return f"/v1/contexts/{local}{m.group(2) or ''}", body
    parsed = hint.body
    if parsed is None and body:
        with contextlib.suppress(ValueError, UnicodeDecodeError):
            value = json.loads(body)
            parsed = value if isinstance(value, dict) else None
    if parsed is not None:
        return path, json.dumps({**parsed, "llamay_session": local}).encode()
    return path, body
