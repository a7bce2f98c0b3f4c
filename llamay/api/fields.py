"""Typed field readers for JSON request bodies: each bad field is an InvalidRequest that
names it. Shared by every API's request parser."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..errors import InvalidRequest

__all__ = ["Fields", "check_size"]

_MISSING = object()


def _type_name(value: Any) -> str:
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def check_size(value: str, max_bytes: int, name: str) -> None:
    """InvalidRequest naming `name` and the limit when `value` is over `max_bytes` UTF-8 bytes."""
    # A character is at least one byte: a longer string is over without encoding it.
    if len(value) > max_bytes or len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise InvalidRequest(f"'{name}' may be at most {max_bytes} bytes of UTF-8 text", param=name)


class Fields:
    """Reads fields of one JSON object; `prefix` makes error names like `messages[2].role`."""

    def __init__(self, body: Any, prefix: str = "") -> None:
        if not isinstance(body, Mapping):
            where = f"'{prefix}'" if prefix else "the request body"
            raise InvalidRequest(
                f"{where} must be a JSON object, not {_type_name(body)}", param=prefix or None
            )
        self.body = body
        self.prefix = prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def _get(self, key: str, required: bool) -> Any:
        value = self.body.get(key, _MISSING)
        if value is _MISSING or value is None:
            if required:
                raise InvalidRequest(f"'{self.name(key)}' is required", param=self.name(key))
            return _MISSING
        return value

    def _bad(self, key: str, want: str, value: Any) -> InvalidRequest:
        return InvalidRequest(
            f"'{self.name(key)}' must be {want}, not {_type_name(value)}", param=self.name(key)
        )

    def text(
        self, key: str, default: str | None = None, *, required: bool = False, max_bytes: int | None = None
    ) -> Any:
        """A string; with `max_bytes`, one of at most that many UTF-8 bytes (a field the
        server keeps: its limit is named in the 400)."""
        value = self._get(key, required)
        if value is _MISSING:
            return default
        if not isinstance(value, str):
            raise self._bad(key, "a string", value)
        if max_bytes is not None:
            check_size(value, max_bytes, self.name(key))
        return value

    def flag(self, key: str, default: bool | None = None) -> Any:
        value = self._get(key, False)
        if value is _MISSING:
            return default
        if not isinstance(value, bool):
            raise self._bad(key, "a boolean", value)
        return value

    def integer(
        self, key: str, default: int | None = None, *, lo: int | None = None, hi: int | None = None
    ) -> Any:
        value = self._get(key, False)
        if value is _MISSING:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(key, "an integer", value)
        self._range(key, value, lo, hi)
        return value

    def number(
        self, key: str, default: float | None = None, *, lo: float | None = None, hi: float | None = None
    ) -> Any:
        value = self._get(key, False)
        if value is _MISSING:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
            raise self._bad(key, "a number", value)
        self._range(key, value, lo, hi)
        return float(value)

    def array(self, key: str, *, required: bool = False) -> Any:
        value = self._get(key, required)
        if value is _MISSING:
            return None
        if not isinstance(value, list):
            raise self._bad(key, "an array", value)
        return value

    def obj(self, key: str) -> Any:
        value = self._get(key, False)
        if value is _MISSING:
            return None
        if not isinstance(value, Mapping):
            raise self._bad(key, "an object", value)
        return value

    def raw(self, key: str) -> Any:
        value = self._get(key, False)
        return None if value is _MISSING else value

    def strings(self, key: str, limit: int, *, single: bool = True) -> tuple[str, ...]:
        """Stop strings and the like: an array of strings (or one string, if `single`), at
        most `limit` of them; empty ones dropped, duplicates kept once, order kept."""
        raw = self.raw(key)
        if raw is None:
            return ()
        items = [raw] if single and isinstance(raw, str) else raw
        if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
            what = "a string or an array of strings" if single else "an array of strings"
            raise InvalidRequest(f"'{self.name(key)}' must be {what}", param=self.name(key))
        if len(items) > limit:
            raise InvalidRequest(f"'{self.name(key)}' may hold at most {limit} strings", param=self.name(key))
        return tuple(dict.fromkeys(s for s in items if s))

    def _range(self, key: str, value: float, lo: float | None, hi: float | None) -> None:
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            span = (
                f"between {lo} and {hi}"
                if lo is not None and hi is not None
                else (f">= {lo}" if lo is not None else f"<= {hi}")
            )
            raise InvalidRequest(f"'{self.name(key)}' must be {span} (got {value})", param=self.name(key))
