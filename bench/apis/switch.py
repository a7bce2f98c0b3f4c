"""Part 2 of bench.apis: model switch times on a server started with -max-loaded 1 (a request
for the model that is not loaded, until its first token: one unload plus one load), both ways
between smollm2:135m and gemma3:270m, and each model's load alone (POST /api/reset, then POST
/api/load; and, after another reset, a cold request's time to first token)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from ..common import sse_data
from .common import (
    LIMITS,
    REQUEST_TIMEOUT,
    RequestFailed,
    Sizes,
    event_json,
    messages,
    post_stream,
    progress,
    with_deadline,
)

SWITCH_MODELS = ("smollm2:135m", "gemma3:270m")
SWITCH_MAX_TOKENS = 4


async def first_token(client: httpx.AsyncClient, model: str) -> tuple[float, str]:
    """Seconds from sending a streamed chat request for `model` to its first generated text,
    and the model the reply names."""
    body = {
        "model": model,
        "messages": messages("Say hello."),
        "max_tokens": SWITCH_MAX_TOKENS,
        "temperature": 0.0,
        "stream": True,
    }
    return await with_deadline("openai", body, _first_token(client, body))


async def _first_token(client: httpx.AsyncClient, body: dict[str, Any]) -> tuple[float, str]:
    sent = time.perf_counter()
    async with post_stream(client, "openai", "/v1/chat/completions", body) as lines:
        async for line in lines:
            data = sse_data(line)
            if not data or data == "[DONE]":
                continue
            event = event_json("openai", body, data)
            choice = (event.get("choices") or [{}])[0]
            if (choice.get("delta") or {}).get("content") or choice.get("finish_reason"):
                elapsed = time.perf_counter() - sent
                async for _ in lines:  # read to the end: the request finishes normally
                    pass
                return elapsed, str(event.get("model"))
    raise RequestFailed("no token in the stream", "openai", body, 200, "")


async def post_json(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = await with_deadline("ollama", body, client.post(path, json=body))
    if resp.status_code != 200:
        raise RequestFailed(f"POST {path}", "ollama", body, resp.status_code, resp.text)
    out: dict[str, Any] = resp.json()
    return out


async def loaded_names(client: httpx.AsyncClient) -> list[str]:
    resp = await with_deadline("ollama", None, client.get("/api/ps"))
    return sorted(m["name"] for m in resp.json().get("models", []))


@dataclass
class SwitchLog:
    """Switch times one way, and any switch after which the server held other models."""

    times: list[float] = field(default_factory=list)
    anomalies: list[dict[str, Any]] = field(default_factory=list)


async def switch_to(client: httpx.AsyncClient, model: str, log: SwitchLog) -> None:
    elapsed, named = await first_token(client, model)
    log.times.append(elapsed)
    loaded = await loaded_names(client)
    if loaded != [model] or named != model:
        log.anomalies.append({"asked": model, "reply_model": named, "loaded_after": loaded})


async def load_alone(client: httpx.AsyncClient, model: str, reps: int) -> dict[str, Any]:
    """Load `model` into an empty server `reps` times: POST /api/load (client and server
    times), and a cold chat request's time to first token."""
    wall, server, cold = [], [], []
    for _ in range(reps):
        await post_json(client, "/api/reset", {})
        t0 = time.perf_counter()
        # Not streamed: one JSON object, the final one, which carries load_duration (streamed,
        # the answer is NDJSON progress lines).
        got = await post_json(client, "/api/load", {"model": model, "stream": False})
        wall.append(time.perf_counter() - t0)
        server.append(float(got.get("load_duration", 0)) / 1e9)
        await post_json(client, "/api/reset", {})
        cold.append((await first_token(client, model))[0])
    return {
        "load_s": statistics.median(wall),
        "server_load_duration_s": statistics.median(server),
        "cold_request_ttft_s": statistics.median(cold),
        "runs_load_s": wall,
        "runs_cold_request_ttft_s": cold,
    }


async def switch_times(base_url: str, sizes: Sizes) -> dict[str, Any]:
    a, b = SWITCH_MODELS
    logs = {f"{a} -> {b}": SwitchLog(), f"{b} -> {a}": SwitchLog()}
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=LIMITS) as client:
        progress("switch: warm")
        warm_a, _ = await first_token(client, a)
        first_log = SwitchLog()
        if sizes.first_switch_apart:  # the first switch pays one-off costs: kept apart
            await switch_to(client, b, first_log)
            await switch_to(client, a, first_log)
        for rep in range(sizes.switch_reps):
            progress(f"switch {rep + 1}/{sizes.switch_reps}")
            await switch_to(client, b, logs[f"{a} -> {b}"])
            await switch_to(client, a, logs[f"{b} -> {a}"])
        loads = {}
        for m in SWITCH_MODELS:
            progress(f"load alone: {m}")
            loads[m] = await load_alone(client, m, sizes.load_reps)
    return switch_report(logs, loads, first_log, warm_a)


def switch_report(
    logs: dict[str, SwitchLog], loads: dict[str, Any], first: SwitchLog, warm: float
) -> dict[str, Any]:
    switches = {
        way: {"median_s": statistics.median(log.times), "runs_s": log.times} for way, log in logs.items()
    }
    for way, entry in switches.items():  # switch minus the cold request: unloading and noise
        target = way.split(" -> ")[1]
        entry["minus_cold_request_s"] = entry["median_s"] - loads[target]["cold_request_ttft_s"]
    anomalies = [a for log in (*logs.values(), first) for a in log.anomalies]
    return {
        "max_loaded": 1,
        "switch_request": f"streamed /v1/chat/completions, max_tokens {SWITCH_MAX_TOKENS}, time to first token",
        "warm_request_ttft_s": warm,
        "first_switches_s": first.times,
        "switch": switches,
        "load": loads,
        "anomalies": anomalies,
    }
