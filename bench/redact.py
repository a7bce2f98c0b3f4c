"""Redaction benchmark: throughput, precision and recall on a corpus with planted identifiers.

    .venv/bin/python -m bench.redact [--size-mb 3] [--seed 0] [--presidio-python PATH]

Generates prose (accents, emoji, CJK, everyday numbers) with planted valid identifiers of
every type and planted near-misses (wrong check digits, IBANs of the wrong length, invalid
phone numbers, SSN areas 000/666/9xx, void SSNs, unallocated NINO prefixes, 999.x.x.x,
unlabelled dates, ...) at known offsets; runs llamay.redact over it, then presidio-analyzer
if an interpreter that imports it is given (--presidio-python or $PRESIDIO_PYTHON). No spaCy
model can be downloaded here, so presidio runs on a blank English pipeline: its pattern
recognizers work, its NER ones find nothing. Throughput is also measured on prose alone.

recall: planted valid identifiers found with their type and exact span (recall_overlap:
any finding of the type overlapping); precision: findings that are exactly a planted valid
identifier; near_miss_hits: near-misses that any finding touches.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

__all__ = ["build_corpus", "main", "score"]


Plant = tuple[str, int, int, bool]  # type, start, end (str offsets), valid
Found = tuple[str, int, int]
# presidio entity -> llamay type; DATE_TIME (any date) is the nearest it has to a DOB.
PRESIDIO_TYPES = {
    "EMAIL_ADDRESS": "EMAIL", "CREDIT_CARD": "CARD_NUMBER", "IBAN_CODE": "IBAN", "PHONE_NUMBER": "PHONE",
    "US_SSN": "US_SSN", "UK_NINO": "UK_NINO", "IP_ADDRESS": "IP_ADDRESS", "DATE_TIME": "DATE_OF_BIRTH",
}  # fmt: skip
WORDS = str.split(
    "the of and to in is was for on with as by at from that this report meeting quarter café naïve "
    "résumé façade crème brûlée jalapeño Zürich São Paulo Kraków 東京 😀 👍 🎉 customer account team "
    "project budget review office travel schedule weather garden coffee river music window letter"
)
NUMBERS = ("in 2019", "at 10:30", "about 42%", "for $12.50", "around 3 pm", "page 17", "v2.4", "room 1204")
TEMPLATES = ("Contact {} for details.", "The file lists {} as the reference.", "Please check {} today.")
# Registry examples: a generated IBAN copies one's letters-and-digits layout (its BBAN format).
IBAN_SHAPES = str.split("""AL47212110090000000235698741 AD1200012030200359100100 AT611904300234573201 BE68539007547034
BA391290079401028494 BG80BNBG96611020345678 HR1210010051863000160 CY17002001280000001200527600
CZ6508000000192000145399 DK5000400440116243 EE382200221020145685 FI2112345600000785 NO9386011117947
FR1420041010050500013M02606 DE89370400440532013000 GR1601101250000000012300695 IE29AIBK93115212345678
IT60X0542811101000000123456 NL91ABNA0417164300 PL61109010140000071219812874 PT50000201231234567890154
ES9121000418450200051332 SE4550000000058398257466 CH9300762011623852957 GB29NWBK60161331926819
SA0380000000608010167519 TR330006100519786457841326 BR1800360305000010009795493C1
MT84MALT011000012345MTLCAST001S""")
DIGITS, LETTERS = "0123456789", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MONTHS = str.split("January February March April May June July August September October November December")


def _luhn_digit(body: str) -> int:
    total = sum(d - 9 if d > 9 else d for d in (int(c) * (2 - i % 2) for i, c in enumerate(reversed(body))))
    return -total % 10


def _check_digits(country: str, bban: str) -> str:
    return f"{98 - int(''.join(str(int(c, 36)) for c in bban + country + '00')) % 97:02d}"


def _fours(s: str) -> str:
    return " ".join(s[i : i + 4] for i in range(0, len(s), 4))


class Gen:
    """Random identifiers of each type: valid ones, or near-misses when `valid` is False."""

    CARDS = "4:16 4:13 53:16 2221:16 34:15 37:15 6011:16 65:16 3530:16 36:14 62:16 6759:16"  # IIN:length

    def __init__(self, rng: random.Random) -> None:
        import phonenumbers as pn

        self.rng, self.pick, self.pn = rng, rng.choice, pn
        kinds = (pn.PhoneNumberType.FIXED_LINE, pn.PhoneNumberType.MOBILE)
        examples = (pn.example_number_for_type(r, t) for r in ("US", "GB", "DE", "FR", "IN") for t in kinds)
        self.phones = [n for n in examples if n is not None]

    def digits(self, n: int) -> str:
        return "".join(self.pick(DIGITS) for _ in range(n))

    def card(self, valid: bool) -> str:
        prefix, length_text = self.pick(self.CARDS.split()).split(":")
        length = int(length_text)
        body = prefix + self.digits(length - len(prefix) - 1)
        number = body + str((_luhn_digit(body) + (0 if valid else self.rng.randint(1, 9))) % 10)
        if length == 15 and self.rng.random() < 0.5:
            return f"{number[:4]} {number[4:10]} {number[10:]}"
        return self.pick(("", " ", "-")).join(number[i : i + 4] for i in range(0, length, 4))

    def iban(self, valid: bool) -> str:
        shape = self.pick(IBAN_SHAPES)
        bban = "".join(self.pick(LETTERS if c.isalpha() else DIGITS) for c in shape[4:])
        wrong_length = not valid and self.rng.random() < 0.5
        if wrong_length:  # checksum right, length wrong for the country
            bban = bban[:-1] if self.rng.random() < 0.5 else bban + self.digits(1)
        compact = shape[:2] + _check_digits(shape[:2], bban) + bban
        if not valid and not wrong_length:  # one digit changed: mod-97 catches every such change
            i = self.pick([i for i, c in enumerate(compact) if i >= 2 and c.isdigit()])
            compact = compact[:i] + self.pick(DIGITS.replace(compact[i], "")) + compact[i + 1 :]
        return compact if self.rng.random() < 0.5 else _fours(compact)

    def phone(self, valid: bool) -> str:
        pn = self.pn
        while True:
            example = self.pick(self.phones)
            national = str(example.national_number)
            # A near-miss has a digit too few or too many, or (+1) an area code led by 0 or 1.
            body = national[:-3] + self.digits(3 if valid else self.pick((2, 4)))
            if not valid and example.country_code == 1 and self.rng.random() < 0.5:
                body = self.pick("01") + national[1:]
            number = pn.parse(f"+{example.country_code}{body}")
            if pn.is_valid_number(number) == valid and (valid or not pn.is_possible_number(number)):
                national_style = valid and self.rng.random() < 0.5
                fmt = pn.PhoneNumberFormat.NATIONAL if national_style else pn.PhoneNumberFormat.INTERNATIONAL
                return pn.format_number(number, fmt)

    def ssn(self, valid: bool) -> str:
        if not valid and self.rng.random() < 0.2:
            return self.pick(("078-05-1120", "219-09-9999", "123-45-6789"))
        area = self.pick([a for a in range(1, 900) if a != 666] if valid else [0, 666, 900, 987])
        sep = self.pick("- ")
        return f"{area:03d}{sep}{self.rng.randint(1, 99):02d}{sep}{self.rng.randint(1, 9999):04d}"

    def nino(self, valid: bool) -> str:
        bad = ("BG", "GB", "KN", "NK", "NT", "TN", "ZZ", "DA", "FA", "AQ", "AO")
        prefix = self.pick(bad)
        while valid and prefix in bad:
            prefix = self.pick("ABCEGHJKLMNPRSTWXYZ") + self.pick("ABCEGHJKLMNPRSTWXYZ")
        d, suffix, sep = self.digits(6), self.pick("ABCD"), self.pick(("", " "))
        return sep.join((prefix, d[:2], d[2:4], d[4:], suffix))

    def ip(self, valid: bool) -> str:
        import ipaddress

        if not valid or self.rng.random() < 0.6:  # a near-miss has a first part over 255
            parts = [self.rng.randint(1 if valid else 256, 254 if valid else 999)]
            return ".".join(map(str, parts + [self.rng.randint(1, 254) for _ in range(3)]))
        addr = ipaddress.IPv6Address(self.rng.getrandbits(128) & ~(0xFFFFFFFF << 32))  # zeros to compress
        return addr.compressed if self.rng.random() < 0.5 else addr.exploded

    def email(self, valid: bool) -> str:
        local = f"{self.pick(('jane', 'john', 'zoë', 'li.wei', 'a_b', 'o.brien+news'))}.{self.rng.randint(1, 9999)}"
        hosts = ("example.com", "mail.example.org", "post.example.co.uk", "müller.example.de")
        return f"{local}@{self.pick(hosts if valid else ('localhost', 'example.c', 'mail.example.c0m'))}"

    def dob(self, valid: bool) -> tuple[str, str]:
        y, m, d = self.rng.randint(1930, 2010), self.rng.randint(1, 12), self.rng.randint(1, 28)
        month, labels = MONTHS[m - 1], ("DOB: ", "Date of birth: ", "born on ", "d.o.b. ")
        date = self.pick(
            (f"{d:02d}/{m:02d}/{y}", f"{y}-{m:02d}-{d:02d}", f"{d} {month} {y}", f"{month} {d}, {y}")
        )
        return self.pick(labels if valid else ("the review on ", "due ")), date


def build_corpus(size: int, seed: int, plant_rate: float = 0.25) -> tuple[str, list[Plant]]:
    """About `size` characters of prose; after each sentence, with probability `plant_rate`,
    a sentence planting an identifier (70% valid). Returns (text, plants)."""
    rng = random.Random(seed)
    gen = Gen(rng)
    makers = {"EMAIL": gen.email, "CARD_NUMBER": gen.card, "IBAN": gen.iban, "PHONE": gen.phone}
    makers |= {"US_SSN": gen.ssn, "UK_NINO": gen.nino, "IP_ADDRESS": gen.ip}
    parts: list[str] = []
    plants: list[Plant] = []
    pos = 0
    while pos < size:
        words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), rng.choice(NUMBERS))
        sentence = " ".join(words).capitalize() + ". "
        if rng.random() < plant_rate:
            kind, valid = rng.choice([*makers, "DATE_OF_BIRTH"]), rng.random() < 0.7
            label, value = gen.dob(valid) if kind == "DATE_OF_BIRTH" else ("", makers[kind](valid))
            before, after = rng.choice(TEMPLATES).split("{}")
            start = pos + len(sentence) + len(before) + len(label)
            plants.append((kind, start, start + len(value), valid))
            sentence += f"{before}{label}{value}{after} "
        if rng.random() < 0.1:
            sentence += "\n\n"
        parts.append(sentence)
        pos += len(sentence)
    return "".join(parts), plants


def score(text: str, plants: list[Plant], found: list[Found]) -> dict[str, Any]:
    """Recall, precision and near-miss hits of `found` against `plants` (module doc)."""
    ordered, exact = sorted(found, key=lambda f: f[1]), set(found)
    starts, longest = [f[1] for f in ordered], max((f[2] - f[1] for f in found), default=0)

    def index(s: int, e: int) -> list[Found]:  # the findings overlapping [s, e), by bisection
        lo, hi = bisect.bisect_left(starts, s - longest), bisect.bisect_left(starts, e)
        return [f for f in ordered[lo:hi] if s < f[2]]

    valid = [p[:3] for p in plants if p[3]]
    hit = [p[:3] in exact for p in valid]
    touched = [any(f[0] == p[0] for f in index(p[1], p[2])) for p in valid]
    near = [(p, fs) for p in plants if not p[3] and (fs := index(p[1], p[2]))]
    kinds = sorted({p[0] for p in valid})
    return {
        "findings": len(found),
        "recall": round(sum(hit) / max(1, len(valid)), 4),
        "recall_overlap": round(sum(touched) / max(1, len(valid)), 4),
        "precision": round(len(exact & set(valid)) / max(1, len(exact)), 4),
        "near_miss_hits": len(near),
        "near_miss_hits_by_type": dict(sorted(Counter(p[0] for p, _ in near).items())),
        "near_miss_hit_examples": [f"{p[0]} {text[p[1] : p[2]]!r} <- {fs[0][0]}" for p, fs in near[:10]],
        "per_type_recall": {k: round(_share(hit, valid, k), 4) for k in kinds},
    }


def _share(flags: list[bool], plants: list[Found], kind: str) -> float:
    mine = [flag for flag, p in zip(flags, plants, strict=True) if p[0] == kind]
    return sum(mine) / len(mine)


def _timed(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def _mb(text: str) -> float:
    return len(text.encode()) / 1e6


def run_llamay(text: str, prose: str) -> tuple[dict[str, Any], list[Found]]:
    from llamay.redact import DETECTORS, redact

    per_detector = {
        name: round(_timed(lambda d=d: list(d.find(text)))[0], 3) for name, d in DETECTORS.items()
    }
    (prose_s, _), (seconds, result) = _timed(redact, prose), _timed(redact, text)
    info = {"mb_per_s": round(_mb(text) / seconds, 2), "prose_mb_per_s": round(_mb(prose) / prose_s, 2)}
    return {**info, "seconds": round(seconds, 2), "detector_seconds": per_detector}, [
        (f.type, f.start, f.end) for f in result.findings
    ]


def presidio_worker(paths: list[str]) -> None:
    """In presidio's interpreter: analyze each file; print [findings, seconds] per file."""
    import importlib.metadata as md

    import spacy
    import tldextract

    # Offline: presidio's e-mail check would fetch the public suffix list; use the bundled copy.
    tldextract.tldextract.TLD_EXTRACTOR = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)
    from presidio_analyzer import AnalyzerEngine
    from presidio_analyzer.nlp_engine import NlpEngineProvider
    from presidio_analyzer.predefined_recognizers import UkNinoRecognizer

    with tempfile.TemporaryDirectory() as model_dir:
        spacy.blank("en").to_disk(model_dir)
        config = {"nlp_engine_name": "spacy", "models": [{"lang_code": "en", "model_name": model_dir}]}
        engine = AnalyzerEngine(nlp_engine=NlpEngineProvider(nlp_configuration=config).create_engine())
    engine.registry.add_recognizer(UkNinoRecognizer())  # off by default; on for a fair count
    runs = []
    for path in paths:
        text, found, start = Path(path).read_text(encoding="utf-8"), [], 0
        t0 = time.perf_counter()
        while start < len(text):  # under spaCy's length limit, in whole paragraphs
            end = text.find("\n\n", start + 50_000)
            end = len(text) if end < 0 else end
            for r in engine.analyze(text[start:end], language="en"):
                if r.entity_type in PRESIDIO_TYPES:
                    found.append((PRESIDIO_TYPES[r.entity_type], start + r.start, start + r.end))
            start = end
        runs.append([found, time.perf_counter() - t0])
    json.dump({"version": md.version("presidio-analyzer"), "runs": runs}, sys.stdout)


