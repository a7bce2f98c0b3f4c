"""Answers that finish: the default output budget, and constrained answers under max_tokens.

    python -m bench.finish [--model smollm2:135m] [--prompts 40] [--json-runs 20] [--schemas 12]
                           [--chat-template FILE] [--only free,readme_json,schemas]

Starts one `llamay serve` on the model (from $LLAMAY_HOME's store) and measures, printing JSON:

- `free`: prompts sent without `max_tokens`, with the model's sampling defaults (the
  catalog's, under the GGUF's) and, as the baseline in the same run, with the API's bare
  defaults (temperature 1, top_p 1, no repetition penalty): the share that ends by itself
  or at the server's default budget (which must be all), and p50/p95 of length and time.
- `readme_json`: the README's `llamay run -chat -json -p "Describe a server as JSON."`
  as the request it makes (a JSON object, max_tokens 256, the CLI's temperature 0.8,
  top_k 40, top_p 0.95), with seeds 0..N-1: how many parse, how many were closed early;
  the baseline is the same request with max_tokens `--natural` (1024), counting the
  answers that would not have fitted in 256 tokens.
- `schemas`: real-world schemas (a seeded sample of SchemaStore's from
  bench/data/schemas.jsonl.gz) with max_tokens 64, 128, 256 and 512: refused at request
  time (400, naming the minimum), valid (parses and validates), closed early, invalid
  (must be none); the baseline is each schema's answer with max_tokens `--natural`,
  against which closed-early answers are compared in length.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import jsonschema

from bench.common import machine_info, percentile, print_json
from llamay.testing.server import free_port, llamay_serve_argv, start_server

DATA = Path(__file__).parent / "data" / "schemas.jsonl.gz"
PROMPTS = [
    "Say hello.", "What is the capital of France?", "Write a haiku about rain.",
    "Explain what a CPU does in two sentences.", "Give me three tips for sleeping well.",
    "What is 12 times 7?", "Translate 'good morning' into Spanish.", "Name a famous painter.",
    "What is photosynthesis?", "Suggest a name for a cat.", "How many days are in a leap year?",
    "Write one sentence about the sea.", "What does HTTP stand for?", "List three primary colours.",
    "Why is the sky blue?", "Give a synonym for 'happy'.", "What is the boiling point of water?",
    "Describe a cup of coffee.", "Who wrote Romeo and Juliet?", "What is a prime number?",
    "Recommend a book for a long flight.", "How do I boil an egg?", "What is the largest planet?",
    "Write a two-line poem about autumn.", "What is the difference between weather and climate?",
    "Say goodbye politely.", "What is Python used for?", "Name three fruits that are red.",
    "What is gravity?", "How far is the Moon from Earth?", "Give me a fun fact about octopuses.",
    "What is a verb?", "How do plants drink water?", "Summarise the story of Cinderella in one line.",
    "What is 100 divided by 4?", "What language is spoken in Brazil?", "Describe the colour green.",
    "What is a rainbow?", "Tell me a short joke.", "What should I pack for a picnic?",
]  # fmt: skip
BARE = {"temperature": 1.0, "top_p": 1.0, "repeat_penalty": 1.0}  # the API's own defaults
README_JSON = {"temperature": 0.8, "top_k": 40, "top_p": 0.95}  # `llamay run`'s
BUDGETS = (64, 128, 256, 512)


async def chat(client: httpx.AsyncClient, body: dict[str, Any], gate: asyncio.Semaphore) -> dict[str, Any]:
    """One chat completion: status, finish, tokens, seconds, content (or the error)."""
    async with gate:
        t0 = time.perf_counter()
        r = await client.post("/v1/chat/completions", json=body)
        seconds = time.perf_counter() - t0
    data = r.json()
    if r.status_code != 200:
        return {
            "status": r.status_code,
            "error": data.get("error", {}).get("message", ""),
            "seconds": seconds,
        }
    choice = data["choices"][0]
    return {
        "status": 200,
        "finish": choice["finish_reason"],
        "closed_early": bool(choice.get("closed_early")),
        "message": choice.get("finish_message"),
        "tokens": data["usage"]["completion_tokens"],
        "seconds": seconds,
        "content": choice["message"].get("content") or "",
    }


def spread(values: list[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95), "max": max(values, default=0.0)}


async def free(
    client: httpx.AsyncClient, model: str, n: int, budget: int, gate: asyncio.Semaphore
) -> dict[str, Any]:
    async def run(extra: dict[str, Any]) -> dict[str, Any]:
        bodies = [
            {"model": model, "messages": [{"role": "user", "content": p}], "seed": i, **extra}
            for i, p in enumerate(PROMPTS[:n])
        ]
        got = await asyncio.gather(*(chat(client, b, gate) for b in bodies))
        ok = [g for g in got if g["status"] == 200]
        by_itself = sum(g["finish"] == "stop" for g in ok)
        at_budget = sum(g["finish"] == "length" and g["tokens"] == budget for g in ok)
        return {
            "requests": n,
            "ended_by_itself": by_itself,
            "ended_at_default_budget": at_budget,
            "share_finished": (by_itself + at_budget) / n,
            "other": [{k: g.get(k) for k in ("status", "finish", "message", "error")} for g in got
                      if g["status"] != 200 or g["finish"] not in ("stop", "length")],
            "tokens": spread([g["tokens"] for g in ok]),
            "seconds": spread([g["seconds"] for g in ok]),
        }  # fmt: skip

    return {"model_defaults": await run({}), "baseline_bare_defaults": await run(BARE)}


def parses(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


async def readme_json(
    client: httpx.AsyncClient, model: str, n: int, natural: int, gate: asyncio.Semaphore
) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Describe a server as JSON."}]

    def body(seed: int, max_tokens: int) -> dict[str, Any]:
        fmt = {"type": "json_object"}
        return {
            "model": model,
            "messages": messages,
            "seed": seed,
            "max_tokens": max_tokens,
            "response_format": fmt,
            **README_JSON,
        }

    got = await asyncio.gather(*(chat(client, body(i, 256), gate) for i in range(n)))
    base = await asyncio.gather(*(chat(client, body(i, natural), gate) for i in range(n)))
    return {
        "runs": n,
        "valid": sum(g["status"] == 200 and isinstance(parses(g["content"]), dict) for g in got),
        "closed_early": sum(bool(g.get("closed_early")) for g in got),
        "finish_reasons": sorted({str(g.get("finish")) for g in got}),
        "tokens": spread([g.get("tokens", 0) for g in got]),
        "baseline_natural_length": spread([b.get("tokens", 0) for b in base]),
        "baseline_longer_than_256": sum(b.get("tokens", 0) > 256 for b in base),
    }


def sample_schemas(k: int, seed: int = 29) -> list[tuple[str, dict[str, Any]]]:
    """`k` SchemaStore schemas of 1-12 KB that validate as schemas, chosen by `seed`."""
    rows = []
    with gzip.open(DATA, "rt") as f:
        for line in f:
            row = json.loads(line)
            size = len(json.dumps(row["schema"]))
            if row["source"].startswith("schemastore:") and 1_000 <= size <= 12_000:
                rows.append((row["source"], row["schema"]))
    random.Random(seed).shuffle(rows)
    out = []
    for source, schema in rows:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except Exception:  # a schema the validator cannot judge answers cannot be judged either
            continue
        if _remote_refs(schema):  # answers could not be judged offline against what it names
            continue
        out.append((source, schema))
        if len(out) == k:
            break
    return out


def _remote_refs(node: Any) -> bool:
    """Whether `node` has a `$ref` outside itself (another document, fetched by URL)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            return True
        return any(_remote_refs(v) for v in node.values())
    if isinstance(node, list):
        return any(_remote_refs(v) for v in node)
    return False


