"""Schema coverage: how much of real-world JSON Schema llamay's compiler takes, and whether
what it takes is right.

    .venv/bin/python -m bench.coverage [--every N] [--jobs N] [--timeout S] [--details FILE]

No model is needed. Two corpora:

- real-world schemas, `bench/data/schemas.jsonl.gz` (JSON Schema Store catalog and the
  `components/schemas` of public OpenAPI documents; see bench/data/README.md and
  bench.coverage.corpus, which rebuilds it);
- the JSON-Schema-Test-Suite, every draft vendored under tests/data/json-schema-test-suite
  (else the shared 2020-12 copy). A suite schema without `$schema` gets its folder's
  draft, as the suite's own runners do.

Every schema is compiled three ways (bench.coverage.measure): llamay non-strict, llamay
strict, and llguidance alone; each compile runs in a worker process on its own time
budget (bench.coverage.pool), so a pathological schema costs a timeout, not the run.

Reported per draft (the draft a schema declares; undeclared counts as 2020-12), per
source and overall: n; compiled (non-strict, and compiled for a tokenizer) with its
share; enforced exactly (nothing unenforced) and enforced with validation (something
left to the after-the-fact check); refusals grouped by the SchemaError's keyword (with
llguidance's error when it failed on what the compiler passed it, or the error's first
words when it names no keyword); refusals for an annotation, unknown keyword or
draft, which must be 0; timeouts and errors; the strict and llguidance-alone compiled
counts. For the suite, every test instance is also matched against the non-strict
grammar: accepted-but-wrong (an invalid instance that the grammar matches and nothing
catches afterwards) must be 0, and so should valid-but-rejected.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import importlib
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common import percentile, print_json
from .measure import ACCEPTED_WRONG, MODES, OUTCOMES, VALID_REJECTED, Mode, Task, measure
from .pool import CRASHED, TIMEOUT, Done, Outcome, run_tasks

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "bench" / "data" / "schemas.jsonl.gz"
VENDORED_SUITE = ROOT / "tests" / "data" / "json-schema-test-suite"
SHARED_SUITE = Path("/work/shared/conformance/json-schema-test-suite-2020-12")
DRAFT_URIS = {
    "draft4": "http://json-schema.org/draft-04/schema#",
    "draft6": "http://json-schema.org/draft-06/schema#",
    "draft7": "http://json-schema.org/draft-07/schema#",
    "draft2019-09": "https://json-schema.org/draft/2019-09/schema",
    "draft2020-12": "https://json-schema.org/draft/2020-12/schema",
}
TARGET_SHARE = 0.90
DEFAULT_TIMEOUT = 60.0
TOP_REASONS = 15
# Keywords that assert something or structure a schema, in any draft ("false" is what
# the compiler names a `false` schema by). A refusal naming any other keyword is a
# refusal for an annotation, an unknown keyword, or (`$schema`) a draft.
STRUCTURAL = frozenset(
    (
        "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
        "exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "items", "additionalItems",
        "prefixItems", "contains", "minContains", "maxContains", "maxItems", "minItems", "uniqueItems",
        "properties", "patternProperties", "additionalProperties", "propertyNames", "maxProperties",
        "minProperties", "required", "dependentRequired", "dependentSchemas", "dependencies", "allOf",
        "anyOf", "oneOf", "not", "if", "then", "else", "unevaluatedItems", "unevaluatedProperties",
        "$ref", "$dynamicRef", "$recursiveRef", "$defs", "definitions", "$id", "id", "$anchor",
        "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "false",
    )
)  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One schema to measure: where it is from, its draft, and suite tests if any."""

    source: str  # "schemastore:NAME", "openapi-openai:NAME", "suite:draft7/items[3]"
    family: str  # the source up to ":" (the suite's is "suite")
    draft: str
    schema: Any
    tests: tuple[dict[str, Any], ...] = ()


def draft_of(schema: Any) -> str:
    """The draft `schema` declares, as llamay reads it (2020-12 if undeclared/unknown)."""
    llamay_draft_of = _llamay_draft_of()
    if llamay_draft_of is not None:
        return str(llamay_draft_of(schema))
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    for draft, known in DRAFT_URIS.items():
        if isinstance(uri, str) and uri.rstrip("#").split("//")[-1] == known.rstrip("#").split("//")[-1]:
            return draft
    return "draft2020-12"


