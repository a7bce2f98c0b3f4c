"""A progress bar on stderr for long index builds.

On a terminal the bar is redrawn in place (at most ten times a second); elsewhere (a log file)
a line is written at most every `LOG_INTERVAL` seconds, and one at the end.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["LOG_INTERVAL", "Progress"]

LOG_INTERVAL = 5.0
_REDRAW = 0.1
_WIDTH = 30


class Progress:
    """Counts `done` of `total` `unit` for `label`; `advance(n)` as work is done, `close()` at
    the end.  `stream` None = the current ``sys.stderr``; `live` None = redraw only on a TTY."""

    def __init__(
        self,
        total: int,
        label: str,
        unit: str = "passages",
        *,
        stream: TextIO | None = None,
        live: bool | None = None,
    ) -> None:
        self.total = max(0, total)
        self.label = label
        self.unit = unit
        self.done = 0
        self._stream = stream
        isatty = getattr(self.stream, "isatty", None)
        self.live = bool(isatty and isatty()) if live is None else live
        self._t0 = time.monotonic()
        self._last = 0.0
        self._closed = False

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def line(self) -> str:
        """The bar as text: label, bar, count, rate and time left."""
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        rate = self.done / elapsed
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * _WIDTH)
        bar = "#" * filled + "-" * (_WIDTH - filled)
        left = (self.total - self.done) / rate if rate > 0 else 0.0
        eta = f"  {left:.0f}s left" if self.done < self.total and rate > 0 else f"  {elapsed:.1f}s"
        return f"{self.label} [{bar}] {self.done}/{self.total} {self.unit}  {rate:.1f}/s{eta}"

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        now = time.monotonic()
        if self.live and now - self._last >= _REDRAW:
            self._write("\r" + self.line())
            self._last = now
        elif not self.live and now - self._last >= LOG_INTERVAL and now - self._t0 >= LOG_INTERVAL:
            self._write(self.line() + "\n")
            self._last = now

    def close(self) -> None:
        """Draw the final state and end the line (once)."""
        if self._closed:
            return
        self._closed = True
        self._write(("\r" if self.live else "") + self.line() + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream must not stop the build
            pass
