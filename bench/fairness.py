"""Fair share between tenants: one tenant floods, the other chats.

    .venv/bin/python -m bench.fairness [--model PATH_OR_NAME] [--seconds 60] [--prompt-tokens 1000]

Two servers on the same model, one after the other, each with two user keys of equal weight
(A and B) and an admin key (for /v1/stats): `fair` (the default admission) and `fcfs`
(`-admission fcfs`, first come first served: the baseline, measured in the same run on
the same load). On each:

1. idle: B sends short streamed chats one at a time to the idle server: its time to first
   token (TTFT).
2. flood: A keeps two /v1/completions requests of 64 distinct ~1,000-token prompts each in
   flight for `--seconds` (one refused is sent again after its Retry-After; one answered is
   followed at once by a new one), while B sends one short streamed chat every 2 s. B's
   status codes and TTFT (to the first content token; the rest of each reply is not read);
   A's status codes; the tokens served per second.
3. saturate: A floods as in 2 and B keeps 32 completions of one ~1,000-token prompt each in
   flight: each tenant's share of the tokens served, and the tokens per second, counted from
   when both have been served (B's small requests are queued before A's 64-prompt one is
   parsed, and until then B alone has the engine); `share_b_from_start` counts from the start.

Tokens served are what the engine computed in the window (prompt positions read and tokens
generated, in all and per principal), from /v1/stats: work in progress counts as it is done,
so a window's edges do not cut whole 1,000-token prompts in or out.

Targets, all from the fair server in this one run: B gets 200 for every request of step 2;
B's TTFT p95 in step 2 is at most 2x its median TTFT idle; each tenant gets 45-55% of the
tokens in step 3; tokens per second in steps 2 and 3 are at least 0.95x fcfs's. Every prompt
is distinct (no prefix reuse) and generation runs to max_tokens (end-of-text tokens banned).
The machine is shared: the load averages are in the report.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import Server, free_port, llamay_serve_argv, start_server, stop_server

from .common import DONE, machine_info, percentile, print_json, sse_data
from .state.common import Tokenizer, fitted_text, resolve_model

KEYS = {"a": "bench-tenant-a", "b": "bench-tenant-b", "admin": "bench-admin"}
PRINCIPALS = ("tenant-a", "tenant-b")
N_PROMPTS = 64  # per completions request of A's flood (the server's queue limit per principal)
A_MAX_TOKENS = 32
B_CHAT_MAX_TOKENS = 16
B_CHAT_EVERY_S = 2.0
B_REQUESTS = 32  # B's requests in flight when it saturates (its default limit)
RAMP_MAX_S = 60.0  # the longest the saturation waits for both tenants to be served
IDLE_CHATS = 10
NO_END = {"0": -100, "1": -100, "2": -100}  # SmolLM2's end-of-text, im_start, im_end
TIMEOUT = httpx.Timeout(connect=10.0, read=900.0, write=60.0, pool=900.0)
TARGETS = {
    "b_ttft_p95_over_idle_max": 2.0,
    "share_min": 0.45,
    "share_max": 0.55,
    "throughput_vs_fcfs_min": 0.95,
}


def progress(message: str) -> None:
    print(f"bench.fairness {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


class Prompts:
    """Distinct ~n-token prompts: a numbered head (so no two share a cached prefix) over one of
    a few fitted bodies."""

    def __init__(self, model: Path, n_tokens: int) -> None:
        tok = Tokenizer(model)
        try:
            self._bodies = [fitted_text(tok, seed, n_tokens - 8) for seed in range(8)]
        finally:
            tok.close()
        self._next = 0

    def take(self, n: int) -> list[str]:
        out = []
        for _ in range(n):
            self._next += 1
            out.append(f"Case {self._next}. {self._bodies[self._next % len(self._bodies)]}")
        return out


@dataclass
class Window:
    """What one phase saw."""

    statuses: dict[str, dict[int, int]] = field(default_factory=dict)  # tenant -> status -> count
    ttft: list[float] = field(default_factory=list)  # B's chats

    def status(self, tenant: str, code: int) -> None:
        counts = self.statuses.setdefault(tenant, {})
        counts[code] = counts.get(code, 0) + 1


async def stats(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.get("/v1/stats", headers=_auth("admin"))
    r.raise_for_status()
    return dict(r.json())


def _auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def computed(s: dict[str, Any], principal: str | None = None) -> int:
    """Tokens the engine computed, in all or for one principal."""
    if principal is None:
        return sum(int(m["computed_tokens"]) for m in s["models"])
    return sum(int(m["computed_by_principal"].get(principal, 0)) for m in s["models"])


async def chat_ttft(
    client: httpx.AsyncClient, text: str, on_status: Callable[[int], None] = lambda code: None
) -> float | None:
    """One short streamed chat of B's: its time to the first content token (None if refused;
    `on_status` hears the status as soon as the response starts)."""
    body = {
        "messages": [{"role": "user", "content": text}],
        "max_tokens": B_CHAT_MAX_TOKENS,
        "temperature": 0,
        "stream": True,
    }
    sent = time.perf_counter()
    first: float | None = None
    async with client.stream("POST", "/v1/chat/completions", json=body, headers=_auth("b")) as r:
        on_status(r.status_code)
        if r.status_code != 200:
            await r.aread()
            return None
        async for line in r.aiter_lines():
            data = sse_data(line)
            if first is None and data and data != DONE:
                delta = (json.loads(data).get("choices") or [{}])[0].get("delta") or {}
                if delta.get("content"):
                    first = time.perf_counter() - sent
                    return first  # the rest of the reply is not waited for
    return first


async def flood_a(client: httpx.AsyncClient, prompts: Prompts, window: Window, until: float) -> None:
    """One of A's two request loops: 64 prompts a request, kept in flight until `until`."""
    batch = prompts.take(N_PROMPTS)
    while time.monotonic() < until:
        body = {"prompt": batch, "max_tokens": A_MAX_TOKENS, "temperature": 0, "logit_bias": NO_END}
        r = await client.post("/v1/completions", json=body, headers=_auth("a"))
        window.status("a", r.status_code)
        if r.status_code == 200:
            batch = prompts.take(N_PROMPTS)
        else:  # refused: the same prompts again after Retry-After
            await asyncio.sleep(
                min(float(r.headers.get("retry-after", "1")), max(0.0, until - time.monotonic()))
            )


