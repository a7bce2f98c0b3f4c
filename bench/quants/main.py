"""Speed per quantisation: llamay against llama.cpp's own `llama-server`, same run, on
Llama-3.2-shaped random-weight models in the quantisations people download.

    .venv/bin/python -m bench.quants [--shapes 1b,3b] [--quants Q4_0,Q4_K_M,...] [--anchor-runs 3]
    .venv/bin/python -m bench.quants --phases decode --llamay-runs 3 --nospec-runs 3   # decode only
    .venv/bin/python -m bench.quants --default-model --quants ""   # llamay's default model only

For each shape and quantisation (models.py writes and quantises them once, cached), runs the
serving benchmark's decode (single stream), prefill (1,000-token prompts) and prompt-heavy
workload (16 distinct 500-token prompts from 8 clients, 8 tokens out) on llama-server and on
llamay, interleaved (llama-server, llamay, llama-server, ...): llama-server's speed moves by up to
2x from run to run on a shared machine, so llamay is compared with its best run. llamay decodes
with its default prompt-lookup speculation, which random weights, repeating themselves, reward
more than real text would; so each model also gets `--nospec-runs` llamay runs with speculation
off (decode only), judged on the same decode targets. Beside each
decode figure, the memory-bandwidth limit: the machine's read bandwidth (bandwidth.py, measured
in the same run) over the bytes of weights a decoded token reads. `--default-model` adds llamay's
default model (a real one) with its own targets. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from llamay.testing.server import free_port

from ..common import machine_info, print_json, stop_on_sigterm
from ..serve import llama_server
from ..serve.load import Prompts, Vocab
from ..serve.main import bench_server, llama_server_spec, llamay_spec
from ..serve.phases import Sizes
from .bandwidth import read_bandwidth
from .models import SHAPES, bytes_per_token, ensure_models

QUANTS = ("Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0")
HEAVY = "prompt_heavy_500_c8"
PHASES = frozenset({"decode", "prefill", HEAVY})
SIZES = Sizes(
    prefill_reps=3,
    decode_tokens=128,
    decode_reps=3,
    heavy_prompts=(500,),
    heavy_clients=(8,),
    heavy_requests=16,
)
# llamay over llama-server's best run (times: its best over llamay's), and decode over the limit.
TARGETS = {
    "decode_ratio": 1.0,
    "decode_of_limit": 0.6,
    "decode_nospec_ratio": 1.0,
    "decode_nospec_of_limit": 0.6,
    "prefill_ratio": 1.2,
    "prompt_heavy_c8_ratio": 1.2,
}
# llamay's default model: decode and the 8-client prompts; the other figures are reported only.
DEFAULT_TARGETS = {"decode_ratio": 1.1, "decode_nospec_ratio": 1.1, "prompt_heavy_c8_ratio": 1.2}
NOSPEC = "llamay_nospec"  # llamay with speculation off, decode only
NOSPEC_ARGS = ["-speculate", "off"]  # its extra serve arguments
BUSY = "other processes were using the CPUs: every figure is distorted by contention"


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The options every quantisation benchmark takes: which models, and the servers' settings."""
    p.add_argument("--shapes", default="1b", help=f"comma-separated, of {', '.join(SHAPES)} (default 1b)")
    p.add_argument("--quants", default=",".join(QUANTS), help="comma-separated quantisations")
    p.add_argument("--threads", type=int, default=2, help="CPU threads for every server (default 2)")
    p.add_argument("--ctx", type=int, default=16384, help="KV cells for every server (default 16384)")
    p.add_argument("--parallel", type=int, default=8, help="llama-server's slots (-np; default 8)")
    p.add_argument("--batch", type=int, default=512, help="llamay's batch (default 512)")