def run_presidio(text: str, prose: str, python: str | None) -> tuple[dict[str, Any], list[Found] | None]:
    if not python:
        return {"ran": False, "reason": "no interpreter with presidio-analyzer: pass --presidio-python"}, None
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp, "corpus.txt"), Path(tmp, "prose.txt")]
        for path, body in zip(paths, (text, prose), strict=True):
            path.write_text(body, encoding="utf-8")
        cmd = [python, "-m", "bench.redact", "--presidio-worker", *map(str, paths)]
        proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"ran": False, "reason": (proc.stderr.strip().splitlines() or ["failed"])[-1]}, None
    out = json.loads(proc.stdout)
    (found, seconds), (_, prose_seconds) = out["runs"]
    info = {"ran": True, "version": out["version"], "spacy_pipeline": "blank en (no model can be downloaded)"}
    info |= {
        "mb_per_s": round(_mb(text) / seconds, 2),
        "prose_mb_per_s": round(_mb(prose) / prose_seconds, 2),
    }
    return {**info, "seconds": round(seconds, 2)}, [(t, s, e) for t, s, e in found]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=float, default=3.0, help="corpus size (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--presidio-python", default=os.environ.get("PRESIDIO_PYTHON"), help="its interpreter")
    ap.add_argument("--presidio-worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.presidio_worker:
        presidio_worker(args.presidio_worker)
        return 0
    from .common import print_json

    text, plants = build_corpus(int(args.size_mb * 1e6), args.seed)
    prose, _ = build_corpus(int(args.size_mb * 1e6), args.seed + 1, plant_rate=0.0)
    report: dict[str, Any] = {"corpus": {"mb": round(_mb(text), 2), "chars": len(text), "seed": args.seed}}
    report["plants"] = {"valid": sum(p[3] for p in plants), "near_misses": sum(not p[3] for p in plants)}
    info, found = run_llamay(text, prose)
    report["llamay"] = {**info, **score(text, plants, found)}
    p_info, p_found = run_presidio(text, prose, args.presidio_python)
    report["presidio"] = p_info if p_found is None else {**p_info, **score(text, plants, p_found)}
    print_json(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
