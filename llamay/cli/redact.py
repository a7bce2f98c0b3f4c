"""`llamay redact`: redact personal data from a file or stdin with the rule-based detectors."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .common import fail, flag

__all__ = ["STYLE_CHOICES", "add_parser", "run_redact"]


# Spelled out here, not imported: importing llamay.redact loads phonenumbers, which every
# `llamay` start would pay for. A unit test checks these against the package.
STYLE_CHOICES = ("type", "mask", "pseudonym")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "redact",
        help="redact personal data from text (rules only, nothing leaves the machine)",
        allow_abbrev=False,
        description=(
            "Read UTF-8 text from FILE (default: stdin) and print it with personal data "
            "replaced: e-mail addresses, card numbers, IBANs, phone numbers, US SSNs, UK "
            "National Insurance numbers, IP addresses and labelled dates of birth."
        ),
    )
    p.add_argument("file", nargs="?", default=None, metavar="FILE", help="input file (default: stdin)")
    flag(
        p,
        "types",
        default=None,
        help="comma-separated types to redact, e.g. EMAIL,PHONE (default: all)",
    )
    flag(p, "style", choices=STYLE_CHOICES, default="type", help="replacement style (default: type)")
    flag(p, "json", action="store_true", help="print the JSON result (text and findings) instead of the text")
    flag(
        p,
        "regions",
        default=None,
        help="comma-separated regions for national-format phone numbers (default: US,GB,DE,FR,IN)",
    )
    p.set_defaults(func=run_redact)


def _names(value: str | None) -> list[str] | None:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


def run_redact(args: argparse.Namespace) -> int:
    from ..redact import DETECTORS, phone_detector, redact

    try:
        data = Path(args.file).read_bytes() if args.file else sys.stdin.buffer.read()
        text = data.decode("utf-8")
        detectors = dict(DETECTORS)
        regions = _names(args.regions)
        if regions is not None:
            detectors["PHONE"] = phone_detector(regions)
        result = redact(text, _names(args.types), args.style, detectors=detectors)
    except UnicodeDecodeError as exc:
        return fail(ValueError(f"input is not UTF-8: {exc}"))
    except Exception as exc:
        return fail(exc)
    # Bytes, not sys.stdout's own encoding: the text must come out as it went in.
    out = json.dumps(result.to_dict(), ensure_ascii=False) + "\n" if args.json else result.text
    sys.stdout.buffer.write(out.encode("utf-8"))
    sys.stdout.flush()
    return 0
