"""Soak test: a real `llamay serve` under mixed traffic for a few minutes.

    .venv/bin/python -m bench.soak [--minutes M] [--model PATH_OR_NAME] [--clients N]

Concurrent clients loop until the time is up, each request drawn at random: chat (whole
and streamed) and completions whose answers are checked for shape, a fixed greedy request
whose text must never change, streams dropped after a few events, bodies over the server's
limit (413) and malformed JSON (400). The server's resident memory (VmRSS) is sampled
every second. Prints one JSON object: requests by kind and status, 5xx (must be 0), bad
answers and greedy mismatches (must be 0), client timeouts, the engine's state at the end,
and RSS at start / after warm-up / max / end with its slope, also without the bytes the
prefix cache keeps in RAM (a bounded cache that fills to its -cache-ram capacity by design);
exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from llamay.api.http import MAX_BODY
from llamay.testing.server import HOST, free_port, start_server

from .common import DONE, BadEvent, print_json, sse_data, sse_event

TIMEOUT = httpx.Timeout(60.0, connect=10.0)
GREEDY = {"messages": [{"role": "user", "content": "Write one sentence about the sea."}], "temperature": 0, "max_tokens": 32}  # fmt: skip
WORDS = ("river", "stone", "cloud", "lamp", "garden", "window", "bread", "music", "winter", "engine", "paper")
FINISH = {"stop", "length"}
CHAT = "/v1/chat/completions"


@dataclass
class Tally:
    requests: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    server_errors: list[str] = field(default_factory=list)
    bad_answers: list[str] = field(default_factory=list)
    greedy_checked: int = 0
    greedy_mismatched: list[str] = field(default_factory=list)
    timeouts: list[str] = field(default_factory=list)

    def note(self, kind: str, status: int | str, detail: str = "") -> None:
        self.requests[kind][str(status)] += 1
        if isinstance(status, int) and status >= 500:
            self.server_errors.append(f"{kind}: {status} {detail[:300]}")


def _prompt(rng: random.Random) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": "Tell me about " + " ".join(rng.choices(WORDS, k=rng.randint(3, 40)))}
    ]


def chat_problem(r: httpx.Response, max_tokens: int) -> str:
    """'' if `r` is a well-formed chat completion, else what is wrong."""
    try:
        body = r.json()
        (choice,) = body["choices"]
        message, used = choice["message"], body["usage"]["completion_tokens"]
        if message["role"] == "assistant" and isinstance(message["content"], str) and 0 < used <= max_tokens:
            return "" if choice["finish_reason"] in FINISH else f"finish_reason {choice['finish_reason']!r}"
    except (ValueError, KeyError, TypeError):
        pass
    return f"malformed chat completion: {r.text[:300]}"


def read_sse(text: str) -> tuple[str, str]:
    """(content, problem) of a streamed chat or completion; problem '' when well-formed."""
    content, finish = "", None
    frames = [data for data in map(sse_data, text.splitlines()) if data is not None]
    if not frames or frames[-1] != DONE:
        return content, f"stream does not end with [DONE]: {text[-200:]!r}"
    for frame in frames[:-1]:
        try:
            for c in sse_event(frame)["choices"]:
                content += c.get("delta", {}).get("content") or c.get("text") or ""
                finish = c.get("finish_reason") or finish
        except (BadEvent, KeyError, TypeError):
            return content, f"bad stream frame: {frame[:200]!r}"
    return content, "" if finish in FINISH else f"stream finished with {finish!r}"


def text_problem(r: httpx.Response) -> str:
    try:
        (c,) = r.json()["choices"]
        return "" if isinstance(c["text"], str) and c["finish_reason"] in FINISH else r.text[:300]
    except (ValueError, KeyError, TypeError):
        return f"malformed completion: {r.text[:300]}"


Check = Callable[[httpx.Response], str]


class Clients:
    """The request kinds; each sends one request and records what came back."""

    def __init__(self, client: httpx.AsyncClient, base: str, tally: Tally, reference: str) -> None:
        self.client, self.base, self.tally, self.reference = client, base, tally, reference

    async def _post(self, kind: str, path: str, want: int, check: Check | None = None, **kw: Any) -> None:
        """Send, record the status, and note a bad answer: another status than `want`, or
        what `check` finds wrong with the answer."""
        r = await self.client.post(self.base + path, **kw)
        self.tally.note(kind, r.status_code, r.text)
        problem = (
            f"status {r.status_code}: {r.text[:200]}" if r.status_code != want else check(r) if check else ""
        )
        if problem:
            self.tally.bad_answers.append(f"{kind}: {problem}")

    async def chat(self, rng: random.Random) -> None:
        n = rng.randint(4, 48)
        body = {"messages": _prompt(rng), "max_tokens": n, "temperature": 0.8, "seed": rng.randint(0, 9999)}
        await self._post("chat", CHAT, 200, lambda r: chat_problem(r, n), json=body)

    async def chat_stream(self, rng: random.Random) -> None:
        body = {"messages": _prompt(rng), "max_tokens": rng.randint(4, 48), "stream": True}
        await self._post("chat_stream", CHAT, 200, lambda r: read_sse(r.text)[1], json=body)

    async def completion(self, rng: random.Random) -> None:
        prompt = " ".join(rng.choices(WORDS, k=rng.randint(2, 30)))
        stream = rng.random() < 0.5
        body = {"prompt": prompt, "max_tokens": rng.randint(4, 32), "stream": stream}
        check: Check = (lambda r: read_sse(r.text)[1]) if stream else text_problem
        await self._post("completion", "/v1/completions", 200, check, json=body)

    async def greedy(self, rng: random.Random) -> None:
        stream = rng.random() < 0.5

        def same(r: httpx.Response) -> str:
            text = read_sse(r.text)[0] if stream else r.json()["choices"][0]["message"]["content"]
            self.tally.greedy_checked += 1
            if text != self.reference:
                self.tally.greedy_mismatched.append(f"{'stream' if stream else 'whole'}: {text!r}")
            return ""

        await self._post("greedy", CHAT, 200, same, json={**GREEDY, "stream": stream})

    async def disconnect(self, rng: random.Random) -> None:
        body = {"messages": _prompt(rng), "max_tokens": 400, "stream": True}
        async with self.client.stream("POST", self.base + CHAT, json=body) as r:
            self.tally.note("disconnect", r.status_code)
            events = rng.randint(1, 6)
            async for line in r.aiter_lines():
                events -= sse_data(line) is not None
                if events <= 0:
                    break  # leaving the block closes the connection mid-stream

    async def oversized(self, rng: random.Random) -> None:
        big = b'{"messages": [{"role": "user", "content": "' + b"x" * (MAX_BODY + 1024) + b'"}]}'
        chunked = rng.random() < 0.5  # no Content-Length: the server counts as it reads

        async def chunks() -> Any:
            for i in range(0, len(big), 1 << 20):
                yield big[i : i + (1 << 20)]

        try:
            await self._post("oversized", CHAT, 413, content=chunks() if chunked else big)
        except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
            self.tally.note("oversized", "closed while sending")  # refused before it was all sent

    async def malformed(self, rng: random.Random) -> None:
        bad = rng.choice([b'{"messages": [', b"\xff\xfe{}", b"not json", b'{"messages": }', b""])
        await self._post("malformed", CHAT, 400, content=bad)


MIX = {"chat": 5, "chat_stream": 5, "completion": 4, "greedy": 3, "disconnect": 2, "oversized": 1, "malformed": 2}  # fmt: skip


async def worker(clients: Clients, seed: int, deadline: float) -> None:
    rng = random.Random(seed)
    kinds, weights = list(MIX), list(MIX.values())
    while time.monotonic() < deadline:
        kind = rng.choices(kinds, weights)[0]
        fn: Callable[[random.Random], Awaitable[None]] = getattr(clients, kind)
        try:
            await fn(rng)
        except httpx.TimeoutException as exc:
            clients.tally.timeouts.append(f"{kind}: {type(exc).__name__}")
        except httpx.HTTPError as exc:
            clients.tally.note(kind, f"client error {type(exc).__name__}")


def rss_kb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return next((int(line.split()[1]) for line in status if line.startswith("VmRSS:")), 0)


async def ram_cache_kb(client: httpx.AsyncClient, base: str) -> int:
    """Bytes the server's prefix cache holds in RAM (a bounded cache, not a leak), in kB."""
    try:
        models = (await client.get(base + "/health")).json().get("models", [])
    except (httpx.HTTPError, ValueError):
        return 0
    return sum(int(m.get("ram_cache", {}).get("bytes", 0)) for m in models) // 1024


