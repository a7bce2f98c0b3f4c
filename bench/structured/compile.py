"""bench.structured, parts 2 and 3, in process: mask time per step, and compile time over the
JSON Schema Test Suite's schemas (see bench.structured)."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import FACT_SCHEMA, Issues, ms_stats

CONFORMANCE_DIR = Path("/work/shared/conformance/json-schema-test-suite-2020-12")


def mask_step_times(grammar: Any, cache: Any, tokens: list[int], passes: int) -> list[list[float]]:
    """fill_mask timings (seconds) before each of `tokens`, one list per pass, compiling
    through `cache` (a model's CompileCache); a pass ends early where the constraint
    rejects a token."""
    from llamay.grammar import Constraint, allocate_mask

    mask = allocate_mask(cache.tokenizer)
    out: list[list[float]] = []
    for _ in range(passes):
        constraint = Constraint(grammar, cache)
        times: list[float] = []
        for token in tokens:
            t0 = time.perf_counter()
            constraint.fill_mask(mask)
            times.append(time.perf_counter() - t0)
            if not constraint.consume(token):
                break
        out.append(times)
    return out


def run_mask(model: Any, text: str, passes: int, issues: Issues) -> dict[str, Any]:
    """The first pass is cold (llguidance builds lexer states lazily; later matchers from
    the same compiled grammar share them); `best_of_passes` takes each step's fastest pass,
    which drops the scheduler's preemptions on a busy machine."""
    from llamay.grammar import Grammar

    grammar = Grammar.from_json_schema(FACT_SCHEMA)
    tokens = model.tokenize(text, add_special=False, parse_special=False)
    if not tokens:
        return {"skipped": "no constrained output to replay (see issues)"}
    runs = mask_step_times(grammar, model.compile_cache, tokens, passes)
    accepted = min(len(r) for r in runs)
    if accepted < len(tokens):
        issues.add("mask", f"the constraint rejected token {accepted - 1} of {len(tokens)} of {text!r}")
    warm = [t for r in runs[1:] for t in r]
    best = [min(r[i] for r in runs) for i in range(accepted)]
    return {
        "text_tokens": len(tokens),
        "passes": passes,
        "all": ms_stats([t for r in runs for t in r]),
        "cold_pass": ms_stats(runs[0]),
        "warm_passes": ms_stats(warm),
        "best_of_passes": ms_stats(best),
    }


@dataclass
class CompileTally:
    build_s: list[float] = field(default_factory=list)  # Grammar.from_json_schema
    compile_s: list[float] = field(default_factory=list)  # CompileCache.get, wall
    total_s: list[float] = field(default_factory=list)
    groups: int = 0
    duplicates: int = 0
    refused_schema: int = 0
    refused_compile: int = 0
    refused_keywords: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    slowest: list[tuple[float, str]] = field(default_factory=list)


def conformance_groups(step: int) -> list[tuple[str, Any]]:
    files = sorted(CONFORMANCE_DIR.glob("*.json"))[::step]
    out: list[tuple[str, Any]] = []
    for path in files:
        for i, group in enumerate(json.loads(path.read_text())):
            out.append((f"{path.stem}[{i}]", group["schema"]))
    return out


def compile_one(label: str, schema: Any, tokenizer: Any, seen: set[str], tally: CompileTally) -> None:
    from llamay.errors import GrammarError
    from llamay.grammar import CompileCache, Grammar

    tally.groups += 1
    t0 = time.perf_counter()
    try:
        grammar = Grammar.from_json_schema(schema)
    except GrammarError as exc:
        tally.refused_schema += 1
        tally.refused_keywords[getattr(exc, "keyword", None) or "(not a SchemaError)"] += 1
        return
    t1 = time.perf_counter()
    if grammar.spec_hash in seen:  # a cache hit would not compile: skip
        tally.duplicates += 1
        return
    seen.add(grammar.spec_hash)
    try:
        CompileCache(tokenizer).get(grammar)  # a fresh cache: always a real compile
    except GrammarError:
        tally.refused_compile += 1
        return
    t2 = time.perf_counter()
    tally.build_s.append(t1 - t0)
    tally.compile_s.append(t2 - t1)
    tally.total_s.append(t2 - t0)
    tally.slowest.append((t2 - t0, label))


def run_compile(tokenizer: Any, step: int, issues: Issues) -> dict[str, Any]:
    tally = CompileTally()
    seen: set[str] = set()
    for label, schema in conformance_groups(step):
        try:
            compile_one(label, schema, tokenizer, seen, tally)
        except Exception as exc:  # not a GrammarError: a bug
            tally.errors.append(f"{label}: {type(exc).__name__}: {exc}")
            issues.add("compile", f"{label}: {type(exc).__name__}: {exc}", schema=schema)
    slowest = sorted(tally.slowest, reverse=True)[:3]
    return {
        "groups": tally.groups,
        "compiled": len(tally.total_s),
        "duplicates_skipped": tally.duplicates,
        "refused_schema": tally.refused_schema,
        "refused_compile": tally.refused_compile,
        "refused_by_keyword": dict(tally.refused_keywords.most_common(12)),
        "errors": len(tally.errors),
        "from_json_schema": ms_stats(tally.build_s),
        "compile_cached": ms_stats(tally.compile_s),
        "total": ms_stats(tally.total_s),
        "slowest": [{"schema": label, "ms": round(s * 1000.0, 2)} for s, label in slowest],
    }
