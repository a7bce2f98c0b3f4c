"""Library benchmark: what `llamay.LLM` costs over its engine, each measurement against a
baseline taken in the same run, on the same loaded model.

    .venv/bin/python -m bench.library [--model NAME_OR_PATH] [--reps N] [--max-tokens N] [--quick]

1. chat_many: 8 chat prompts through `LLM.chat_many` against the same 8 requests (the same
   tokens, rendered by the same template, the same sampling and limit) submitted straight
   to the LLM's own engine at once, with nothing but a sink per request. Rate = generated
   tokens per second of wall time. Target: library / raw >= 0.95.
2. score: 4 continuations after one prompt in one `LLM.score` call (the prompt computed
   once, its KV shared by the continuations, scored in one batch), against 4 calls of one
   continuation each, one after the other, and against the 4 prompt + continuation texts
   read whole in one batch (what /v1/completions echo does): wall times and speed-ups, each
   call on a prompt never computed before; and that the log-probabilities are the same.

Runs alternate between the two sides of each comparison (after a warm-up of each), so both
see the same prefix cache and machine load; medians are reported (for chat_many, the median
of back-to-back pairs' ratios). Greedy sampling. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import queue
import statistics
import sys
import time
from typing import Any

import llamay
from llamay.chat.flow import ChatOptions
from llamay.chat.pipeline import Prompt, RunSpec, chat_prompt, start_batch
from llamay.engine.request import GenerateRequest
from llamay.library.options import options
from llamay.types import FinishEvent, SamplingParams, StopSpec

from .common import print_json

TARGET_CHAT_MANY = 0.95
TOPICS = ("tides", "volcanoes", "bread", "compilers", "bees", "glaciers", "chess", "radio")
CONTINUATIONS = [" yes", " no", " maybe", " it is not spam"]


def progress(message: str) -> None:
    print(f"bench.library {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def chat_prompts() -> list[str]:
    return [f"In two sentences, explain {t} to a ten-year-old." for t in TOPICS]


def raw_run(llm: llamay.LLM, prompts: list[str], max_tokens: int) -> tuple[float, int]:
    """The 8 requests straight to the engine: (seconds, generated tokens)."""
    backend: Any = llm._backend  # the in-process backend: its model, engine and sampling
    lm = backend.lm
    spec = backend._spec(options(temperature=0.0, max_tokens=max_tokens))
    requests = [
        GenerateRequest(
            chat_prompt(lm, ChatOptions([{"role": "user", "content": p}])).tokens,
            spec.sampling,
            StopSpec(max_tokens=max_tokens),
        )
        for p in prompts
    ]
    done: queue.SimpleQueue[FinishEvent] = queue.SimpleQueue()

    def sink(ev: Any) -> None:
        if isinstance(ev, FinishEvent):
            done.put(ev)

    t0 = time.perf_counter()
    for r in requests:
        lm.engine.submit(r, sink)
    finished = [done.get() for _ in requests]
    return time.perf_counter() - t0, sum(f.usage.completion_tokens for f in finished)


def library_run(llm: llamay.LLM, prompts: list[str], max_tokens: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    results = llm.chat_many(prompts, max_tokens=max_tokens, temperature=0.0)
    return time.perf_counter() - t0, sum(r.usage.completion_tokens for r in results)


def bench_chat_many(llm: llamay.LLM, reps: int, max_tokens: int) -> dict[str, Any]:
    """Back-to-back pairs (raw then library, then the other way round, alternately), so
    both sides of a pair see the same machine load; the ratio is the median of the
    pairs' ratios."""
    prompts = chat_prompts()
    raw_run(llm, prompts, max_tokens)  # warm-up: caches, allocations
    library_run(llm, prompts, max_tokens)
    raw: list[float] = []
    lib: list[float] = []
    tokens: set[int] = set()
    for i in range(reps):
        progress(f"chat_many pair {i + 1}/{reps}")
        sides = [(raw_run, raw), (library_run, lib)]
        for fn, into in sides if i % 2 == 0 else sides[::-1]:
            seconds, n = fn(llm, prompts, max_tokens)
            into.append(n / seconds)
            tokens.add(n)
    ratio = statistics.median(b / a for a, b in zip(raw, lib, strict=True))
    return {
        "prompts": len(prompts),
        "max_tokens": max_tokens,
        "generated_tokens_per_run": sorted(tokens),
        "raw_engine_tok_s": round(statistics.median(raw), 2),
        "library_tok_s": round(statistics.median(lib), 2),
        "library_over_raw": round(ratio, 4),
        "target_min": TARGET_CHAT_MANY,
        "meets_target": ratio >= TARGET_CHAT_MANY,
        "raw_runs_tok_s": [round(x, 2) for x in raw],
        "library_runs_tok_s": [round(x, 2) for x in lib],
    }