def validates(schema: dict[str, Any], value: Any) -> bool:
    return jsonschema.validators.validator_for(schema)(schema).is_valid(value)


def _valid(g: dict[str, Any], schema: dict[str, Any]) -> bool:
    value = parses(g.get("content", "")) if g["status"] == 200 else None
    return value is not None and validates(schema, value)


async def schemas(
    client: httpx.AsyncClient, model: str, k: int, natural: int, gate: asyncio.Semaphore
) -> dict[str, Any]:
    chosen = sample_schemas(k)
    messages = [{"role": "user", "content": "Write an example configuration file as JSON."}]

    def body(schema: dict[str, Any], max_tokens: int) -> dict[str, Any]:
        fmt = {"type": "json_schema", "json_schema": {"name": "config", "schema": schema}}
        return {
            "model": model,
            "messages": messages,
            "seed": 7,
            "max_tokens": max_tokens,
            "response_format": fmt,
        }

    jobs = [(i, b) for i in range(len(chosen)) for b in (*BUDGETS, natural)]
    got = await asyncio.gather(*(chat(client, body(chosen[i][1], b), gate) for i, b in jobs))
    results = {(i, b): g for (i, b), g in zip(jobs, got, strict=True)}
    per_budget: dict[str, Any] = {}
    ratios: list[float] = []
    for b in BUDGETS:
        refused = valid = closed = invalid = 0
        failures = []
        for i, (source, schema) in enumerate(chosen):
            g = results[(i, b)]
            if g["status"] == 400:
                refused += 1
                continue
            ok = _valid(g, schema)
            valid += ok
            if not ok:
                invalid += 1
                failures.append(
                    {
                        "schema": source,
                        "finish": g.get("finish"),
                        "message": g.get("message") or g.get("error"),
                    }
                )
            if g.get("closed_early"):
                closed += 1
                unhurried = results[(i, natural)]
                if unhurried.get("tokens"):
                    ratios.append(g["tokens"] / unhurried["tokens"])
        per_budget[str(b)] = {
            "refused_at_request": refused, "valid": valid, "closed_early": closed, "invalid": invalid,
            "failures": failures[:5],
        }  # fmt: skip
    natural_runs = [results[(i, natural)] for i in range(len(chosen))]
    return {
        "schemas": [s for s, _ in chosen],
        "max_tokens": per_budget,
        "baseline_natural": {
            "valid": sum(_valid(g, schema) for g, (_, schema) in zip(natural_runs, chosen, strict=True)),
            "tokens": spread([g.get("tokens", 0) for g in natural_runs]),
        },  # fmt: skip
        "closed_early_length_vs_natural": spread(ratios),
    }


