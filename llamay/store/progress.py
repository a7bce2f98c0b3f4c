"""A download progress reporter on stderr, with no dependency beyond the standard library.

A start line and an end line are always printed (servers run without a TTY, and their logs
must still show that a large download happened and how long it took). The live
carriage-return bar in between is drawn only when asked for, by default only on a TTY, since
in a log file every redraw would become a line.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["DownloadProgress", "format_bytes"]

_REDRAW_INTERVAL = 0.1  # seconds; faster redraws cost CPU and flicker without telling more


def format_bytes(n: float) -> str:
    """Human-readable size in decimal units (as download sizes are usually quoted)."""
    for unit in ("B", "kB", "MB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.2f} GB"


class DownloadProgress:
    """Reports one download. Use as a context manager and call `update(n)` per block.

    `live` None means: draw the bar only if the stream is a TTY. `stream` None means the
    current `sys.stderr` at each write (so redirection done after construction still works)."""

    def __init__(
        self,
        label: str,
        total: int | None,
        *,
        source: str = "",
        live: bool | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.source = source
        self.done = 0
        self._stream = stream
        self._live = live
        self._started = 0.0
        self._last_draw = 0.0
        self._drawn = False

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def live(self) -> bool:
        if self._live is not None:
            return self._live
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def __enter__(self) -> DownloadProgress:
        self._started = time.monotonic()
        size = format_bytes(self.total) if self.total is not None else "unknown size"
        where = f" from {self.source}" if self.source else ""
        self._write(f"llamay: downloading {self.label} ({size}){where}\n")
        return self

    def update(self, n: int) -> None:
        self.done += n
        if not self.live:
            return
        now = time.monotonic()
        if now - self._last_draw >= _REDRAW_INTERVAL:
            self._last_draw = now
            self._draw(now)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        now = time.monotonic()
        if self._drawn:
            self._draw(now)
            self._write("\n")
        elapsed = max(now - self._started, 1e-9)
        rate = f"{format_bytes(self.done / elapsed)}/s"
        if exc_type is None:
            self._write(
                f"llamay: downloaded {self.label}: {format_bytes(self.done)} in {elapsed:.1f} s ({rate})\n"
            )
        else:
            self._write(f"llamay: download of {self.label} failed after {format_bytes(self.done)}\n")

    def _draw(self, now: float) -> None:
        elapsed = max(now - self._started, 1e-9)
        rate = format_bytes(self.done / elapsed)
        if self.total:
            pct = min(100.0, 100.0 * self.done / self.total)
            bar = "#" * int(pct / 5)
            text = f"{bar:<20} {pct:5.1f}% {format_bytes(self.done)} / {format_bytes(self.total)}"
        else:
            text = format_bytes(self.done)
        # Trailing spaces erase what a longer previous line left behind.
        self._write(f"\r  {text}  {rate}/s    ")
        self._drawn = True

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stderr must never fail a download
