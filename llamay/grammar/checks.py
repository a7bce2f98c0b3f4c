"""Value checks of single JSON schema keywords (counts, literals, multipleOf precision)."""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import llguidance

__all__ = ["count", "check_literals", "precise", "LiteralProblem", "without_controls"]

# C0 controls a grammar string cannot hold (only \b \f \n \r \t have short escapes).
_UNWRITABLE = "\\x00-\\x07\\x0b\\x0e-\\x1f"


class LiteralProblem(ValueError):
    """A keyword's value is malformed or cannot be generated: (reason, what)."""

    def __init__(self, reason: str, what: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.what = what


@functools.lru_cache(maxsize=512)
def precise(value: Any) -> bool:
    """llguidance enforces multipleOf only up to some number of decimal digits: ask it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return True  # malformed: llguidance's own error names it
    probe = "start: %json " + json.dumps({"type": "number", "multipleOf": value})
    spec = llguidance.LLMatcher.grammar_from_lark(probe)
    return not llguidance.LLMatcher.validate_grammar_with_warnings(spec, None)[0]


def count(value: Any) -> int:
    """A count keyword's value as a non-negative int."""
    # 2.0 is a valid count in JSON Schema; llguidance wants a JSON integer.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise LiteralProblem("must be a non-negative integer", "invalid JSON schema keyword")
    return value


def check_literals(values: Any) -> None:
    """`values` (an enum, or [const]) is a non-empty list of generable JSON values."""
    if not isinstance(values, list):
        raise LiteralProblem("must be a list", "invalid JSON schema keyword")
    if not values:
        raise LiteralProblem("an empty enum accepts nothing", "unsatisfiable JSON schema keyword")
    stack = list(values)
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if any((ord(c) < 0x20 and c not in "\b\f\n\r\t") or c == "\x7f" for c in v):
                raise LiteralProblem(
                    "a string with DEL or a control character other than \\b\\f\\n\\r\\t cannot be generated",
                    "unsupported JSON schema keyword",
                )
        elif isinstance(v, float) and not math.isfinite(v):
            raise LiteralProblem("non-finite number", "invalid JSON schema keyword")
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def without_controls(pattern: str) -> str:
    """`pattern` with every negated class also excluding the C0 controls a generated
    string never holds (so the texts it can match are the same).

    llguidance 1.9's JSON string quoting lets a negated class that excludes a backslash or
    a quote through once the class also takes control characters: `[^\\\\]` matched the
    text `"a\\\\b"`. Without the controls the quoting is exact."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
            if pattern.startswith("[^", i):
                out.append("[^" + _UNWRITABLE)
                i += 2
                continue
        elif c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)
