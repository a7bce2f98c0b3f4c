"""/v1/stats (JSON) and /metrics (Prometheus text): traffic, tokens, queues, KV, cache."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from ..runtime import Runtime
from .http import json_response
from .metrics import RequestCounter
from .state import state_of

__all__ = ["admin_routes", "collect_stats"]


def collect_stats(runtime: Runtime, counter: RequestCounter | None) -> dict[str, Any]:
    models = []
    totals = {"prompt_tokens": 0, "cached_tokens": 0, "generated_tokens": 0}
    for m in runtime.loaded():
        st = m.engine.stats
        totals["prompt_tokens"] += st.prompt_tokens
        totals["cached_tokens"] += st.cached_tokens
        totals["generated_tokens"] += st.generated_tokens
        models.append(
            {
                "name": m.name,
                "requests": st.requests,
                "aborted": st.aborted,
                "prompt_tokens": st.prompt_tokens,
                "cached_tokens": st.cached_tokens,
                "generated_tokens": st.generated_tokens,
                "computed_tokens": st.computed_tokens,
                "computed_by_principal": dict(st.by_tenant),
                "running": m.engine.running,
                "queue_depth": m.engine.queue_depth,
                "kv_cells_used": m.engine.kv_used(),
                "kv_cells_cached": m.engine.cache_used(),
                "kv_cells_total": m.engine.n_ctx,
                "ram_cache_bytes": m.engine.ram_cache()["bytes"],
                "contexts": len(m.engine.contexts.records),
                "decode_steps": st.steps,
                "draft_tokens": m.engine.speculator.drafted,
                "draft_accepted_tokens": m.engine.speculator.accepted,
                "decode_seconds": round(st.decode_seconds, 3),
            }
        )
    hit = totals["cached_tokens"] / totals["prompt_tokens"] if totals["prompt_tokens"] else 0.0
    return {
        "object": "stats",
        "tokens_in": totals["prompt_tokens"],
        "tokens_out": totals["generated_tokens"],
        "prefix_cache_hit_rate": round(hit, 4),
        "queue_depth": sum(m["queue_depth"] for m in models),
        "running_sequences": sum(m["running"] for m in models),
        "kv_cells_used": sum(m["kv_cells_used"] for m in models),
        "loaded_models": [m["name"] for m in models],
        "models": models,
        "requests": counter.snapshot() if counter else [],
        "in_flight": counter.in_flight if counter else 0,
    }


async def stats(request: Request) -> Response:
    state = state_of(request)
    return json_response(collect_stats(state.runtime, state.counter))


def _prom(name: str, help_: str, kind: str, samples: list[tuple[dict[str, Any], float]]) -> list[str]:
    out = [f"# HELP llamay_{name} {help_}", f"# TYPE llamay_{name} {kind}"]
    for labels, value in samples:
        lab = ",".join(f'{k}="{_esc(str(v))}"' for k, v in labels.items())
        out.append(f"llamay_{name}{{{lab}}} {value}" if lab else f"llamay_{name} {value}")
    return out


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


async def metrics(request: Request) -> Response:
    state = state_of(request)
    s = collect_stats(state.runtime, state.counter)
    per = s["models"]
    lines: list[str] = []
    lines += _prom("requests_total", "HTTP requests by route and status", "counter",
                   [({"method": r["method"], "route": r["route"], "status": r["status"]}, r["count"]) for r in s["requests"]])  # fmt: skip
    for key, help_, kind in [
        ("prompt_tokens", "prompt tokens processed", "counter"),
        ("cached_tokens", "prompt tokens served from the prefix cache", "counter"),
        ("generated_tokens", "tokens generated", "counter"),
        ("draft_tokens", "speculative tokens drafted (checked in a step beside the token sampled)", "counter"),
        ("draft_accepted_tokens", "drafted tokens the model's own sampling took", "counter"),
        ("running", "sequences generating now", "gauge"),
        ("queue_depth", "requests waiting", "gauge"),
        ("kv_cells_used", "KV cells held by running requests", "gauge"),
        ("kv_cells_cached", "KV cells kept by the prefix cache", "gauge"),
        ("ram_cache_bytes", "Bytes of cached prefixes moved out of the KV cache into RAM", "gauge"),
        ("contexts", "server-held contexts", "gauge"),
    ]:
        name = key if kind == "gauge" else f"{key}_total"
        lines += _prom(name, help_, kind, [({"model": m["name"]}, m[key]) for m in per])
    lines += _prom(
        "prefix_cache_hit_rate", "cached / prompt tokens", "gauge", [({}, s["prefix_cache_hit_rate"])]
    )
    lines += _prom("loaded_models", "models in memory", "gauge", [({}, len(per))])
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


def admin_routes() -> list[Route]:
    return [Route("/v1/stats", stats, methods=["GET"]), Route("/metrics", metrics, methods=["GET"])]
