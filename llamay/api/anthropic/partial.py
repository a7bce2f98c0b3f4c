"""The value a cut-off JSON text begins, parsed as far as it goes: a tool call that
`max_tokens` ended mid-arguments still reports the arguments it has (as the OpenAI route
returns the partial `arguments` text), rather than nothing."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["parse_partial"]

_SCALAR_END = frozenset(",}] \t\r\n")


def _closers(stack: list[str]) -> str:
    return "".join("}" if c == "{" else "]" for c in reversed(stack))


def parse_partial(text: str) -> Any:
    """`text` whole when it parses; else the longest reading of its beginning that closes
    into valid JSON: an open value string is closed where it stops, open objects and arrays
    are closed, and a key without its value, a literal or number the cut may have
    shortened, or a dangling comma is left out. None when not even the start of a value is there."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    stack: list[str] = []  # the open containers, "{" or "["
    want_key = False  # in an object, the next string is a key
    in_str = esc = is_key = False
    escape_at, hex_left = 0, 0  # where the last escape began; hex digits a \u still needs
    scalar = False  # inside a number or literal
    safe, safe_close = 0, ""  # text[:safe] + safe_close is the latest known-whole reading
    for i, ch in enumerate(text):
        if in_str:
            if hex_left:
                hex_left -= 1
            elif esc:
                esc = False
                hex_left = 4 if ch == "u" else 0
            elif ch == "\\":
                esc, escape_at = True, i
            elif ch == '"':
                in_str = False
                if not is_key:
                    safe, safe_close = i + 1, _closers(stack)
            continue
        if scalar:
            if ch not in _SCALAR_END:
                continue
            scalar = False
            safe, safe_close = i, _closers(stack)
        if ch == '"':
            in_str, is_key = True, want_key
        elif ch in "{[":
            stack.append(ch)
            want_key = ch == "{"
            safe, safe_close = i + 1, _closers(stack)
        elif ch in "}]":
            if stack:
                stack.pop()
            want_key = False
            safe, safe_close = i + 1, _closers(stack)
        elif ch == ",":
            want_key = bool(stack) and stack[-1] == "{"
        elif ch == ":":
            want_key = False
        elif not ch.isspace():
            scalar = True
    candidates = []
    if in_str and not is_key:
        cut = text[:escape_at] if esc or hex_left else text  # not half an escape
        candidates.append(cut + '"' + _closers(stack))
    if scalar and text.endswith(("true", "false", "null")):
        # Only a whole literal: a number at the cut may be the start of a longer one.
        candidates.append(text + _closers(stack))
    if safe:
        candidates.append(text[:safe] + safe_close)
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None