def score_prompt(tag: str, words: int) -> str:
    """A prompt of about `words` words that starts with `tag`: a new tag is a prompt nobody
    computed before (no prefix of it is cached)."""
    text = " ".join(f"message {i}: WIN A FREE PHONE NOW, click the link" for i in range(words // 10))
    return f"Case {tag}. Here are some messages.\n{text}\nIs the last message spam? Answer:"


def unshared_score(llm: llamay.LLM, prompt: str) -> None:
    """The continuations scored the way a server's /v1/completions echo does it: each
    prompt + continuation read whole, all in one batch, nothing shared."""
    backend: Any = llm._backend
    lm = backend.lm
    head = lm.model.tokenize(prompt, add_special=True, parse_special=False)
    prompts = [
        Prompt(head + lm.model.tokenize(c, add_special=False, parse_special=False)) for c in CONTINUATIONS
    ]
    spec = RunSpec(SamplingParams(temperature=0.0), max_tokens=0, prompt_logprobs=1, cache_prompt=False)

    async def run() -> None:
        await (await start_batch(lm, prompts, spec)).collect()

    llm._loop.run(run())


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


def bench_score(llm: llamay.LLM, reps: int, words: int) -> dict[str, Any]:
    """Every measured call gets a prompt of its own, never computed before (so each side
    pays for its prompt as a first request would): `together` one call with the 4
    continuations; `separately` 4 calls of one continuation each (the first computes the
    prompt, the prefix cache gives it to the other 3); `unshared` the 4 read whole."""
    llm.score(score_prompt("warm-up", words), CONTINUATIONS)
    together_t: list[float] = []
    separate_t: list[float] = []
    unshared_t: list[float] = []
    same = True
    for i in range(reps):
        progress(f"score rep {i + 1}/{reps}")
        together_t.append(timed(lambda i=i: llm.score(score_prompt(f"{i}-t", words), CONTINUATIONS))[0])
        t, separate = timed(
            lambda i=i: [llm.score(score_prompt(f"{i}-s", words), [c])[0] for c in CONTINUATIONS]
        )
        separate_t.append(t)
        unshared_t.append(timed(lambda i=i: unshared_score(llm, score_prompt(f"{i}-u", words)))[0])
        # The same prompt scored both ways (the second time from the cache) must agree.
        again = llm.score(score_prompt(f"{i}-s", words), CONTINUATIONS)
        same = same and all(
            max(abs(a - b) for a, b in zip(x.logprobs, y.logprobs, strict=True)) < 1e-6
            for x, y in zip(again, separate, strict=True)
        )
    model: Any = llm._backend.lm.model  # type: ignore[attr-defined]
    n_prompt = len(model.tokenize(score_prompt("0-t", words), add_special=True, parse_special=False))
    t, s, u = (statistics.median(x) for x in (together_t, separate_t, unshared_t))
    return {
        "continuations": len(CONTINUATIONS),
        "prompt_tokens": n_prompt,
        "together_ms": round(t * 1000, 1),
        "separately_ms": round(s * 1000, 1),
        "unshared_ms": round(u * 1000, 1),
        "speedup_over_separately": round(s / t, 3),
        "speedup_over_unshared": round(u / t, 3),
        "same_logprobs_together_and_separately": same,
        "together_runs_ms": [round(x * 1000, 1) for x in together_t],
        "separately_runs_ms": [round(x * 1000, 1) for x in separate_t],
        "unshared_runs_ms": [round(x * 1000, 1) for x in unshared_t],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.library", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, help="model name or .gguf path (default: the default model)")
    p.add_argument("--reps", type=int, default=7, help="measured runs of each side (default 7)")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per chat_many answer (default 64)")
    p.add_argument("--score-words", type=int, default=300, help="about this many words of prompt to score")
    p.add_argument("--quick", action="store_true", help="2 reps, 24 tokens, a short prompt")
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.max_tokens, args.score_words = 2, 24, 60
    progress("loading the model")
    with llamay.LLM(args.model) as llm:
        out = {
            "model": llm.model,
            "reps": args.reps,
            "chat_many": bench_chat_many(llm, args.reps, args.max_tokens),
            "score": bench_score(llm, args.reps, args.score_words),
        }
    print_json(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
