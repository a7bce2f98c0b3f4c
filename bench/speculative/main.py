"""Speculative decoding: llamay with it against llamay without it and against llama-server's
own speculation, same run, same prompts.

    .venv/bin/python -m bench.speculative [--quick] [--models default,1b] [--draft [MODEL=]PATH]

For each model (the default model, a trained one; the 1B-shaped random-weight Q4_K_M model of
bench.quants, whose copying a grammar forces), runs four workloads (extraction from a discharge
note into a JSON schema, quoting a retrieved passage, rewriting a 300-line file with one change,
free text) single-stream on llamay `-speculate off`, llamay `-speculate on`, llama-server with
n-gram lookup speculation and llama-server without (not with --quick), then 8 concurrent streams
on llamay off and on. Prints one JSON object: decode tok/s (client-side: tokens after the first
over the time from the first to the last), the ratios and the targets they are held to, drafted
and accepted counts (/v1/stats deltas; llama-server's from its timings), and whether llamay's
output with speculation is identical to its output without, for every request (it must be; a
difference is printed to stderr and makes the exit status 1).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from llamay.store import ModelStore

from ..common import machine_info, print_json, stop_on_sigterm
from ..quants.models import ensure_models
from ..serve import llama_server
from ..serve.load import Vocab
from .compare import compare_model
from .servers import Run, llamay_has_draft, run_variant, variants
from .workloads import FORCING, workloads

BUSY = "other processes were using the CPUs: every figure is distorted by contention"
MODELS = ("default", "1b")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.speculative", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="128 tokens, one rep, no plain llama-server")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per request (default 256; quick 128)")
    p.add_argument("--reps", type=int, default=None, help="single-stream runs of each workload (default 1)")
    p.add_argument(
        "--streams", type=int, default=8, help="concurrent streams on llamay off and on (default 8)"
    )
    p.add_argument(
        "--draft-max", type=int, default=8, help="drafts per step at most, both servers (default 8)"
    )
    p.add_argument("--threads", type=int, default=2, help="CPU threads for every server (default 2)")
    p.add_argument("--ctx", type=int, default=16384, help="KV cells for every server (default 16384)")
    p.add_argument(
        "--draft",
        action="append",
        default=[],
        metavar="[MODEL=]PATH",
        help="a draft model sharing MODEL's tokenizer (MODEL: default or 1b; default: default), "
        "loaded by both servers; repeatable",
    )
    args = p.parse_args(argv)
    args.model_list = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.model_list if m not in MODELS]
    if unknown:
        p.error(f"unknown model {unknown[0]!r} (known: {', '.join(MODELS)})")
    args.max_tokens = args.max_tokens or (128 if args.quick else 256)
    args.reps = args.reps or 1
    args.drafts = {}
    for item in args.draft:
        key, sep, path = item.partition("=")
        key, path = (key, path) if sep and key in MODELS else ("default", item)
        if not Path(path).is_file():
            p.error(f"--draft {item}: no such file")
        args.drafts[key] = Path(path)
    return args


def model_path(key: str) -> Path:
    if key == "default":
        return Path(ModelStore().resolve(None).path)
    return ensure_models("1b", ["Q4_K_M"])["Q4_K_M"]


def bench_model(key: str, args: argparse.Namespace, llamay_draft: bool) -> dict[str, Any]:
    """Every variant on one model, then the comparison."""
    path = model_path(key)
    trained = key == "default"
    vocab = Vocab(path)
    try:
        loads = workloads(trained, args.max_tokens, vocab.eog_ids(), vocab.count)
    finally:
        vocab.close()
    draft = args.drafts.get(key)
    runs: dict[str, Run] = {}
    for v in variants(args.draft_max, not args.quick, draft, llamay_draft):
        runs[v.name] = run_variant(v, path, loads, args)
    out: dict[str, Any] = {
        "file": str(path),
        "requests": "chat, copying of the model's own accord" if trained else "completions",
        "forcing": None if trained else FORCING,
        "draft_model": _draft_note(draft, llamay_draft),
        **compare_model(runs, loads),
        "runs": {name: r.result for name, r in runs.items()},
    }
    return out


def _draft_note(draft: Path | None, llamay_draft: bool) -> dict[str, Any]:
    if draft is None:
        return {"skipped": "no --draft given for this model"}
    if not llamay_draft:
        return {"path": str(draft), "skipped_llamay": "this llamay serve takes no -draft; llama-server only"}
    return {"path": str(draft)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()  # stop the servers and report, as on Ctrl-C
    load_start = os.getloadavg()
    llama_server.build()
    llamay_draft = bool(args.drafts) and llamay_has_draft()
    report: dict[str, Any] = {
        "benchmark": "speculative",
        "settings": {
            "quick": args.quick,
            "max_tokens": args.max_tokens,
            "reps": args.reps,
            "streams": args.streams,
            "draft_max": args.draft_max,
            "threads": args.threads,
            "ctx": args.ctx,
            "sampling": "greedy (temperature 0), no penalties",
            "decode_tok_s": "client-side: completion tokens after the first / (last text chunk - first)",
            "best_of_reps": "each single-stream figure is the best of its reps",
        },
        "models": {},
        "interrupted": False,
    }
    try:
        for key in args.model_list:
            report["models"][key] = bench_model(key, args, llamay_draft)
    except KeyboardInterrupt:
        report["interrupted"] = True
    report["machine"] = machine_info(load_start, BUSY)
    models = report["models"].values()
    verdicts = [m["identical"]["all"] for m in models]
    report["identical_everywhere"] = (
        False if False in verdicts else None if None in verdicts or not verdicts else True
    )
    report["all_targets_met"] = _all_met(report)
    print_json(report)
    differs = report["identical_everywhere"] is False
    failed = report["interrupted"] or any("error" in r for m in models for r in m["runs"].values())
    return 1 if differs or failed else 0


def _all_met(report: dict[str, Any]) -> bool | None:
    verdicts = [t["met"] for m in report["models"].values() for t in m["targets"].values()]
    if not verdicts or any(v is None for v in verdicts):
        return None
    return all(verdicts)


if __name__ == "__main__":
    sys.exit(main())
