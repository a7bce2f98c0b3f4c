"""redact(): overlap resolution, styles, exact offsets on multi-byte text, errors, CLI."""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from llamay.cli import redact as cli
from llamay.errors import InvalidRequest
from llamay.redact import DETECTORS, STYLES, Detector, Finding, Span, redact, register
from llamay.redact.resolve import Candidate, resolve

SAMPLES = {
    "EMAIL": "jane.doe@example.org",
    "CARD_NUMBER": "4111 1111 1111 1111",
    "IBAN": "GB82 WEST 1234 5698 7654 32",
    "PHONE": "+44 20 7946 0958",
    "US_SSN": "536-22-1234",
    "UK_NINO": "AB 12 34 56 C",
    "IP_ADDRESS": "2001:db8::1",
    "DATE_OF_BIRTH": "12/03/1985",
}
# Multi-byte before every identifier: accents, an emoji, a ZWJ family, CJK.
NOISE = "Crème brûlée, naïve façade 😀 👩‍👩‍👧 東京 — "


def sample_text() -> str:
    return "".join(f"{NOISE}{'DOB: ' if kind == 'DATE_OF_BIRTH' else ''}{v}. " for kind, v in SAMPLES.items())


def test_registry_has_every_type_in_priority_order() -> None:
    assert list(DETECTORS) == [
        "EMAIL", "CARD_NUMBER", "IBAN", "US_SSN", "UK_NINO", "IP_ADDRESS", "DATE_OF_BIRTH", "PHONE",
    ]  # fmt: skip
    assert all(isinstance(d, Detector) and d.name == name for name, d in DETECTORS.items())


def test_offsets_are_exact_on_multibyte_text() -> None:
    text = sample_text()
    result = redact(text)
    assert [(f.type, text[f.start : f.end]) for f in result.findings] == list(SAMPLES.items())
    assert all(f.source == "rules" for f in result.findings)
    assert result.text == "".join(
        f"{NOISE}{'DOB: ' if kind == 'DATE_OF_BIRTH' else ''}[{kind}]. " for kind in SAMPLES
    )


def test_types_selects_detectors() -> None:
    text = sample_text()
    result = redact(text, ["EMAIL", "US_SSN"])
    assert [f.type for f in result.findings] == ["EMAIL", "US_SSN"]
    assert [f.type for f in redact(text, "IBAN").findings] == ["IBAN"]
    assert redact(text, []).findings == []


def test_unknown_types_and_styles_are_refused() -> None:
    with pytest.raises(InvalidRequest) as err:
        redact("x", ["EMAIL", "PASSPORT", "SWIFT"])
    assert "PASSPORT" in err.value.message and "SWIFT" in err.value.message
    assert err.value.param == "types" and err.value.status == 400
    with pytest.raises(InvalidRequest) as err:
        redact("x", style="blur")  # type: ignore[arg-type]
    assert err.value.param == "style"


def test_mask_keeps_length_and_layout() -> None:
    text = sample_text()
    masked = redact(text, style="mask").text
    assert len(masked) == len(text)
    assert "****.***@*******.***" in masked
    assert "**** **** **** ****" in masked
    assert "+** ** **** ****" in masked
    assert "****:***::*" in masked
    assert "DOB: **/**/****" in masked
    for value in SAMPLES.values():
        assert value not in masked


def test_pseudonyms_are_consistent_within_a_call() -> None:
    text = (
        "a@example.org b@example.org A@Example.org 4111 1111 1111 1111 "
        "4111-1111-1111-1111, +44 20 7946 0958 or 020 7946 0958"
    )
    out = redact(text, style="pseudonym").text
    assert out == "[EMAIL_1] [EMAIL_2] [EMAIL_1] [CARD_NUMBER_1] [CARD_NUMBER_1], [PHONE_1] or [PHONE_1]"
    # Numbering starts afresh in each call.
    assert redact("b@example.org", style="pseudonym").text == "[EMAIL_1]"
    assert set(STYLES) == {"type", "mask", "pseudonym"} == set(cli.STYLE_CHOICES)


def test_longest_overlap_wins_across_types() -> None:
    # An SSN-shaped local part: the e-mail address is longer and wins.
    text = "write to 536-22-1234@example.org now"
    assert [(f.type, text[f.start : f.end]) for f in redact(text).findings] == [
        ("EMAIL", "536-22-1234@example.org")
    ]
    # An IPv4 address inside an IPv6 one.
    text = "from ::ffff:192.0.2.1 today"
    assert [text[f.start : f.end] for f in redact(text).findings] == ["::ffff:192.0.2.1"]


def _fixed(name: str, *spans: tuple[int, int]) -> Detector:
    def find(text: str) -> Iterator[Span]:
        return iter(Span(s, e, text[s:e]) for s, e in spans)

    return Detector(name, find)


def test_resolver_tie_rules() -> None:
    detectors = {
        "A": _fixed("A", (0, 4), (10, 14)),
        "B": _fixed("B", (2, 8), (10, 14), (12, 16)),
        "C": _fixed("C", (20, 22), (20, 22), (21, 23)),
    }
    result = redact("x" * 30, detectors=detectors)
    assert result.findings == [
        Finding("B", 2, 8),  # longest beats A's (0, 4)
        Finding("A", 10, 14),  # same span: registry order; earlier start beats (12, 16)
        Finding("C", 20, 22),  # duplicates collapse; earlier start wins the tie
    ]


def test_resolve_ignores_empty_spans_and_sorts() -> None:
    kept = resolve([Candidate(5, 9, 0, "X", ""), Candidate(0, 3, 1, "Y", ""), Candidate(4, 4, 0, "Z", "")])
    assert [(c.start, c.end) for c in kept] == [(0, 3), (5, 9)]


def test_register_adds_a_detector() -> None:
    saved = dict(DETECTORS)
    try:
        register(_fixed("TICKET", (0, 3)))
        assert list(DETECTORS)[-1] == "TICKET"
        assert redact("abc def", ["TICKET"]).text == "[TICKET] def"
    finally:
        DETECTORS.clear()
        DETECTORS.update(saved)


def run_cli(argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["redact", *argv])
    out = io.BytesIO()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(out))
    rc = int(args.func(args))
    sys.stdout.flush()
    return rc, out.getvalue().decode()


def test_cli_text_json_and_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "😀 mail jane@example.org from 10.0.0.1\n"
    assert run_cli([], text, monkeypatch) == (0, "😀 mail [EMAIL] from [IP_ADDRESS]\n")
    rc, out = run_cli(["--types", "EMAIL", "-style", "pseudonym", "-json"], text, monkeypatch)
    body = json.loads(out)
    assert rc == 0 and body["text"] == "😀 mail [EMAIL_1] from 10.0.0.1\n"
    assert body["findings"] == [{"type": "EMAIL", "start": 7, "end": 23, "source": "rules"}]
    assert run_cli(["-regions", "US"], "call 020 7946 0958", monkeypatch) == (0, "call 020 7946 0958")


def test_cli_reads_a_file_and_reports_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "in.txt"
    path.write_text("SSN 536-22-1234", encoding="utf-8")
    assert run_cli([str(path), "-style", "mask"], "", monkeypatch) == (0, "SSN ***-**-****")
    assert run_cli(["-types", "EMAIL,NOPE"], "x", monkeypatch)[0] == 1
    assert "NOPE" in capsys.readouterr().err
    path.write_bytes(b"\xff\xfe bad")
    assert run_cli([str(path)], "", monkeypatch)[0] == 1
    assert "UTF-8" in capsys.readouterr().err
