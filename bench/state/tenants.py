"""What tenant namespaces in the prefix cache cost: part 5 of bench.state, also runnable alone.

    .venv/bin/python -m bench.state.tenants [--model PATH_OR_NAME] [--quick]

With API keys each principal attaches only to prefixes its own requests computed, or to ones
an admin shared (a context created with "shared": true). Two servers, each its own
LLAMAY_HOME: one without keys (single user: one namespace, the behaviour before namespaces)
and one with an admin key and four user keys.

1. single_user vs one_principal: time to first token of a request whose ~N-token system
   prompt the same caller sent just before (hit) against the first one (cold), on each
   server. Namespacing should cost a single caller nothing: the ratios should match.
2. shared_system_prompt: four principals send one system prompt, each with its own question,
   one after another. "single_user": the four requests come from the one user of the server
   without keys (requests 2-4 hit: the old, unisolated behaviour). "isolated": four user keys;
   every principal computes the system prompt itself (the price of isolation). "admin_shared":
   an admin first creates a shared context holding the system prompt; every principal's
   first request attaches to it. Reported: TTFT and cached tokens of each request.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import Server, free_port, llamay_serve_argv, start_server, stop_server

from ..common import print_json
from .common import (
    FULL,
    QUICK,
    REQUEST_TIMEOUT,
    SERVER_START_S,
    SERVER_STOP_GRACE_S,
    Sizes,
    Tokenizer,
    fitted_text,
    guarded,
    median,
    progress,
    resolve_model,
    stream_chat,
    warm_up,
)
from .prefix import USER_COLD, USER_HIT

N_TENANTS = 4
ADMIN = "bench-admin-key"


def _keys_file(home: Path) -> Path:
    path = home / "keys.json"
    keys = [{"key": ADMIN, "principal": "admin", "role": "admin"}]
    keys += [{"key": f"bench-user-{i}", "principal": f"user{i}"} for i in range(N_TENANTS)]
    path.write_text(json.dumps({"keys": keys}))
    return path


@contextlib.contextmanager
def _server(name: str, model: Path, ctx: int, keys: bool, logs: dict[str, str]) -> Iterator[Server]:
    home = Path(tempfile.mkdtemp(prefix=f"bench-tenants-{name}-home-"))
    port = free_port()
    argv = llamay_serve_argv(model, port, "-ctx", str(ctx))
    if keys:
        argv += ["-keys", str(_keys_file(home))]
    progress(f"{name}: starting {' '.join(argv[1:])}")
    try:
        server = start_server(
            name, argv, port, "/health", env={"LLAMAY_HOME": str(home)}, timeout=SERVER_START_S
        )
        logs[name] = str(server.log_path)
        try:
            yield server
        finally:
            stop_server(server, grace=SERVER_STOP_GRACE_S)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _client(server: Server, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=server.base_url, timeout=REQUEST_TIMEOUT, headers=headers)


def _ask(client: httpx.Client, system: str, question: str, max_tokens: int) -> dict[str, Any]:
    body = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    s = stream_chat(client, body)
    return {"ttft_ms": s.ttft_s * 1000, "cached_tokens": s.cached_tokens, "prompt_tokens": s.prompt_tokens}


def _hit_over_cold(client: httpx.Client, tok: Tokenizer, sizes: Sizes, seed: int) -> dict[str, Any]:
    cold, hit = [], []
    for rep in range(sizes.ttft_reps):
        system = fitted_text(tok, seed + rep, sizes.ttft_system_tokens)
        cold.append(_ask(client, system, USER_COLD, sizes.ttft_max_tokens))
        hit.append(_ask(client, system, USER_HIT, sizes.ttft_max_tokens))
    c, h = median([r["ttft_ms"] for r in cold]), median([r["ttft_ms"] for r in hit])
    return {
        "cold_ttft_ms_median": c,
        "hit_ttft_ms_median": h,
        "hit_over_cold": h / c,
        "hit_cached_tokens": [r["cached_tokens"] for r in hit],
    }


def _tenants(clients: list[httpx.Client], system: str, sizes: Sizes) -> dict[str, Any]:
    rows = [_ask(c, system, f"Tenant {i} asks: which topic comes first?", sizes.ttft_max_tokens)
            for i, c in enumerate(clients)]  # fmt: skip
    return {"requests": rows, "later_ttft_ms_median": median([r["ttft_ms"] for r in rows[1:]])}


def measure_namespaces(model: Path, tok: Tokenizer, sizes: Sizes, logs: dict[str, str]) -> dict[str, Any]:
    """Both servers' arms, in the order the module docstring gives; each arm's figures go
    to stderr as soon as it ends (a slow machine still shows what it measured)."""
    out: dict[str, Any] = {}
    with (
        _server("tenants-single", model, sizes.server_ctx, False, logs) as single,
        _client(single, None) as one,
    ):
        warm_up(one)
        out["single_user"] = _hit_over_cold(one, tok, sizes, 5000)
        progress(f"single_user: {json.dumps(out['single_user'])}")
        system = fitted_text(tok, 5100, sizes.ttft_system_tokens)
        out["shared_system_prompt"] = {"single_user": _tenants([one] * N_TENANTS, system, sizes)}
    with _server("tenants-keys", model, sizes.server_ctx, True, logs) as keyed:
        users = [_client(keyed, f"bench-user-{i}") for i in range(N_TENANTS)]
        admin = _client(keyed, ADMIN)
        try:
            warm_up(users[0])
            out["one_principal"] = _hit_over_cold(users[0], tok, sizes, 5000)
            progress(f"one_principal: {json.dumps(out['one_principal'])}")
            shared = out["shared_system_prompt"]
            shared["isolated"] = _tenants(users, fitted_text(tok, 5200, sizes.ttft_system_tokens), sizes)
            system = fitted_text(tok, 5300, sizes.ttft_system_tokens)
            made = admin.post(
                "/v1/contexts", json={"messages": [{"role": "system", "content": system}], "shared": True}
            )
            made.raise_for_status()
            shared["admin_shared"] = _tenants(users, system, sizes) | {
                "shared_context_tokens": made.json()["tokens"]
            }
        finally:
            for c in [*users, admin]:
                c.close()
    base = out["shared_system_prompt"]["single_user"]["later_ttft_ms_median"]
    out["cost"] = {
        "one_principal_hit_over_cold_vs_single_user": out["one_principal"]["hit_over_cold"]
        / out["single_user"]["hit_over_cold"],
        "isolated_later_ttft_over_single_user": out["shared_system_prompt"]["isolated"][
            "later_ttft_ms_median"
        ]
        / base,
        "admin_shared_later_ttft_over_single_user": out["shared_system_prompt"]["admin_shared"][
            "later_ttft_ms_median"
        ]
        / base,
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.state.tenants", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--model", default=None, help="model name or .gguf path (default: the default model)")
    parser.add_argument("--quick", action="store_true", help="shrink everything for a smoke run")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    model = resolve_model(args.model)
    logs: dict[str, str] = {}
    tok = Tokenizer(model)
    started = time.perf_counter()
    try:
        result = guarded("tenant_namespaces", None, lambda: measure_namespaces(model, tok, sizes, logs))
    finally:
        tok.close()
    print_json({"benchmark": "bench.state.tenants", "quick": args.quick, "model": str(model),
                "tenant_namespaces": result, "wall_s": time.perf_counter() - started, "server_logs": logs})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
