"""Structured-output benchmark: what JSON schemas and tools cost, on two vocabulary sizes.

    .venv/bin/python -m bench.structured [--quick] [--coverage-only]

Measures, in one run, on the default model (SmolLM2 135M, 49k vocab) and on Gemma 3 270M
(262k vocab), and prints one JSON object:

1. decode: single-stream decode speed through `llamay serve` (SSE, httpx) with a JSON schema
   (`response_format`) against the same prompt unconstrained (end-of-generation banned with
   logit_bias), greedy, fixed max_tokens. The schema asks for at least 3 objects (about 90
   tokens at the shortest, so max_tokens 128 is not refused); as max_tokens runs low the
   server closes the answer with the schema's shortest ending (`closed_early`), so a
   constrained answer runs to max_tokens unless the model closes the list itself after the
   third object (listed under "issues"). While the tokens left are within about twice the
   shortest ending, the server checks after every token that an ending still fits (mostly
   the last one found, checked again; now and then a search), which this arm pays for.
   A generation's speed is (completion_tokens - 1) / (time from the first content chunk to
   the finish chunk): the first token's time belongs to prefill.
   A third arm turns the n-gram repetition penalty off (`repetition: false`) to show its
   share. Every repetition runs each arm once, forwards then backwards in turn, so the
   constrained arm always runs right next to the unconstrained one; `ratio` is the median
   over repetitions of their speed ratio, so a busy stretch of the shared machine slows
   both sides of a pair and a disturbed pair is outvoted. `ratio_trimmed` does the same
   with the mean gap between tokens without the slowest and fastest 10%.
   1b. engine_decode: the same arms and statistics in this process, through the engine
   `llamay serve` runs but without HTTP, timed by the engine itself (its finish event's
   generate_ms), with the mask's share of that time. The unconstrained arm is kept going
   by the engine's ignore_eos instead of the ban, whose logit_bias costs the sampler a
   copy of the logits per token. Each token is stamped as the engine publishes it, and
   as greedy generations repeat their tokens, `ratio_token_floor` compares the arms'
   per-token times with every token position at its least disturbed repetition (among
   the repetitions that made the arm's most common output; one that made other tokens is
   listed under "issues"); this part's `meets_target` is judged on it. `--decode-only`
   runs parts 1 and 1b.
   The mask's share of decode also comes from `llamay run -schema` (its `json mask: ...`
   stats line; the engine's mask time covers fill_mask plus the masked sampling, its decode
   time includes the prompt's decode).
2. mask: Constraint.fill_mask per step, in this process, over the JSON text the model
   generated in (1), consumed token by token with the model's llguidance tokenizer.
3. compile: Grammar.from_json_schema and CompileCache.get for every schema of the JSON
   Schema Test Suite (2020-12) conformance files, per vocabulary; distinct specs only, so
   every timed compile really compiles. Refused schemas are counted apart.
4. tools: the round trip a tool-using client makes on the default model with the official
   openai client (tool_choice "required" -> tool_calls -> follow-up with the tool result ->
   answer), against the same pair of requests without tools.
5. coverage: bench.coverage (no model): the share of real-world schemas and of the JSON
   Schema Test Suite the compiler takes, exactly or with validation, against llguidance
   alone, and the suite instances it gets wrong. `--coverage-only` runs just this part.

Models come from the store by catalog name (smollm2:135m, gemma3:270m); if that fails, from
/tmp/dl/smollm2.gguf and Gemma's PyPI part wheels. `--quick` shrinks every part (a few
minutes; coverage takes every 8th schema). Anything llamay gets wrong along the way
(an HTTP error, a rejected token, a missing tool call) is listed under "issues" with the
request and the server log tail; the benchmark does not work around it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from llamay.testing.server import HOST, ServerError, free_port, start_server, stop_server

from ..common import print_json
from ..coverage.main import run_coverage
from .common import FULL, QUICK, Issues, Sizes, say
from .compile import run_compile, run_mask
from .decode import ARMS, run_decode, run_mask_share
from .engine import run_engine_decode
from .models import MODELS, ModelSpec, resolve_path
from .tools import run_tools

SERVER_START_TIMEOUT = 600.0


def serve_argv(model: Path, port: int, flags: list[str]) -> list[str]:
    return [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-addr", f"{HOST}:{port}", *flags]


def served_parts(
    spec: ModelSpec,
    path: Path,
    sizes: Sizes,
    eog_ids: frozenset[int],
    issues: Issues,
    result: dict[str, Any],
    *,
    tools: bool,
) -> str:
    """Decode speeds (and tool round trips) through one server; returns a constrained
    output for the mask timing ("" if the server failed)."""
    phases = result["phase_s"]
    port = free_port()
    try:
        with phase(phases, "server_start", f"{spec.key}: starting llamay serve -m {path}"):
            server = start_server(
                f"structured-{spec.key}",
                serve_argv(path, port, spec.serve_flags()),
                port,
                "/health",
                timeout=SERVER_START_TIMEOUT,
            )
    except ServerError as exc:
        issues.add("serve", str(exc))
        return ""
    try:
        with phase(phases, "decode", f"{spec.key}: decode, {sizes.decode_reps} reps x {len(ARMS)} arms"):
            result["decode"], text = run_decode(server, sizes, eog_ids, issues)
        if tools:
            with phase(phases, "tools", f"{spec.key}: tool round trips, {sizes.tool_runs} runs per pair"):
                result["tools"] = run_tools(server, sizes, issues)
    finally:
        stop_server(server)
    return text


@contextlib.contextmanager
def phase(phases: dict[str, float], name: str, note: str) -> Iterator[None]:
    """Announce a phase on stderr and record its wall time in `phases`."""
    say(note)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        phases[name] = round(time.perf_counter() - t0, 1)


def bench_model(
    spec: ModelSpec, sizes: Sizes, issues: Issues, *, tools: bool, decode_only: bool = False
) -> dict[str, Any]:
    from llamay.backend.model import Model

    path, source = resolve_path(spec, issues)
    phases: dict[str, float] = {}
    result: dict[str, Any] = {"path": str(path), "resolved_by": source, "phase_s": phases}
    with phase(phases, "model_load", f"{spec.key}: loading {path} in process"):
        model = Model(path)
        tokenizer = model.ll_tokenizer
    with model:
        result["vocab"] = int(tokenizer.vocab_size)
        text = served_parts(spec, path, sizes, model.eog_ids, issues, result, tools=tools and not decode_only)
        reps = f"{sizes.decode_reps} reps x {len(ARMS)} arms"
        with phase(phases, "engine_decode", f"{spec.key}: decode timed by the engine, {reps}"):
            result["engine_decode"] = run_engine_decode(path, sizes, issues)
        if decode_only:
            return result
        with phase(phases, "llamay_run", f"{spec.key}: mask share via llamay run, {sizes.run_reps} runs"):
            result["mask_share_from_run"] = run_mask_share(path, sizes, issues)
        with phase(phases, "mask", f"{spec.key}: mask time per step"):
            result["mask"] = run_mask(model, text, sizes.mask_passes, issues)
        with phase(phases, "compile", f"{spec.key}: schema compile"):
            result["compile"] = run_compile(tokenizer, sizes.compile_file_step, issues)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a smaller run (a few minutes)")
    parser.add_argument("--coverage-only", action="store_true", help="only part 5 (needs no model)")
    parser.add_argument("--no-coverage", action="store_true", help="parts 1-4 only (the models' figures)")
    parser.add_argument("--decode-only", action="store_true", help="only the decode ratios (parts 1 and 1b)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    issues = Issues()
    started = time.perf_counter()
    models: dict[str, Any] = {}
    if not args.coverage_only:
        for spec in MODELS:
            models[spec.key] = bench_model(
                spec, sizes, issues, tools=spec is MODELS[0], decode_only=args.decode_only
            )
    phases: dict[str, float] = {}
    coverage: dict[str, Any] = {}
    if not (args.no_coverage or args.decode_only):
        with phase(phases, "coverage", f"schema coverage, 1 in {sizes.coverage_every} schemas"):
            coverage = run_coverage(every=sizes.coverage_every)
        coverage["phase_s"] = phases["coverage"]
    print_json(report(models, coverage, sizes, args.quick, issues, time.perf_counter() - started))
    return 0


def dig(obj: Any, *keys: str) -> Any:
    """obj[k1][k2]..., or None where a part is missing (a phase that failed)."""
    for key in keys:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def model_summary(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "vocab": m.get("vocab"),
        "decode_tok_s": dig(m, "decode", "tok_s"),
        "decode_ratio": dig(m, "decode", "ratio"),
        "decode_ratio_quartiles": dig(m, "decode", "ratio_quartiles"),
        "decode_ratio_trimmed": dig(m, "decode", "ratio_trimmed"),
        "decode_ratio_no_ngram": dig(m, "decode", "ratio_no_ngram"),
        "meets_target": dig(m, "decode", "meets_target"),
        "decode_load_avg_1min": dig(m, "decode", "load_avg_1min"),
        "engine_ratio_token_floor": dig(m, "engine_decode", "ratio_token_floor"),
        "engine_ratio_token_floor_no_ngram": dig(m, "engine_decode", "ratio_token_floor_no_ngram"),
        "engine_ratio": dig(m, "engine_decode", "ratio"),
        "engine_ratio_quartiles": dig(m, "engine_decode", "ratio_quartiles"),
        "engine_ratio_trimmed": dig(m, "engine_decode", "ratio_trimmed"),
        "engine_ratio_no_ngram": dig(m, "engine_decode", "ratio_no_ngram"),
        "engine_meets_target": dig(m, "engine_decode", "meets_target"),
        "engine_mask_share_pct": dig(m, "engine_decode", "mask_share_pct"),
        "engine_load_avg_1min": dig(m, "engine_decode", "load_avg_1min"),
        "mask_share_pct": dig(m, "mask_share_from_run", "mask_share_pct"),
        "mask_p50_ms": dig(m, "mask", "all", "p50_ms"),
        "mask_p99_ms": dig(m, "mask", "all", "p99_ms"),
        "mask_best_of_passes_p99_ms": dig(m, "mask", "best_of_passes", "p99_ms"),
        "compile_p50_ms": dig(m, "compile", "total", "p50_ms"),
        "compile_p99_ms": dig(m, "compile", "total", "p99_ms"),
        "compile_refused": dig(m, "compile", "refused_schema"),
    }


def report(
    models: dict[str, Any],
    coverage: dict[str, Any],
    sizes: Sizes,
    quick: bool,
    issues: Issues,
    elapsed: float,
) -> dict[str, Any]:
    summary = {key: model_summary(m) for key, m in models.items()}
    tools: dict[str, Any] = next((m["tools"] for m in models.values() if "tools" in m), {})
    return {
        "bench": "structured",
        "quick": quick,
        "sizes": asdict(sizes),
        "summary": summary,
        "tools_round_trip_p50_ms": {
            "with_tools": dig(tools, "with_tools", "round_trip_p50_ms"),
            "without_tools": dig(tools, "without_tools", "round_trip_p50_ms"),
            "ratio": tools.get("round_trip_ratio_with_over_without"),
        },
        "coverage_targets": coverage.get("targets"),
        "models": models,
        "coverage": coverage,
        "issues": issues.items,
        "elapsed_s": round(elapsed, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
