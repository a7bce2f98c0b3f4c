"""Every parser that reads request text does work linear in its length: long runs of each
character class (digits, dots, braces, spaces, letters, and the separators each parser
reacts to) are fed at n and 4n characters, and the work is counted, not timed.

Pure-Python scanners are counted in executed lines (`sys.settrace`), which is exact and
repeatable. The regular expressions of the redaction detectors run inside `re`, which no
tracer sees; for those the lines executed around them are added to the characters each
`re` call is given to scan (`pattern.finditer/search/match` over [pos, endpos)).
"""

from __future__ import annotations

import gc
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from llamay.api.ollama.gotemplate import render_template
from llamay.api.ollama.schemas import MAX_DURATION_CHARS, go_duration, parse_keep_alive
from llamay.errors import InvalidRequest
from llamay.redact import DETECTORS

CLASSES = {
    "digits": "1",
    "dots": ".",
    "braces": "{",
    "closing braces": "}",
    "spaces": " ",
    "letters": "a",
    "digit-dot": "1.",
    "digit-space": "1 ",
    "digit-dash": "1-",
    "digit-slash": "1/",
    "at": "a@",
    "atom-bang": "a!",
    "atom-quote": "a'",
    "hex-colon": "a:",
    "open-action": "{{",
    "dash-action": "{{- ",
    "if-action": "{{ if .System }}",
}
N = 4_000


def run_of(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n] + "x"


def lines_executed(fn: Callable[[], Any]) -> int:
    """Lines of Python executed while `fn` runs (its own and everything it calls). The
    cycle collector is paused so that finalizers of other tests' garbage (run by whichever
    call happens to trigger a collection) are not counted as this call's work. (Not
    collected first: in a long test session one full collection per call costs minutes.)"""
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return tracer

    gc.disable()
    sys.settrace(tracer)
    try:
        fn()
    except InvalidRequest:
        pass  # refusing is fine; what it costs to refuse is what is counted
    finally:
        sys.settrace(None)
        gc.enable()
    return count


def assert_linear(work: Callable[[int], int], what: str) -> None:
    """work(4n) at most 4.5x work(n), plus a constant for fixed costs: linear growth is
    4x, quadratic 16x, and even n log n would be about 4.7x here."""
    small, large = work(N), work(4 * N)
    assert large <= 4.5 * small + 200, f"{what}: {small} steps at n={N}, {large} at 4n"


@pytest.mark.parametrize("cls", list(CLASSES))
def test_keep_alive_parsing_is_bounded_and_linear(cls: str) -> None:
    unit = CLASSES[cls]
    # Past the cap, text is refused before any parsing: the same few steps at any length.
    refuse_small = lines_executed(lambda: parse_keep_alive(run_of(unit, N)))
    refuse_large = lines_executed(lambda: parse_keep_alive(run_of(unit, 4 * N)))
    assert refuse_large == refuse_small
    with pytest.raises(InvalidRequest):
        parse_keep_alive(run_of("1", 5_000))
    # Below the cap the scanner itself is linear too.
    assert_linear(lambda n: lines_executed(lambda: go_duration(run_of(unit, n))), f"go_duration {cls}")
    assert len("2562047h47m16.854775807s") <= MAX_DURATION_CHARS


@pytest.mark.parametrize("cls", list(CLASSES))
def test_go_template_scan_is_linear(cls: str) -> None:
    unit = CLASSES[cls]
    for field in ("template", "prompt"):

        def work(n: int, field: str = field) -> int:
            text = run_of(unit, n)
            if field == "template":
                return lines_executed(lambda: render_template(text, system="s", prompt="p"))
            return lines_executed(lambda: render_template("{{ .Prompt }}", system="", prompt=text))

        assert_linear(work, f"go template {field} {cls}")


def test_go_template_output_and_nesting_are_capped() -> None:
    with pytest.raises(InvalidRequest, match="renders to more than"):
        render_template("{{ .Prompt }}" * 10_000, system="", prompt="x" * 1_000)
    with pytest.raises(InvalidRequest, match="nests"):
        render_template("{{ if .System }}" * 1_000 + "{{ end }}" * 1_000, system="s", prompt="")
    assert render_template("{{- if .System }} {{ .System }} {{- end }} {{ .Prompt }}{{ .Response }}!",
                           system="S", prompt="P") == " S P"  # fmt: skip


@contextmanager
def scanned_chars() -> Iterator[list[int]]:
    """Counts the characters handed to compiled patterns' finditer/search/match/fullmatch
    by the redaction detectors (each call's [pos, endpos) span)."""
    total = [0]
    patterns: dict[str, Any] = {}
    for name in ("card_number", "date_of_birth", "email_address", "iban", "ip_address",
                 "phone", "uk_nino", "us_ssn", "windows"):  # fmt: skip
        module = sys.modules[f"llamay.redact.{name}"]
        for attr, value in vars(module).items():
            if isinstance(value, re.Pattern):
                patterns[f"{name}.{attr}"] = (module, attr, value)

    class Counting:
        def __init__(self, pattern: re.Pattern[str]) -> None:
            self.pattern = pattern

        def _span(self, text: str, pos: int = 0, endpos: int | None = None) -> None:
            total[0] += (len(text) if endpos is None else min(endpos, len(text))) - pos

        def finditer(self, text: str, *args: int) -> Any:
            self._span(text, *args)
            return self.pattern.finditer(text, *args)

        def search(self, text: str, *args: int) -> Any:
            self._span(text, *args)
            return self.pattern.search(text, *args)

        def match(self, text: str, *args: int) -> Any:
            self._span(text, *args)
            return self.pattern.match(text, *args)

        def fullmatch(self, text: str, *args: int) -> Any:
            self._span(text, *args)
            return self.pattern.fullmatch(text, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.pattern, name)

    try:
        for module, attr, value in patterns.values():
            setattr(module, attr, Counting(value))
        yield total
    finally:
        for module, attr, value in patterns.values():
            setattr(module, attr, value)


@pytest.mark.parametrize("tail", ["x", "@"])
@pytest.mark.parametrize("cls", list(CLASSES))
def test_redaction_detectors_scan_linearly(cls: str, tail: str) -> None:
    """`tail` "@" makes the whole run one e-mail window (an "@" at its end)."""
    unit = CLASSES[cls]
    for name, detector in DETECTORS.items():

        def work(n: int, detector: Any = detector) -> int:
            text = run_of(unit, n) + tail
            with scanned_chars() as total:
                steps = lines_executed(lambda: list(detector.find(text)))
            return steps + total[0]

        assert_linear(work, f"{name} on {cls}")