async def main_async(args: argparse.Namespace, url: str, budget: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(args.concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=3600) as client:
        out: dict[str, Any] = {}
        t0 = time.perf_counter()
        parts = set(args.only.split(",")) if args.only else {"free", "readme_json", "schemas"}
        if "free" in parts:
            out["free"] = await free(client, args.model, args.prompts, budget, gate)
            print(json.dumps({"free": out["free"]}), file=sys.stderr, flush=True)  # kept if a later part fails
        if "readme_json" in parts:
            out["readme_json"] = await readme_json(client, args.model, args.json_runs, args.natural, gate)
            print(json.dumps({"readme_json": out["readme_json"]}), file=sys.stderr, flush=True)
        if "schemas" in parts:
            out["schemas"] = await schemas(client, args.model, args.schemas, args.natural, gate)
        out["seconds"] = time.perf_counter() - t0
        return out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.finish", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2:135m")
    p.add_argument("--prompts", type=int, default=40)
    p.add_argument("--json-runs", type=int, default=20)
    p.add_argument("--schemas", type=int, default=12)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--natural", type=int, default=1024, help="max_tokens of the baselines' unhurried answers")
    p.add_argument("--max-tokens", type=int, default=2048, help="the server's default output budget")
    p.add_argument("--only", default="", help="comma-separated parts: free, readme_json, schemas (default: all)")
    p.add_argument(
        "--chat-template",
        default=None,
        help="a Jinja chat template for a model that has none (a base model such as gemma3:270m)",
    )
    args = p.parse_args()
    load = os.getloadavg()
    port = free_port()
    extra = ["-chat-template", str(Path(args.chat_template).absolute())] if args.chat_template else []
    argv = llamay_serve_argv(
        args.model, port, "-max-tokens", str(args.max_tokens), "-concurrency", str(args.concurrency), *extra
    )
    with start_server("llamay", argv, port) as server:
        result = asyncio.run(main_async(args, server.base_url, args.max_tokens))
        warnings = server.log().count("failed to find a memory slot")
    result["memory_slot_warnings"] = warnings
    result["config"] = {
        "model": args.model,
        "default_budget": args.max_tokens,
        "concurrency": args.concurrency,
        "chat_template": args.chat_template,
    }
    result["machine"] = machine_info(load, "the machine was busy: times are slower than on an idle one")
    print_json(result)


if __name__ == "__main__":
    main()