def model_lists(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Set `args.shape_list` and `args.quant_list` from add_model_args' options; an unknown
    shape is a usage error."""
    args.shape_list = [s for s in args.shapes.split(",") if s]
    args.quant_list = [q for q in args.quants.split(",") if q]
    unknown = [s for s in args.shape_list if s not in SHAPES]
    if unknown:
        p.error(f"unknown shape {unknown[0]!r} (known: {', '.join(SHAPES)})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.quants", description=__doc__.split("\n\n")[0])
    add_model_args(p)
    p.add_argument("--anchor-runs", type=int, default=3, help="llama-server runs per model (default 3)")
    p.add_argument("--llamay-runs", type=int, default=1, help="llamay runs per model (default 1)")
    p.add_argument(
        "--nospec-runs", type=int, default=1, help="llamay runs with speculation off, decode only (default 1)"
    )
    p.add_argument(
        "--phases", default=",".join(sorted(PHASES)), help="comma-separated, of " + ", ".join(sorted(PHASES))
    )
    p.add_argument("--default-model", action="store_true", help="also llamay's default model, own targets")
    args = p.parse_args(argv)
    model_lists(p, args)
    args.phase_set = frozenset(x for x in args.phases.split(",") if x)
    if not args.phase_set or not args.phase_set <= PHASES:
        p.error(f"--phases takes some of {', '.join(sorted(PHASES))} (got {args.phases!r})")
    return args


def run_order(anchor_runs: int, llamay_runs: int, nospec_runs: int = 0) -> list[str]:
    """llama-server, llamay and llamay without speculation in turn, llama-server first, the
    rest of any at the end."""
    order: list[str] = []
    for i in range(max(anchor_runs, llamay_runs, nospec_runs)):
        order += ["llama_server"] * (i < anchor_runs) + ["llamay"] * (i < llamay_runs)
        order += [NOSPEC] * (i < nospec_runs)
    return order


def _figure(result: Mapping[str, Any], phase: str, key: str) -> float:
    value = result.get(phase, {}).get(key) if isinstance(result.get(phase), Mapping) else None
    return float(value) if isinstance(value, int | float) else math.nan


def best(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Each figure's best over `runs` (highest rate, shortest wall time), NaN if none has it."""

    def pick(values: list[float], higher: bool) -> float:
        ok = [v for v in values if not math.isnan(v)]
        return (max(ok) if higher else min(ok)) if ok else math.nan

    return {
        "decode_tok_s": pick([_figure(r, "decode", "tok_s") for r in runs], True),
        "prefill_tok_s": pick([_figure(r, "prefill", "tok_s") for r in runs], True),
        f"{HEAVY}_wall_s": pick([_figure(r, HEAVY, "wall_s") for r in runs], False),
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b and not (math.isnan(a) or math.isnan(b)) else math.nan


def compare(
    mine: Mapping[str, float],
    anchor: Mapping[str, float],
    limit: float,
    targets: Mapping[str, float] = TARGETS,
    nospec: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """llamay's best against llama-server's best (> 1: llamay ahead) and the decode limit, for
    `mine` and for `nospec` (llamay's bests with speculation off; its figures NaN when not
    given); a figure without a target in `targets` has "target" and "met" None."""
    nospec_decode = nospec["decode_tok_s"] if nospec is not None else math.nan
    values = {
        "decode_ratio": _ratio(mine["decode_tok_s"], anchor["decode_tok_s"]),
        "decode_of_limit": _ratio(mine["decode_tok_s"], limit),
        "decode_nospec_ratio": _ratio(nospec_decode, anchor["decode_tok_s"]),
        "decode_nospec_of_limit": _ratio(nospec_decode, limit),
        "prefill_ratio": _ratio(mine["prefill_tok_s"], anchor["prefill_tok_s"]),
        "prompt_heavy_c8_ratio": _ratio(anchor[f"{HEAVY}_wall_s"], mine[f"{HEAVY}_wall_s"]),
    }
    out: dict[str, Any] = {}
    for k, v in values.items():
        target = targets.get(k)
        met = None if target is None or math.isnan(v) else v >= target
        out[k] = {"value": v, "target": target, "met": met}
    return out


def bench_model(
    args: argparse.Namespace,
    model: Path,
    exe: Path,
    bandwidth: float,
    targets: Mapping[str, float] = TARGETS,
) -> dict[str, Any]:
    """Every run on one model file, their bests, and the comparison."""
    n_bytes = bytes_per_token(model)
    limit = bandwidth / n_bytes
    runs: dict[str, list[dict[str, Any]]] = {"llama_server": [], "llamay": [], NOSPEC: []}
    vocab = Vocab(model)
    try:
        banned, prompts = vocab.eog_ids(), Prompts(vocab)
        for name in run_order(args.anchor_runs, args.llamay_runs, args.nospec_runs):
            port = free_port()
            phases = args.phase_set
            if name == "llamay":
                spec = llamay_spec("llamay", model, port, args, {})
            elif name == NOSPEC:
                spec = llamay_spec(NOSPEC, model, port, args, {}, NOSPEC_ARGS)
                phases = frozenset({"decode"})
            else:
                spec = llama_server_spec(exe, model, port, args)
            result: dict[str, Any] = {"started": time.strftime("%H:%M:%S")}
            bench_server(spec, port, SIZES, prompts, banned, result, phases)
            runs[name].append(result)
    finally:
        vocab.close()
    bests = {name: best(got) for name, got in runs.items()}
    nospec = bests[NOSPEC] if runs[NOSPEC] else None
    return {
        "file": str(model),
        "file_bytes": model.stat().st_size,
        "weight_bytes_per_token": n_bytes,
        "decode_limit_tok_s": limit,
        "best": bests,
        "llamay_vs_llama_server": compare(bests["llamay"], bests["llama_server"], limit, targets, nospec),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stop_on_sigterm()  # stop the servers and report, as on Ctrl-C
    load_start = os.getloadavg()
    exe = llama_server.build()
    files = {shape: ensure_models(shape, args.quant_list) for shape in args.shape_list}
    files = {shape: paths for shape, paths in files.items() if paths}
    bandwidth = read_bandwidth(threads=args.threads)
    report: dict[str, Any] = {
        "benchmark": "quants",
        "settings": {
            "threads": args.threads,
            "ctx": args.ctx,
            "parallel": args.parallel,
            "batch": args.batch,
            "order": run_order(args.anchor_runs, args.llamay_runs, args.nospec_runs),
            "phases": sorted(args.phase_set),
            "sizes": asdict(SIZES),
        },
        "bandwidth": bandwidth,
        "models": {},
        "interrupted": False,
    }
    try:
        for shape, paths in files.items():
            for quant, path in paths.items():
                print(f"bench.quants: {shape} {quant}", file=sys.stderr, flush=True)
                got = bench_model(args, path, exe, bandwidth["read_gb_s"] * 1e9)
                report["models"].setdefault(shape, {})[quant] = got
        if args.default_model:
            from llamay.store import ModelStore

            found = ModelStore().resolve(None)
            print(f"bench.quants: default model {found.name}", file=sys.stderr, flush=True)
            got = bench_model(args, found.path, exe, bandwidth["read_gb_s"] * 1e9, DEFAULT_TARGETS)
            report["models"]["default"] = {found.name: got}
    except KeyboardInterrupt:
        report["interrupted"] = True
    report["bandwidth_end"] = read_bandwidth(threads=args.threads)
    report["machine"] = machine_info(load_start, BUSY)
    print_json(report)
    failed = report["interrupted"] or any(
        "error" in run for shape in report["models"].values() for m in shape.values()
        for got in m["runs"].values() for run in got
    )  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