async def chats_b(client: httpx.AsyncClient, window: Window, until: float) -> None:
    """B's chats, one every B_CHAT_EVERY_S, each on its own (they never wait for each other)."""

    async def one(i: int) -> None:
        ttft = await chat_ttft(client, f"Name a colour, please ({i}).", lambda code: window.status("b", code))
        if ttft is not None:
            window.ttft.append(ttft)

    tasks = []
    i = 0
    while time.monotonic() < until:
        tasks.append(asyncio.create_task(one(i)))
        i += 1
        await asyncio.sleep(B_CHAT_EVERY_S)
    await asyncio.gather(*tasks)


async def saturate_b(client: httpx.AsyncClient, prompts: Prompts, window: Window, until: float) -> None:
    """One of B's saturating loops: a completion of one prompt after another (not streamed,
    so the client's own work stays small beside the server's)."""
    while time.monotonic() < until:
        body = {
            "prompt": prompts.take(1)[0],
            "max_tokens": A_MAX_TOKENS,
            "temperature": 0,
            "logit_bias": NO_END,
        }
        r = await client.post("/v1/completions", json=body, headers=_auth("b"))
        window.status("b", r.status_code)
        if r.status_code != 200:
            await asyncio.sleep(float(r.headers.get("retry-after", "1")))
            continue