@functools.cache
def _llamay_draft_of() -> Callable[[Any], Any] | None:
    for module in ("llamay.grammar.schema", "llamay.grammar.drafts"):
        with contextlib.suppress(ImportError, AttributeError):
            return importlib.import_module(module).draft_of  # type: ignore[no-any-return]
    return None


def load_corpus(path: Path = CORPUS, every: int = 1) -> list[Entry]:
    """Every `every`-th schema of the real-world corpus (all of them by default)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [json.loads(line) for line in f][::every]
    return [
        Entry(ln["source"], ln["source"].split(":", 1)[0], draft_of(ln["schema"]), ln["schema"])
        for ln in lines
    ]


def suite_dirs(vendored: Path = VENDORED_SUITE, shared: Path = SHARED_SUITE) -> dict[str, Path]:
    """draft -> folder of suite files: each vendored draft folder that exists, else the
    shared 2020-12 copy (if present)."""
    found = {d: vendored / d for d in DRAFT_URIS if (vendored / d).is_dir()}
    if not found and shared.is_dir():
        found = {"draft2020-12": shared}
    return found


def load_suite(dirs: dict[str, Path], every: int = 1) -> list[Entry]:
    """Every `every`-th group of the suite's top-level files (not `optional/`)."""
    out: list[Entry] = []
    for draft, folder in dirs.items():
        for path in sorted(folder.glob("*.json")):
            for i, group in enumerate(json.loads(path.read_text())):
                schema = group["schema"]
                if isinstance(schema, dict) and "$schema" not in schema:
                    schema = {"$schema": DRAFT_URIS[draft], **schema}
                label = f"suite:{draft}/{path.stem}[{i}]"
                out.append(Entry(label, "suite", draft, schema, tuple(group["tests"])))
    return out[::every]


# -- tallies -------------------------------------------------------------------------------


def refusal_reason(outcome: Outcome) -> str | None:
    """Why a compile failed ("timeout" / "crashed" / "error: ..." included), or None if it
    compiled."""
    if outcome in (TIMEOUT, CRASHED):
        return str(outcome)
    assert isinstance(outcome, Done)
    if outcome.error is not None:
        return "error: " + outcome.error.split(":", 1)[0]
    return None if outcome.value["ok"] else str(outcome.value["reason"])


def is_failure(reason: str) -> bool:
    """Not a refusal: the compile timed out, crashed its worker or raised something that
    is not a GrammarError (a bug)."""
    return reason in (TIMEOUT, CRASHED) or reason.startswith("error: ")


def is_annotation_or_draft(reason: str) -> bool:
    """A refusal naming a keyword that neither asserts nor structures anything."""
    keyword = reason.split(": ", 1)[0]  # "keyword: cause" for llguidance failures
    if is_failure(reason) or keyword in ("compile", "llguidance"):
        return False  # not a SchemaError naming a keyword
    return keyword not in STRUCTURAL


