"""Compact vs indented vs free JSON on the default model: which layout extracts better.

One `llamay serve` on the default model; every extraction case is asked greedily once per
layout (interleaved, so machine noise touches all alike), through /v1/chat/completions
with a strict json_schema and max_tokens 300 (far above any right answer). Reported per
layout: completion tokens per answer, stop rate (finish_reason "stop"), and field accuracy
(share of expected top-level fields whose extracted value is exactly right). The layout
with the best field accuracy, then stop rate, then fewest tokens, is `best`.

    python -m bench.json_layout [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import httpx

from llamay.testing.server import HOST, free_port, start_server

from ..common import print_json
from .cases import all_cases

LAYOUTS = ("compact", "indented", "free")
MAX_TOKENS = 300  # an answer still going past this has run away: it counts as not stopping


def ask(client: httpx.Client, case: dict[str, Any], layout: str) -> dict[str, Any]:
    body = {
        "model": "",
        "temperature": 0,
        "max_tokens": MAX_TOKENS,
        "messages": case["messages"],
        "json_layout": layout,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": case["name"], "schema": case["schema"], "strict": True}},
    }  # fmt: skip
    t0 = time.perf_counter()
    r = client.post("/v1/chat/completions", json=body)
    elapsed = time.perf_counter() - t0
    r.raise_for_status()
    choice = r.json()["choices"][0]
    tokens = r.json()["usage"]["completion_tokens"]
    try:
        got = json.loads(choice["message"]["content"])
    except ValueError:
        got = None
    expect = case["expect"]
    right = sum(1 for k, v in expect.items() if isinstance(got, dict) and got.get(k) == v)
    return {"tokens": tokens, "stop": choice["finish_reason"] == "stop", "right": right,
            "fields": len(expect), "seconds": elapsed, "case": case["name"]}  # fmt: skip


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    return {
        "answers": n,
        "tokens_per_answer": sum(r["tokens"] for r in rows) / n,
        "stop_rate": sum(r["stop"] for r in rows) / n,
        "field_accuracy": sum(r["right"] for r in rows) / sum(r["fields"] for r in rows),
        "seconds_per_answer": sum(r["seconds"] for r in rows) / n,
        "wrong_cases": sorted({r["case"] for r in rows if r["right"] < r["fields"] or not r["stop"]}),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args(argv)
    port = free_port()
    cmd = [sys.executable, "-m", "llamay.cli.main", "serve", "-addr", f"{HOST}:{port}"]
    rows: dict[str, list[dict[str, Any]]] = {layout: [] for layout in LAYOUTS}
    cases = all_cases()
    with (
        start_server("llamay", cmd, port, "/health", timeout=600) as server,
        httpx.Client(base_url=server.base_url, timeout=600) as client,
    ):
        for _ in range(args.rounds):
            for case in cases:
                for layout in LAYOUTS:
                    rows[layout].append(ask(client, case, layout))
    report = {layout: summarize(r) for layout, r in rows.items()}
    best = max(
        LAYOUTS,
        key=lambda x: (report[x]["field_accuracy"], report[x]["stop_rate"], -report[x]["tokens_per_answer"]),
    )
    base = report["free"]["tokens_per_answer"]
    print_json({
        "benchmark": "json_layout", "cases": len(cases), "rounds": args.rounds, "layouts": report,
        "tokens_vs_free": {x: report[x]["tokens_per_answer"] / base for x in LAYOUTS}, "best": best,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
