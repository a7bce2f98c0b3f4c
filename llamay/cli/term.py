"""Terminal output for the interactive verbs: model text made safe to print, thinking shown
dimmed, a progress bar that ends with a newline."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Term", "printable"]

DIM, RESET = "\x1b[2m", "\x1b[0m"
# C0 controls and DEL, except tab and newline: model output is untrusted text, and an escape
# sequence in it must not move the cursor, retitle the window or recolour the terminal.
_CONTROLS = {c: None for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F)}
_CONTROLS[0x0D] = None  # a lone carriage return would overwrite the line already printed


def printable(text: str) -> str:
    """`text` without terminal control characters (tab and newline kept)."""
    return text.translate(_CONTROLS)


class Term:
    """Where answers (`out`) and everything else (`err`: thinking when `out` is not a
    terminal, progress, stats, notes) are written. Styling only on terminals."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.styled = self.out.isatty()
        self._bar_drawn = -1
        self._bar_started = 0.0

    def answer(self, text: str) -> None:
        self.out.write(printable(text))
        self.out.flush()

    def thinking(self, text: str) -> None:
        """Reasoning text: dimmed beside the answer on a terminal; on stderr otherwise, so a
        redirected answer holds only the answer."""
        if self.styled:
            self.out.write(DIM + printable(text) + RESET)
            self.out.flush()
        else:
            self.err.write(printable(text))
            self.err.flush()

    def note(self, text: str) -> None:
        """A line for the user (stats, command replies), on stderr, dimmed on a terminal."""
        styled = self.err.isatty()
        self.err.write((DIM + text + RESET if styled else text) + "\n")
        self.err.flush()

    def progress(self, label: str, fraction: float) -> None:
        """Draw `label [####....] 42%` on stderr (a terminal only), redrawn in place; the
        bar ends its line when it reaches 100%."""
        if not self.err.isatty():
            return
        pct = max(0, min(100, int(fraction * 100)))
        if pct == self._bar_drawn:
            return
        if self._bar_drawn < 0:
            self._bar_started = time.monotonic()
        self._bar_drawn = pct
        width = 30
        filled = width * pct // 100
        elapsed = time.monotonic() - self._bar_started
        line = f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {pct:3d}% {elapsed:4.1f}s"
        self.err.write(line + ("\n" if pct == 100 else ""))
        self.err.flush()

    def end_progress(self) -> None:
        """End a bar that stopped short of 100% (a failed load) with a newline."""
        if 0 <= self._bar_drawn < 100 and self.err.isatty():
            self.err.write("\n")
            self.err.flush()
        self._bar_drawn = -1
