"""Serving benchmark: llamay against llama-cpp-python's own server, same model and workload.

    .venv/bin/python -m bench.serve [--model PATH_OR_NAME] [--quick]

Runs, one after the other, `llamay serve` (with the default environment, then with
OMP_WAIT_POLICY=passive) and `python -m llama_cpp.server`, each on 127.0.0.1 with a free port,
and drives each through /v1/completions with streaming: prefill speed, single-stream decode
speed, time to first token at concurrency 1, aggregate output speed at several
concurrencies (100-token prompts), and batched decode speed (8 requests with 8-token prompts). Prints one JSON object with the results and the ratios against the targets.

Every request is greedy (temperature 0) with the model's end-of-generation tokens banned
through logit_bias, so each one generates exactly max_tokens. Prompts are random word
sequences, distinct for every request, so neither server gets prefix reuse; both servers get
the same prompts. The baseline server needs extra packages:
    .venv/bin/pip install fastapi sse-starlette pydantic-settings starlette-context
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import math
import os
import random
import signal
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx

from .common import HOST, ServerError, free_port, log_tail, percentile, print_json, running_server

T = TypeVar("T")
BASELINE_EXTRAS = ("fastapi", "sse_starlette", "pydantic_settings", "starlette_context")
BASELINE_PIP = "fastapi sse-starlette pydantic-settings starlette-context"
BAN_BIAS = -100.0
REQUEST_TIMEOUT = httpx.Timeout(connect=10.0, read=120.0, write=30.0, pool=120.0)
REQUEST_DEADLINE_S = 600.0
# Settings the baseline needs to run the same computation as llamay, with the reason for each.
BASELINE_PARITY = [
    *("--interrupt_requests", "False"),  # default True cuts a stream short when another request arrives
    *("--logits_all", "False"),  # default True computes and copies logits for every prompt token
    *("--flash_attn", "False"),  # as llamay's context (flash attention off)
]
TARGETS = {
    "decode_ratio": 0.95,
    "aggregate_c8_ratio": 1.9,
    "llamay_c8_over_decode": 2.0,
    # The same 2x asked of a decode-only workload, and that workload against the baseline.
    "decode_c8_over_decode": 2.0,
    "decode_c8_ratio": 1.9,
}

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy music market sense nation plan college interest death "
    "river garden window winter summer bright quiet small large early late green old new "
    "good great high little long young important public able bad different free full real "
    "sure strong clear open simple hard easy warm cold deep heavy light fast slow happy "
    "walks runs reads writes builds opens finds keeps brings holds turns moves lives falls"
)
WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class Sizes:
    """How much of each measurement to run."""

    prefill_prompt: int = 1000
    prefill_reps: int = 5
    decode_tokens: int = 128
    decode_reps: int = 3
    ttft_prompt: int = 100
    ttft_requests: int = 12
    ttft_max_tokens: int = 4
    agg_levels: tuple[int, ...] = (1, 4, 8, 16)
    agg_prompt: int = 100
    agg_reps: int = 3
    agg_max_tokens: int = 64


FULL = Sizes()
QUICK = Sizes(
    prefill_reps=2,
    decode_tokens=64,
    decode_reps=1,
    ttft_requests=4,
    agg_reps=1,
    agg_max_tokens=16,
)


# ---------------------------------------------------------------------------------------------
# The model's tokenizer (llama.cpp, vocab only): end-of-generation ids and prompt lengths.


class Vocab:
    """A vocab-only llama.cpp model: the same tokenizer both servers use."""

    def __init__(self, path: Path) -> None:
        import llama_cpp

        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # its load log goes to stderr
        self._lib = llama_cpp
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load the vocabulary of {path}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)

    def eog_ids(self) -> list[int]:
        """Every token llama.cpp treats as end of generation (EOS, EOT, <|im_end|>, ...)."""
        n = self._lib.llama_vocab_n_tokens(self._vocab)
        return [t for t in range(n) if self._lib.llama_vocab_is_eog(self._vocab, t)]

    def count(self, text: str) -> int:
        """Prompt tokens for `text`, tokenized as a completion prompt (special tokens added)."""
        raw = text.encode()
        cap = len(raw) + 8
        buf = (self._lib.llama_token * cap)()
        n = self._lib.llama_tokenize(self._vocab, raw, len(raw), buf, cap, True, False)
        if n < 0:
            raise RuntimeError("tokenization overflowed its buffer")
        return int(n)

    def close(self) -> None:
        if self._model:
            self._lib.llama_model_free(self._model)
            self._model = None


class Prompts:
    """Deterministic, distinct prompts of a given token length. `reset()` restarts the sequence,
    so every server gets the same prompts in the same order."""

    def __init__(self, vocab: Vocab, seed: int = 1234) -> None:
        self._vocab = vocab
        self._seed = seed
        self._next = 0

    def reset(self) -> None:
        self._next = 0

    def make(self, n_tokens: int) -> tuple[str, int]:
        """(prompt text, its token count), the count at most n_tokens and close to it."""
        rng = random.Random(self._seed * 1_000_003 + self._next)
        self._next += 1
        words = [rng.choice(WORDS) for _ in range(n_tokens)]
        return self._fit(words, n_tokens)

    def _fit(self, words: list[str], n_tokens: int) -> tuple[str, int]:
        k = len(words)
        for _ in range(64):
            text = _sentences(words[:k])
            count = self._vocab.count(text)
            if count <= n_tokens or k <= 1:
                return text, count
            k -= max(1, (count - n_tokens) // 2)
        raise RuntimeError(f"could not fit a prompt to {n_tokens} tokens")


def _sentences(words: list[str]) -> str:
    """Words as sentences of 12: capitalized, with full stops."""
    parts = []
    for i in range(0, len(words), 12):
        chunk = words[i : i + 12]
        parts.append(" ".join([chunk[0].capitalize(), *chunk[1:]]) + ".")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# One streamed completion.


class RequestFailed(RuntimeError):
    """A request that did not stream a full completion; carries the request and response."""

    def __init__(self, what: str, body: dict[str, Any], status: int | None, response: str) -> None:
        shown = {**body, "prompt": _short(str(body.get("prompt", "")))}
        super().__init__(f"{what}: request {json.dumps(shown)} -> status {status}, response {response!r}")
        self.detail = {"what": what, "request": shown, "status": status, "response": response[:2000]}


def _short(text: str, keep: int = 80) -> str:
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} chars)"


@dataclass
class Stream:
    """Client-side times (time.perf_counter) of one streamed completion."""

    sent: float
    first: float  # first chunk carrying a choice (the first token)
    last: float  # last chunk carrying a choice (the last token / the finish)
    done: float  # end of the response
    chunks: int
    finish_reason: str | None

    @property
    def ttft(self) -> float:
        return self.first - self.sent


def completion_body(prompt: str, max_tokens: int, banned: list[int]) -> dict[str, Any]:
    return {
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "top_p": 1.0,
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "logit_bias": {str(t): BAN_BIAS for t in banned},
        "stream": True,
    }


async def stream_completion(client: httpx.AsyncClient, body: dict[str, Any]) -> Stream:
    """POST /v1/completions with stream=true and time its chunks; RequestFailed unless the
    stream ends with [DONE] after a finish_reason of "length"."""
    try:
        return await asyncio.wait_for(_stream(client, body), REQUEST_DEADLINE_S)
    except TimeoutError:
        raise RequestFailed(
            "timeout", body, None, f"no complete response in {REQUEST_DEADLINE_S:.0f}s"
        ) from None
    except httpx.HTTPError as exc:
        raise RequestFailed("transport", body, None, f"{type(exc).__name__}: {exc}") from exc


async def _stream(client: httpx.AsyncClient, body: dict[str, Any]) -> Stream:
    sent = time.perf_counter()
    first = last = 0.0
    chunks = 0
    finish: str | None = None
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")
            raise RequestFailed("HTTP error", body, resp.status_code, text)
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank separators, SSE comments (pings)
            data = line[5:].strip()
            if data == "[DONE]":
                return _finished(body, Stream(sent, first, last, time.perf_counter(), chunks, finish))
            event = _event(body, data)
            if not event.get("choices"):
                continue  # e.g. a usage-only chunk
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
            finish = event["choices"][0].get("finish_reason") or finish
    raise RequestFailed("stream ended without [DONE]", body, 200, f"{chunks} chunks, finish {finish}")


def _event(body: dict[str, Any], data: str) -> dict[str, Any]:
    try:
        event = json.loads(data)
    except ValueError:
        raise RequestFailed("malformed SSE data", body, 200, data) from None
    if not isinstance(event, dict) or "error" in event:
        raise RequestFailed("error in stream", body, 200, data)
    return event


def _finished(body: dict[str, Any], s: Stream) -> Stream:
    if s.chunks == 0 or s.finish_reason != "length":
        raise RequestFailed(
            "generation did not run to max_tokens",
            body,
            200,
            f"{s.chunks} chunks, finish_reason {s.finish_reason!r}",
        )
    return s


# ---------------------------------------------------------------------------------------------
# The measurements.


@dataclass
class Workload:
    client: httpx.AsyncClient
    sizes: Sizes
    prompts: Prompts
    banned: list[int]

    async def run(self, prompt_tokens: int, max_tokens: int) -> tuple[Stream, int]:
        text, n = self.prompts.make(prompt_tokens)
        return await stream_completion(self.client, completion_body(text, max_tokens, self.banned)), n


async def all_or_first_failure(coros: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Run `coros` concurrently; on the first RequestFailed cancel the rest (closing their
    streams) and raise it."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except ExceptionGroup as eg:
        failures = [e for e in eg.exceptions if isinstance(e, RequestFailed)]
        if failures:
            raise failures[0] from None
        raise
    return [t.result() for t in tasks]


async def warmup(w: Workload) -> None:
    await w.run(32, 8)
    await all_or_first_failure([w.run(32, 8) for _ in range(4)])


async def measure_prefill(w: Workload) -> dict[str, Any]:
    """max_tokens 1: prompt tokens / time to the end of the response."""
    rates, counts = [], []
    for _ in range(w.sizes.prefill_reps):
        s, n = await w.run(w.sizes.prefill_prompt, 1)
        rates.append(n / (s.done - s.sent))
        counts.append(n)
    return {"tok_s": statistics.median(rates), "runs_tok_s": rates, "prompt_tokens": counts}


async def measure_decode(w: Workload) -> dict[str, Any]:
    """One request at a time: (n - 1) / (last token - first token)."""
    n = w.sizes.decode_tokens
    rates = []
    for _ in range(w.sizes.decode_reps):
        s, _ = await w.run(w.sizes.ttft_prompt, n)
        rates.append((n - 1) / (s.last - s.first))
    return {"tok_s": statistics.median(rates), "runs_tok_s": rates, "max_tokens": n}


async def measure_ttft(w: Workload) -> dict[str, Any]:
    ttfts = []
    for _ in range(w.sizes.ttft_requests):
        s, _ = await w.run(w.sizes.ttft_prompt, w.sizes.ttft_max_tokens)
        ttfts.append(s.ttft * 1000.0)
    return {
        "p50_ms": percentile(ttfts, 50),
        "p95_ms": percentile(ttfts, 95),
        "requests": len(ttfts),
        "prompt_tokens": w.sizes.ttft_prompt,
    }


async def measure_aggregate(w: Workload, concurrency: int) -> dict[str, Any]:
    """`concurrency` clients, each running agg_reps requests back to back."""
    m = w.sizes.agg_max_tokens

    async def client() -> list[Stream]:
        return [(await w.run(w.sizes.agg_prompt, m))[0] for _ in range(w.sizes.agg_reps)]

    start = time.perf_counter()
    per_client = await all_or_first_failure([client() for _ in range(concurrency)])
    wall = time.perf_counter() - start
    streams = [s for got in per_client for s in got]
    return {
        "tok_s": len(streams) * m / wall,
        "requests": len(streams),
        "wall_s": wall,
        "ttft_p50_ms": percentile([s.ttft * 1000.0 for s in streams], 50),
    }


async def measure_decode_batch(w: Workload, concurrency: int) -> dict[str, Any]:
    """`concurrency` requests at once, each an 8-token prompt and decode_tokens of output:
    batched decoding with next to no prefill, the figure single-stream decode compares to.
    Repeated as often as single-stream decode; the median counts (one run is ~7 s, and a
    noisy machine moves a single run by 15%)."""
    m = w.sizes.decode_tokens
    rates, walls = [], []
    for _ in range(w.sizes.decode_reps):
        start = time.perf_counter()
        got = await all_or_first_failure([w.run(8, m) for _ in range(concurrency)])
        walls.append(time.perf_counter() - start)
        rates.append(len(got) * m / walls[-1])
    return {
        "tok_s": statistics.median(rates),
        "runs_tok_s": rates,
        "requests": concurrency,
        "wall_s": statistics.median(walls),
        "prompt_tokens": 8,
    }


def _progress(name: str, phase: str) -> None:
    stamp = time.strftime("%H:%M:%S")
    print(f"bench.serve {stamp} {name}: {phase}", file=sys.stderr, flush=True)


def phases(w: Workload) -> list[tuple[str, Callable[[], Awaitable[Any]]]]:
    """The measurements in run order: those the targets use first, so that a run cut short
    still yields them."""
    levels = sorted(w.sizes.agg_levels, key=lambda c: (c != 8, c))
    steps: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("warmup", partial(warmup, w)),
        ("decode", partial(measure_decode, w)),
    ]
    steps += [(f"aggregate_c{c}", partial(measure_aggregate, w, c)) for c in levels[:1]]
    steps += [("decode_c8", partial(measure_decode_batch, w, 8))]
    steps += [("prefill", partial(measure_prefill, w)), ("ttft", partial(measure_ttft, w))]
    steps += [(f"aggregate_c{c}", partial(measure_aggregate, w, c)) for c in levels[1:]]
    return steps


async def run_workload(
    name: str, base_url: str, sizes: Sizes, prompts: Prompts, banned: list[int], out: dict[str, Any]
) -> None:
    """Run every phase against base_url, adding each result to `out` as soon as it is done."""
    prompts.reset()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=limits) as client:
        for phase, step in phases(Workload(client, sizes, prompts, banned)):
            _progress(name, phase)
            result = await step()
            if phase != "warmup":
                out[phase] = result
                _progress(name, f"{phase} = {json.dumps(result)}")


# ---------------------------------------------------------------------------------------------
# Servers.


@dataclass(frozen=True)
class ServerSpec:
    name: str
    argv: list[str]
    ready_path: str
    env: Mapping[str, str | None]


def llamay_spec(name: str, model: Path, port: int, args: argparse.Namespace, omp: str | None) -> ServerSpec:
    argv = [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-addr", f"{HOST}:{port}"]
    argv += ["-concurrency", "16", "-ctx", str(args.ctx), "-threads", str(args.threads)]
    argv += ["-batch", str(args.batch)]
    return ServerSpec(name, argv, "/health", {"OMP_WAIT_POLICY": omp})


def baseline_spec(model: Path, port: int, args: argparse.Namespace) -> ServerSpec:
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--host", HOST]
    argv += ["--port", str(port), "--n_ctx", str(args.ctx), "--n_threads", str(args.threads)]
    argv += ["--n_threads_batch", str(args.threads), "--n_batch", str(args.batch)]
    argv += BASELINE_PARITY
    return ServerSpec("llama_cpp_server", argv, "/v1/models", {"OMP_WAIT_POLICY": None})


def bench_server(
    spec: ServerSpec, port: int, sizes: Sizes, prompts: Prompts, banned: list[int], result: dict[str, Any]
) -> None:
    """Start the server, run the workload into `result`, stop it; a failure becomes an "error"
    entry beside the phases already done."""
    _progress(spec.name, "starting " + " ".join(spec.argv[1:]))
    result.update({"command": spec.argv[1:], "env": dict(spec.env)})
    try:
        with running_server(spec.name, spec.argv, port, spec.ready_path, env=spec.env) as server:
            result["log"] = str(server.log_path)
            try:
                asyncio.run(run_workload(spec.name, server.base_url, sizes, prompts, banned, result))
            except RequestFailed as exc:
                result["error"] = {**exc.detail, "server_log_tail": log_tail(server.log_path, 40)}
                if server.proc.poll() is not None:
                    result["error"]["server_exit_code"] = server.proc.returncode
    except ServerError as exc:
        result["error"] = {"what": "server did not start", "detail": str(exc)}
    if "error" in result:
        _progress(spec.name, f"FAILED: {json.dumps(result['error'])[:2000]}")


# ---------------------------------------------------------------------------------------------
# Comparison.


def _get(result: Mapping[str, Any], *keys: str | int) -> float:
    cur: Any = result
    for key in keys:
        if not isinstance(cur, Mapping) or key not in cur:
            return math.nan
        cur = cur[key]
    return float(cur)


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(a) and not math.isnan(b) else math.nan


def targets(llamay: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    decode = _get(llamay, "decode", "tok_s")
    agg8 = _get(llamay, "aggregate_c8", "tok_s")
    values = {
        "decode_ratio": _ratio(decode, _get(base, "decode", "tok_s")),
        "aggregate_c8_ratio": _ratio(agg8, _get(base, "aggregate_c8", "tok_s")),
        "llamay_c8_over_decode": _ratio(agg8, decode),
        "decode_c8_over_decode": _ratio(_get(llamay, "decode_c8", "tok_s"), decode),
        "decode_c8_ratio": _ratio(_get(llamay, "decode_c8", "tok_s"), _get(base, "decode_c8", "tok_s")),
    }
    return {
        k: {"value": v, "target": TARGETS[k], "met": (v >= TARGETS[k]) if not math.isnan(v) else None}
        for k, v in values.items()
    }


def omp_comparison(default: Mapping[str, Any], passive: Mapping[str, Any], levels: tuple[int, ...]) -> dict:
    """passive/default speed per metric (> 1: passive is faster), and their geometric mean."""
    metrics: dict[str, tuple[str, ...]] = {
        "prefill": ("prefill", "tok_s"),
        "decode": ("decode", "tok_s"),
        **{f"aggregate_c{c}": (f"aggregate_c{c}", "tok_s") for c in levels},
    }
    speedups = {m: _ratio(_get(passive, *keys), _get(default, *keys)) for m, keys in metrics.items()}
    speedups["ttft_p50"] = _ratio(_get(default, "ttft", "p50_ms"), _get(passive, "ttft", "p50_ms"))
    finite = [v for v in speedups.values() if not math.isnan(v) and v > 0]
    geomean = math.exp(statistics.fmean(math.log(v) for v in finite)) if finite else math.nan
    faster = None if math.isnan(geomean) else ("passive" if geomean > 1 else "default")
    return {"passive_over_default": speedups, "geomean": geomean, "faster": faster}


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model name or .gguf path (default: llamay's default)")
    p.add_argument("--quick", action="store_true", help="a small smoke run (under 2 minutes)")
    p.add_argument("--threads", type=int, default=2, help="CPU threads for both servers (default 2)")
    p.add_argument("--ctx", type=int, default=8192, help="context size for both servers (default 8192)")
    p.add_argument("--batch", type=int, default=512, help="batch size for both servers (default 512)")
    return p.parse_args(argv)


def machine_info(load_start: tuple[float, float, float]) -> dict[str, Any]:
    """CPU count and load averages (the end one includes the last server's own threads); a
    warning when other processes were already busy before the benchmark started."""
    cpus = os.cpu_count() or 1
    load_end = os.getloadavg()
    info: dict[str, Any] = {"cpus": cpus, "loadavg_start": load_start, "loadavg_end": load_end}
    if load_start[0] > 0.5 * cpus:
        info["warning"] = (
            "other processes were using the CPUs (see loadavg): the numbers and ratios are distorted "
            "by contention and are not representative; rerun on an idle machine"
        )
    return info


def missing_baseline_extras() -> list[str]:
    return [m for m in ("llama_cpp", *BASELINE_EXTRAS) if importlib.util.find_spec(m) is None]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # stop the servers and report, as on Ctrl-C
    missing = missing_baseline_extras()
    if "llama_cpp" in missing:
        print("bench.serve: llama-cpp-python is not installed (run ./setup.sh)", file=sys.stderr)
        return 2
    from llamay.store import ModelStore

    model = ModelStore().resolve(args.model).path
    sizes = QUICK if args.quick else FULL
    vocab = Vocab(model)
    try:
        banned = vocab.eog_ids()
        report = run_all(args, model, sizes, Prompts(vocab), banned, missing)
    finally:
        vocab.close()
    print_json(report)
    failed = report["interrupted"] or any("error" in s for s in report["servers"].values())
    return 1 if failed else 0


def raw_ceiling(model: Path, threads: int, tokens: int) -> dict[str, Any]:
    """bench.ceiling in its own process (OpenMP settings are read when llama.cpp loads)."""
    import subprocess

    cmd = [sys.executable, "-m", "bench.ceiling", str(model), "--threads", str(threads), "--tokens", str(tokens)]
    _progress("raw llama.cpp", "decode at 1 and 8 sequences")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": done.stderr[-2000:]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def run_all(
    args: argparse.Namespace,
    model: Path,
    sizes: Sizes,
    prompts: Prompts,
    banned: list[int],
    missing: list[str],
) -> dict[str, Any]:
    load_start = os.getloadavg()
    servers: dict[str, Any] = {}
    try:
        for name, omp in (("llamay", None), ("llamay_omp_passive", "passive")):
            port = free_port()
            spec = llamay_spec(name, model, port, args, omp)
            bench_server(spec, port, sizes, prompts, banned, servers.setdefault(name, {}))
        if missing:
            msg = f"missing {', '.join(missing)}: .venv/bin/pip install {BASELINE_PIP}"
            print(f"bench.serve: baseline skipped, {msg}", file=sys.stderr)
            servers["llama_cpp_server"] = {"error": {"what": "baseline not installed", "detail": msg}}
        else:
            port = free_port()
            spec = baseline_spec(model, port, args)
            bench_server(spec, port, sizes, prompts, banned, servers.setdefault(spec.name, {}))
        interrupted = False
    except KeyboardInterrupt:
        interrupted = True
        print("bench.serve: interrupted; reporting what was measured", file=sys.stderr)
    for name in ("llamay", "llamay_omp_passive", "llama_cpp_server"):
        servers.setdefault(name, {})
    base = servers["llama_cpp_server"]
    ceiling = {} if interrupted else raw_ceiling(model, args.threads, sizes.decode_tokens)
    return {
        "benchmark": "serve",
        "quick": args.quick,
        "interrupted": interrupted,
        "model": str(model),
        "machine": machine_info(load_start),
        "settings": {"ctx": args.ctx, "threads": args.threads, "batch": args.batch, "sizes": asdict(sizes)},
        "banned_eog_tokens": banned,
        "servers": servers,
        "targets": {name: targets(servers[name], base) for name in ("llamay", "llamay_omp_passive")},
        "raw_llama_cpp_ceiling": ceiling,
        "omp_wait_policy": omp_comparison(servers["llamay"], servers["llamay_omp_passive"], sizes.agg_levels),
    }


if __name__ == "__main__":
    sys.exit(main())
