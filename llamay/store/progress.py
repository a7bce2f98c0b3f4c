"""Pull progress on stderr, drawn from the Ollama-shaped events the pull pipeline emits.

A start line and an end line are always printed (servers run without a TTY, and their logs
must still show that a large download happened and how long it took). The live
carriage-return bar in between is drawn only when asked for, by default only on a TTY, since
in a log file every redraw would become a line. `verbose` adds a line per status change
(`pulling manifest`, `verifying sha256 digest`, ...), as `llamay pull` shows them.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["PullPrinter", "format_bytes"]

_REDRAW_INTERVAL = 0.1  # seconds; faster redraws cost CPU and flicker without telling more


def format_bytes(n: float) -> str:
    """Human-readable size in decimal units (as download sizes are usually quoted)."""
    for unit in ("B", "kB", "MB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.2f} GB"


class PullPrinter:
    """A progress callback (`printer(event)`) for one pull of `label`.

    `live` None means: draw the bar only if the stream is a TTY. `stream` None means the
    current `sys.stderr` at each write (so redirection done after construction still works)."""

    def __init__(
        self, label: str, *, live: bool | None = None, stream: TextIO | None = None, verbose: bool = False
    ) -> None:
        self.label = label
        self.verbose = verbose
        self._stream = stream
        self._live = live
        self._status = ""
        self._total = 0
        self._done = 0
        self._started: float | None = None
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

    def __call__(self, event: dict[str, Any]) -> None:
        status = str(event.get("status", ""))
        if status.startswith("pulling ") and "total" in event:
            self._total = int(event.get("total") or 0)
            self._done = int(event.get("completed") or 0)
            if self._started is None and (self._done < self._total or not self._total):
                self._started = time.monotonic()  # something to fetch (not all present)
                self._write(f"llamay: downloading {self.label} ({format_bytes(self._total)})\n")
            now = time.monotonic()
            if self.live and (now - self._last_draw >= _REDRAW_INTERVAL or self._done >= self._total):
                self._last_draw = now
                self._draw(now)
            return
        if status == self._status:
            return
        self._status = status
        self._end_bar()
        if status == "verifying sha256 digest" and self._started is not None:
            elapsed = max(time.monotonic() - self._started, 1e-9)
            rate = format_bytes(self._done / elapsed)
            self._write(
                f"llamay: downloaded {self.label}: {format_bytes(self._done)} in {elapsed:.1f} s ({rate}/s)\n"
            )
        if status and (self.verbose or status.startswith("waiting")):
            self._write(f"llamay: {status}\n" if not self.verbose else f"{status}\n")

    def failed(self, message: str) -> None:
        """End a bar left open and say the pull failed (the message is the caller's)."""
        self._end_bar()
        if self._started is not None:
            self._write(f"llamay: download of {self.label} failed after {format_bytes(self._done)}\n")

    def _end_bar(self) -> None:
        if self._drawn:
            self._draw(time.monotonic())
            self._write("\n")
            self._drawn = False

    def _draw(self, now: float) -> None:
        elapsed = max(now - (self._started or now), 1e-9)
        rate = format_bytes(self._done / elapsed)
        if self._total:
            pct = min(100.0, 100.0 * self._done / self._total)
            bar = "#" * int(pct / 5)
            text = f"{bar:<20} {pct:5.1f}% {format_bytes(self._done)} / {format_bytes(self._total)}"
        else:
            text = format_bytes(self._done)
        # Trailing spaces erase what a longer previous line left behind.
        self._write(f"\r  {text}  {rate}/s    ")
        self._drawn = True

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stderr must never fail a download