@dataclass
class Tally:
    """Counts over a set of schemas, each measured in every mode."""

    n: int = 0
    compiled: Counter[str] = field(default_factory=Counter)  # mode -> count
    exact: int = 0
    with_validation: int = 0
    refused: dict[str, Counter[str]] = field(default_factory=lambda: {m: Counter() for m in MODES})
    instances: Counter[str] = field(default_factory=Counter)
    compile_ms: list[float] = field(default_factory=list)  # nonstrict, compiled ones
    wrong: list[str] = field(default_factory=list)

    def add(self, source: str, results: dict[Mode, Outcome]) -> None:
        self.n += 1
        for mode in MODES:
            reason = refusal_reason(results[mode])
            if reason is not None:
                self.refused[mode][reason] += 1
                continue
            self.compiled[mode] += 1
            if mode != "nonstrict":
                continue
            value = results[mode].value  # type: ignore[union-attr]
            self.compile_ms.append(value["seconds"] * 1000.0)
            if value["unenforced"]:
                self.with_validation += 1
            else:
                self.exact += 1
            self.instances.update(value.get("instances", {}))
            self.wrong += [f"{source}: {w}" for w in value.get("wrong", [])]

    def summary(self) -> dict[str, Any]:
        refused = self.refused["nonstrict"]
        bad = Counter({r: c for r, c in refused.items() if is_annotation_or_draft(r)})
        out: dict[str, Any] = {
            "n": self.n,
            "compiled": self.compiled["nonstrict"],
            "compiled_share": _share(self.compiled["nonstrict"], self.n),
            "enforced_exactly": self.exact,
            "enforced_with_validation": self.with_validation,
            "refused": sum(c for r, c in refused.items() if not is_failure(r)),
            "refused_by_reason": _top({r: c for r, c in refused.items() if not is_failure(r)}),
            "refused_annotation_or_draft": {"count": sum(bad.values()), "by_keyword": dict(bad)},
            "timeouts": refused[TIMEOUT],
            "errors": {r: c for r, c in refused.items() if is_failure(r) and r != TIMEOUT},
            "compile_ms": {
                "p50": _round(percentile(self.compile_ms, 50)),
                "p99": _round(percentile(self.compile_ms, 99)),
                "max": _round(max(self.compile_ms, default=float("nan"))),
            },
            "strict": self._mode_summary("strict"),
            "llguidance_alone": self._mode_summary("llguidance"),
        }
        if self.instances:
            out["instances"] = {k: self.instances[k] for k in OUTCOMES}
        return out

    def _mode_summary(self, mode: Mode) -> dict[str, Any]:
        refused = self.refused[mode]
        return {
            "compiled": self.compiled[mode],
            "compiled_share": _share(self.compiled[mode], self.n),
            "timeouts": refused[TIMEOUT],
            "errors": sum(c for r, c in refused.items() if is_failure(r) and r != TIMEOUT),
            "refused_by_reason": _top({r: c for r, c in refused.items() if not is_failure(r)}, 8),
        }


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _round(v: float) -> float:
    return round(v, 2)


def _top(counts: dict[str, int], k: int = TOP_REASONS) -> dict[str, int]:
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out = dict(ordered[:k])
    if len(ordered) > k:
        out["(other reasons)"] = sum(c for _, c in ordered[k:])
    return out


@dataclass
class Report:
    """Tallies overall, per draft and per source family, for one corpus."""

    overall: Tally = field(default_factory=Tally)
    by_draft: dict[str, Tally] = field(default_factory=dict)
    by_family: dict[str, Tally] = field(default_factory=dict)

    def add(self, entry: Entry, results: dict[Mode, Outcome]) -> None:
        for tally in (
            self.overall,
            self.by_draft.setdefault(entry.draft, Tally()),
            self.by_family.setdefault(entry.family, Tally()),
        ):
            tally.add(entry.source, results)

    def summary(self, *, families: bool) -> dict[str, Any]:
        out = {"overall": self.overall.summary()}
        out["by_draft"] = {d: t.summary() for d, t in sorted(self.by_draft.items(), key=_draft_order)}
        if families:
            out["by_source"] = {f: t.summary() for f, t in sorted(self.by_family.items())}
        return out


def _draft_order(item: tuple[str, Any]) -> int:
    drafts = list(DRAFT_URIS)
    return drafts.index(item[0]) if item[0] in drafts else len(drafts)


# -- the run -------------------------------------------------------------------------------


def measure_all(
    entries: list[Entry], *, jobs: int, timeout: float, details: Any = None
) -> list[dict[Mode, Outcome]]:
    """mode -> outcome for each entry (in order), compiled in the pool, biggest first (so
    the long compiles overlap instead of trailing). `details`, a text file, gets one JSON
    line per compile."""
    order = sorted(range(len(entries)), key=lambda i: -len(json.dumps(entries[i].schema)))
    tasks = [(i, mode) for i in order for mode in MODES]
    payload = [
        Task(mode, entries[i].schema, entries[i].tests if mode == "nonstrict" else ()) for i, mode in tasks
    ]
    results: list[dict[Mode, Outcome]] = [{} for _ in entries]
    for k, outcome in run_tasks(measure, payload, jobs=jobs, timeout=timeout):
        i, mode = tasks[k]
        results[i][mode] = outcome
        if details is not None:
            value = outcome.value if isinstance(outcome, Done) else None
            row = {"source": entries[i].source, "mode": mode, "reason": refusal_reason(outcome)}
            if value is not None:
                row.update(unenforced=value["unenforced"], ms=round(value["seconds"] * 1000, 2))
                row.update({key: value[key] for key in ("message", "instances", "wrong") if value.get(key)})
            details.write(json.dumps(row) + "\n")
    return results