async def timed(
    client: httpx.AsyncClient, seconds: float, loads: Callable[[float], list[Any]], both: bool = False
) -> tuple[float, dict[str, int], dict[str, int]]:
    """Run the coroutines `loads(until)` for `seconds`; the wall time and the tokens computed
    in between, in all ("") and per principal. With `both`, the window starts once both
    principals have had tokens computed (a 64-prompt request takes a while to be parsed and
    queued, and until then the other one has the engine to itself, as it should), and the
    tokens from the start of the loads are returned too (else the same figures twice).
    Whatever is still in flight at the end is cancelled (the server aborts it) and the
    server is left to drain."""
    start = before = await stats(client)
    t0 = time.monotonic()
    until = t0 + seconds + (RAMP_MAX_S if both else 0.0)
    tasks = [asyncio.create_task(c) for c in loads(until)]
    while both and time.monotonic() - t0 < RAMP_MAX_S:
        s = await stats(client)
        if all(computed(s, who) > computed(start, who) for who in PRINCIPALS):
            before, t0 = s, time.monotonic()
            break
        await asyncio.sleep(0.2)
    done, pending = await asyncio.wait(tasks, timeout=max(0.0, t0 + seconds + 0.5 - time.monotonic()))
    after = await stats(client)
    elapsed = time.monotonic() - t0
    for t in pending:
        t.cancel()
    for t in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await t
    await drain(client)
    tokens = {"": computed(after) - computed(before)}
    whole = {"": computed(after) - computed(start)}
    for who in PRINCIPALS:
        tokens[who] = computed(after, who) - computed(before, who)
        whole[who] = computed(after, who) - computed(start, who)
    return elapsed, tokens, whole


async def drain(client: httpx.AsyncClient) -> None:
    while True:
        s = await stats(client)
        if not s["running_sequences"] and not s["queue_depth"]:
            return
        await asyncio.sleep(0.2)


async def measure(server: Server, prompts: Prompts, seconds: float) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=server.base_url, timeout=TIMEOUT, limits=limits) as client:
        await chat_ttft(client, "Hello there.")  # warm up: graph allocation stays out of the timings
        idle = []
        for i in range(IDLE_CHATS):
            ttft = await chat_ttft(client, f"Name a colour, please (idle {i}).")
            if ttft is None:
                raise RuntimeError("an idle chat was refused")
            idle.append(ttft)
            await drain(client)  # the rest of its reply, aborted, leaves the engine
        progress(f"{server.name}: idle TTFT median {percentile(idle, 50) * 1000:.0f} ms; flooding")

        flood = Window()
        elapsed, tokens, _ = await timed(
            client,
            seconds,
            lambda until: (
                [flood_a(client, prompts, flood, until) for _ in range(2)] + [chats_b(client, flood, until)]
            ),
        )
        flood_result = {
            "seconds": round(elapsed, 1),
            "statuses": flood.statuses,
            "b_ttft_ms": _ms(flood.ttft),
            "b_chats": sum(flood.statuses.get("b", {}).values()),
            "b_chats_with_a_token": len(flood.ttft),
            "tokens_served": tokens[""],
            "tokens_of_a": tokens["tenant-a"],
            "tokens_of_b": tokens["tenant-b"],
            "tokens_per_s": round(tokens[""] / elapsed, 1),
        }
        progress(f"{server.name}: flood {json.dumps(flood_result)}; saturating")

        sat = Window()
        elapsed, tokens, whole = await timed(
            client,
            seconds,
            lambda until: (
                [flood_a(client, prompts, sat, until) for _ in range(2)]
                + [saturate_b(client, prompts, sat, until) for _ in range(B_REQUESTS)]
            ),
            both=True,
        )
        both = tokens["tenant-a"] + tokens["tenant-b"]
        from_start = whole["tenant-a"] + whole["tenant-b"]
        sat_result = {
            "seconds": round(elapsed, 1),
            "statuses": sat.statuses,
            "tokens_served": tokens[""],
            "tokens_per_s": round(tokens[""] / elapsed, 1),
            "share_a": round(tokens["tenant-a"] / both, 3) if both else float("nan"),
            "share_b": round(tokens["tenant-b"] / both, 3) if both else float("nan"),
            "share_b_from_start": round(whole["tenant-b"] / from_start, 3) if from_start else float("nan"),
        }
        progress(f"{server.name}: saturate {json.dumps(sat_result)}")
    return {"idle_ttft_ms": _ms(idle), "flood": flood_result, "saturate": sat_result}


