"""bench.structured, part 1: decode speed through `llamay serve`, and the mask's share of decode
from `llamay run` (see bench.structured for what is measured and how)."""

from __future__ import annotations

import contextlib
import json
import math
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import Server

from ..common import DONE, BadEvent, sse_data, sse_event
from .common import (
    ARMS,
    FACT_SCHEMA,
    PROMPT,
    Issues,
    RequestFailed,
    Sizes,
    TokenTiming,
    arm_order,
    finite_median,
    load_average,
    summarize_timings,
)

__all__ = ["ARMS", "BAN_BIAS", "WARMUP_TOKENS", "run_decode", "run_mask_share"]

BAN_BIAS = -100.0
HTTP_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=30.0)
# Above the schema's shortest answer (about 90 tokens): a limit below it is a 400.
WARMUP_TOKENS = 128
MASK_LINE = re.compile(r"(\w+) mask: (\d+) steps, ([\d.]+) ms each, ([\d.]+)% of decode")
# The drafts part is there only when speculation drafted any.
GEN_LINE = re.compile(
    r"generated (\d+) in ([\d.]+)(ms|s) \(([\d.]+|inf) tok/s\) · (?:\d+ of \d+ drafted taken · )?stop: (\w+)"
)


@dataclass
class StreamResult:
    arm: str
    completion_tokens: int
    seconds: float  # first content chunk -> finish chunk
    finish: str
    text: str
    gaps: list[float]  # between consecutive content chunks
    closed_early: bool = False  # finished with the schema's shortest ending as max_tokens ran low

    def timing(self) -> TokenTiming:
        return TokenTiming(self.arm, self.completion_tokens, self.seconds, self.gaps)


def stream_chat(client: httpx.Client, arm: str, body: dict[str, Any]) -> StreamResult:
    """One streamed chat completion, timed chunk by chunk."""
    t_first: float | None = None
    t_end: float | None = None
    text: list[str] = []
    arrivals: list[float] = []
    finish = ""
    closed_early = False
    usage: dict[str, Any] = {}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RequestFailed(f"HTTP {r.status_code}: {r.read().decode(errors='replace')}")
        for line in r.iter_lines():
            data = sse_data(line)
            if data is None or data == DONE:
                continue
            now = time.perf_counter()
            try:
                chunk = sse_event(data)
            except BadEvent as bad:
                raise RequestFailed(f"stream {bad}") from None
            for choice in chunk.get("choices") or []:
                if choice["delta"].get("content"):
                    text.append(choice["delta"]["content"])
                    arrivals.append(now)
                    t_first = t_first if t_first is not None else now
                if choice.get("finish_reason"):
                    finish, t_end = choice["finish_reason"], now
                    closed_early = bool(choice.get("closed_early"))
            usage = chunk.get("usage") or usage
    seconds = (t_end - t_first) if t_first is not None and t_end is not None else math.nan
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    tokens = int(usage.get("completion_tokens", 0))
    return StreamResult(arm, tokens, seconds, finish, "".join(text), gaps, closed_early)


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
    # A constrained answer runs to max_tokens: cut ("length"), or closed with the schema's
    # shortest ending as the room ran out ("stop", closed_early); a plain "stop" ended early.
    if res.finish not in ("length", "stop") or (
        constrained and res.finish == "stop" and not res.closed_early
    ):
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
    reps: list[dict[str, TokenTiming]] = []
    text = ""
    load_before = load_average()
    with httpx.Client(base_url=server.base_url, timeout=HTTP_TIMEOUT) as client:
        for arm in ARMS:  # warm-up: compiles the schema, fills caches
            warm = {**bodies[arm], "max_tokens": WARMUP_TOKENS}
            with _reported(issues, f"decode.warmup.{arm}", server, warm):
                stream_chat(client, arm, warm)
        for rep in range(sizes.decode_reps):
            timed: dict[str, TokenTiming] = {}
            for arm in arm_order(rep):
                with _reported(issues, f"decode.{arm}", server, bodies[arm]):
                    res = stream_chat(client, arm, bodies[arm])
                    check_stream(res, bodies[arm], server, issues)
                    timed[arm] = res.timing()
                    if arm == "constrained" and not text:
                        text = res.text
            reps.append(timed)
    return {**summarize_timings(reps), "load_avg_1min": [load_before, load_average()]}, text


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
    return {"runs": len(stats), **{k: finite_median([s[k] for s in stats]) for k in keys}}
