"""Log lines as `time=... level=INFO msg="..." key=value`, one record per line."""

from __future__ import annotations

import logging
import sys
from datetime import datetime

__all__ = ["setup_logging", "kv"]


def _quote(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def kv(**fields: object) -> dict[str, object]:
    """Structured fields for a log call: log.info("msg", extra=kv(addr=...))."""
    return {"fields": fields}


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created).astimezone().isoformat(timespec="milliseconds")
        parts = [f"time={stamp}", f"level={record.levelname}", f"msg={_quote(record.getMessage())}"]
        fields = getattr(record, "fields", None) or {}
        parts.extend(f"{k}={_quote(v)}" for k, v in fields.items())
        if record.name.startswith("llamay.") and record.name not in ("llamay.cli",):
            parts.append(f"source={record.name.removeprefix('llamay.')}")
        if record.exc_info:
            parts.append(f"error={_quote(self.formatException(record.exc_info).splitlines()[-1])}")
        return " ".join(parts)


def setup_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # llama.cpp's own chatter is DEBUG; uvicorn's access log stays at WARNING unless asked.
    logging.getLogger("llamay.llama").setLevel(logging.WARNING if level.upper() != "DEBUG" else logging.DEBUG)
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