def _ms(values: list[float]) -> dict[str, float | int]:
    return {
        "n": len(values),
        "p50": round(percentile(values, 50) * 1000, 1),
        "p95": round(percentile(values, 95) * 1000, 1),
        "max": round(max(values) * 1000, 1) if values else float("nan"),
    }


@contextlib.contextmanager
def llamay(name: str, model: Path) -> Iterator[Server]:
    home = Path(tempfile.mkdtemp(prefix=f"bench-fairness-{name}-"))
    keys = home / "keys.json"
    keys.write_text(json.dumps({"keys": [
        {"key": KEYS["a"], "principal": "tenant-a"},
        {"key": KEYS["b"], "principal": "tenant-b"},
        {"key": KEYS["admin"], "principal": "admin", "role": "admin"},
    ]}))  # fmt: skip
    port = free_port()
    # Every client here is on 127.0.0.1: the per-address connection cap would turn the
    # load itself away, so it is raised to the total cap.
    argv = llamay_serve_argv(
        model, port, "-keys", str(keys), "-admission", name, "-max-connections-per-address", "256"
    )
    progress(f"{name}: starting {' '.join(argv[1:])}")
    try:
        server = start_server(name, argv, port, "/health", env={"LLAMAY_HOME": str(home / "home")})
        try:
            yield server
        finally:
            stop_server(server, grace=60)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def verdict(fair: dict[str, Any], fcfs: dict[str, Any]) -> dict[str, Any]:
    flood, sat = fair["flood"], fair["saturate"]
    idle = fair["idle_ttft_ms"]["p50"]
    b_codes = flood["statuses"].get("b", {})
    ratio = flood["b_ttft_ms"]["p95"] / idle if idle else float("nan")
    tput_flood = (
        flood["tokens_per_s"] / fcfs["flood"]["tokens_per_s"]
        if fcfs["flood"]["tokens_per_s"]
        else float("nan")
    )
    tput_sat = (
        sat["tokens_per_s"] / fcfs["saturate"]["tokens_per_s"]
        if fcfs["saturate"]["tokens_per_s"]
        else float("nan")
    )
    t = TARGETS
    return {
        "b_all_200": set(b_codes) == {200},
        "b_ttft_p95_over_idle": round(ratio, 2),
        "b_ttft_ok": ratio <= t["b_ttft_p95_over_idle_max"]
        and flood["b_chats_with_a_token"] == flood["b_chats"],
        "share_a": sat["share_a"],
        "share_b": sat["share_b"],
        "share_ok": t["share_min"] <= sat["share_b"] <= t["share_max"],
        "throughput_vs_fcfs_flood": round(tput_flood, 3),
        "throughput_vs_fcfs_saturate": round(tput_sat, 3),
        "throughput_ok": min(tput_flood, tput_sat) >= t["throughput_vs_fcfs_min"],
    }


async def run_all(model: Path, prompts: Prompts, seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("fair", "fcfs"):
        with llamay(name, model) as server:
            out[name] = await measure(server, prompts, seconds)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=None, help="model name or .gguf path (default: smollm2:135m)")
    p.add_argument("--seconds", type=float, default=60.0, help="length of the flood and the saturation (60)")
    p.add_argument("--prompt-tokens", type=int, default=1000, help="tokens of each flooding prompt (1000)")
    args = p.parse_args(argv)
    load = os.getloadavg()
    model = resolve_model(args.model)
    progress(f"model {model}; fitting prompts of ~{args.prompt_tokens} tokens")
    prompts = Prompts(model, args.prompt_tokens)
    results = asyncio.run(run_all(model, prompts, args.seconds))
    print_json({
        "benchmark": "fairness",
        "model": str(model),
        "seconds": args.seconds,
        "prompt_tokens": args.prompt_tokens,
        "machine": machine_info(load, "other processes kept over half the CPUs busy: figures are noisy"),
        "targets": TARGETS,
        **results,
        "verdict": verdict(results["fair"], results["fcfs"]),
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