async def sample_rss(
    pid: int, samples: list[tuple[float, int, int]], stop: asyncio.Event, t0: float, cache_kb: Callable[[], Awaitable[int]]
) -> None:
    """Every second: (seconds since t0, VmRSS kB, RAM-cache kB)."""
    while not stop.is_set():
        cached = await cache_kb()
        samples.append((time.monotonic() - t0, rss_kb(pid), cached))
        await asyncio.sleep(1.0)


def slope_mb_per_min(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS (kB) over time (s), in MB per minute."""
    n = len(samples) or 1
    mt, mr = sum(t for t, _ in samples) / n, sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    cov = sum((t - mt) * (r - mr) for t, r in samples)
    return cov / var * 60 / 1024 if var else 0.0


async def soak(base: str, pid: int, minutes: float, n_clients: int, warmup: float) -> dict[str, Any]:
    tally, stop = Tally(), asyncio.Event()
    samples: list[tuple[float, int, int]] = []
    t0 = time.monotonic()
    rss_start = rss_kb(pid)
    limits = httpx.Limits(max_connections=n_clients * 2)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:
        first = await client.post(base + CHAT, json=GREEDY)
        first.raise_for_status()
        reference = first.json()["choices"][0]["message"]["content"]
        clients = Clients(client, base, tally, reference)
        sampler = asyncio.create_task(sample_rss(pid, samples, stop, t0, lambda: ram_cache_kb(client, base)))
        deadline = t0 + minutes * 60
        await asyncio.gather(*(worker(clients, seed, deadline) for seed in range(n_clients)))
        await asyncio.sleep(2.0)  # let aborted streams wind down before the engine is read
        health = (await client.get(base + "/health")).json()
        stop.set()
        await sampler
    steady = [s for s in samples if s[0] >= warmup] or samples
    greedy = {
        "checked": tally.greedy_checked,
        "mismatched": len(tally.greedy_mismatched),
        "reference": reference,
    }
    # The prefix cache's RAM tier grows to its configured capacity by design; what must stay
    # flat is the rest of the process, so the leak check is on RSS minus that tier.
    rss = {
        "start": rss_start,
        "after_warmup": steady[0][1],
        "max": max(r for _, r, _ in samples),
        "end": samples[-1][1],
    }
    net = [(t, r - c) for t, r, c in samples]
    net_steady = [(t, v) for t, v in net if t >= warmup] or net
    without_cache = {"after_warmup": net_steady[0][1], "max": max(v for _, v in net), "end": net[-1][1]}
    ram_cache = {"max": max(c for _, _, c in samples), "end": samples[-1][2]}
    return {
        "minutes": minutes,
        "clients": n_clients,
        "requests": {k: dict(sorted(v.items())) for k, v in sorted(tally.requests.items())},
        "total_requests": sum(sum(v.values()) for v in tally.requests.values()),
        "server_errors_5xx": len(tally.server_errors),
        "server_error_samples": tally.server_errors[:5],
        "bad_answers": len(tally.bad_answers),
        "bad_answer_samples": tally.bad_answers[:5],
        "greedy": greedy | {"mismatch_samples": tally.greedy_mismatched[:3]},
        "client_timeouts": len(tally.timeouts),
        "engine_at_end": health.get("models", []),
        "rss_mb": {k: round(v / 1024, 1) for k, v in rss.items()}
        | {"slope_mb_per_min_after_warmup": round(slope_mb_per_min([(t, r) for t, r, _ in steady]), 2)}
        | {"samples": len(samples)},
        "ram_cache_mb": {k: round(v / 1024, 1) for k, v in ram_cache.items()},
        "rss_without_ram_cache_mb": {k: round(v / 1024, 1) for k, v in without_cache.items()}
        | {"slope_mb_per_min_after_warmup": round(slope_mb_per_min(net_steady), 2)},
    }


def run_soak(minutes: float, model: str = "", clients: int = 6, ctx: int = 2048, warmup: float = 20.0,
             home: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Start a server on `model`, soak it, stop it; the report (see the module docstring).
    A model given as a file runs in a temporary LLAMAY_HOME unless `home` names one."""
    port = free_port()
    argv = [sys.executable, "-m", "llamay", "serve", "-addr", f"{HOST}:{port}", "-ctx", str(ctx)]
    argv += ["-m", model] if model else []
    with tempfile.TemporaryDirectory(prefix="llamay-soak-") as tmp:
        env = {"LLAMAY_HOME": home or tmp} if home or model.endswith(".gguf") else None
        with start_server("llamay", argv, port, "/health", env=env, timeout=600) as server:
            report = asyncio.run(soak(server.base_url, server.proc.pid, minutes, clients, warmup))
            report["server_alive"] = server.proc.poll() is None
            try:
                report["health_after"] = httpx.get(server.base_url + "/health", timeout=10).status_code
            except httpx.HTTPError as exc:
                report["health_after"] = f"no answer: {type(exc).__name__}"
    report["model"] = model or "(default)"
    report["ok"] = bool(
        report["server_alive"] and report["health_after"] == 200 and not report["server_errors_5xx"]
        and not report["bad_answers"] and not report["greedy"]["mismatched"] and not report["client_timeouts"]
    )  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=3.0)
    p.add_argument("--model", default="", help="a .gguf path or model name (default: the server's default)")
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--warmup", type=float, default=20.0, help="seconds before RSS counts as steady")
    p.add_argument("--home", default=None, help="LLAMAY_HOME (default: a temporary one for a .gguf file)")
    args = p.parse_args(argv)
    report = run_soak(args.minutes, args.model, args.clients, args.ctx, args.warmup, args.home)
    print_json(report)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