def tally(entries: Iterable[Entry], results: Iterable[dict[Mode, Outcome]]) -> Report:
    report = Report()
    for entry, result in zip(entries, results, strict=True):
        report.add(entry, result)
    return report


def run_coverage(
    *,
    every: int = 1,
    jobs: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
    corpus: Path = CORPUS,
    suite: dict[str, Path] | None = None,
    details: Path | None = None,
) -> dict[str, Any]:
    """The whole benchmark: the JSON object `python -m bench.coverage` prints."""
    started = time.perf_counter()
    real = load_corpus(corpus, every) if corpus.is_file() else []
    dirs = suite_dirs() if suite is None else suite
    tests = load_suite(dirs, every)
    out_file = details.open("w") if details is not None else None
    try:
        results = measure_all(real + tests, jobs=jobs, timeout=timeout, details=out_file)
    finally:
        if out_file is not None:
            out_file.close()
    real_report, suite_report = tally(real, results[: len(real)]), tally(tests, results[len(real) :])
    return {
        "bench": "coverage",
        "settings": {"every": every, "jobs": jobs, "timeout_s": timeout, **compiler_features()},
        "corpus": {
            "file": str(corpus),
            "schemas": len(real),
            "by_source": dict(Counter(e.family for e in real)),
        },
        "real_world": real_report.summary(families=True),
        "suite": {
            "dirs": {d: str(p) for d, p in dirs.items()},
            "groups": len(tests),
            **suite_report.summary(families=False),
            "accepted_wrong_examples": suite_report.overall.wrong[:20],
        },
        "targets": targets(real_report.overall, suite_report.overall),
        "elapsed_s": round(time.perf_counter() - started, 1),
    }


def compiler_features() -> dict[str, bool]:
    """Which parts of the compiler contract the checked-out llamay has."""
    from .measure import _free_options, validator

    return {"layout_and_shape_args": len(_free_options()) == 2, "validate_available": validator() is not None}


def targets(real: Tally, suite: Tally) -> dict[str, Any]:
    """The issue's goals, each with its measured value and whether it is met."""
    share = _share(real.compiled["nonstrict"], real.n) or 0.0
    ll_share = _share(real.compiled["llguidance"], real.n) or 0.0
    bad = sum(
        c for t in (real, suite) for r, c in t.refused["nonstrict"].items() if is_annotation_or_draft(r)
    )
    checks: dict[str, dict[str, Any]] = {
        "real_world_compiled_share": {
            "value": share,
            "goal": f">= {TARGET_SHARE}",
            "met": share >= TARGET_SHARE,
        },
        "above_llguidance_alone": {
            "value": share,
            "goal": f"> {ll_share} (llguidance alone)",
            "met": share > ll_share,
        },
        "accepted_wrong": {"value": suite.instances[ACCEPTED_WRONG], "goal": 0},
        "valid_rejected": {"value": suite.instances[VALID_REJECTED], "goal": 0},
        "refused_annotation_or_draft": {"value": bad, "goal": 0},
    }
    for name in ("accepted_wrong", "valid_rejected", "refused_annotation_or_draft"):
        checks[name]["met"] = checks[name]["value"] == 0
    return {**checks, "all_met": all(c["met"] for c in checks.values())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--every", type=int, default=1, help="measure every N-th schema and suite group")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per compile")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--details", type=Path, help="write one JSON line per schema and mode here")
    args = parser.parse_args(argv)
    # SIGTERM unwinds like an exception, so the pool stops its workers on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print_json(
        run_coverage(
            every=args.every, jobs=args.jobs, timeout=args.timeout, corpus=args.corpus, details=args.details
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
