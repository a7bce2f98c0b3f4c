"""One model's variants compared: decode speeds, ratios against the targets, draft counts, and
whether llamay's output with speculation is llamay's output without, request for request."""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .servers import Run
from .workloads import Workload

__all__ = ["TARGETS", "compare_model"]

# llamay-on over llamay-off and over llama-server's lookup speculation, single stream; free text
# over llamay-off; 8 streams' aggregate over llamay-off's.
TARGETS = {"copy_on_over_off": 1.8, "copy_on_over_llama_server_spec": 1.2, "free_on_over_off": 0.97}
TARGET_CONCURRENT = 1.0


def _best(run: Run | None, workload: str, key: str = "tok_s") -> float:
    """The best single-stream `key` (decode tok/s, chars/s) of `workload` over the reps; NaN if none."""
    if run is None:
        return math.nan
    reps = run.result.get("single", {}).get(workload, [])
    ok = [r[key] for r in reps if isinstance(r.get(key), float) and not math.isnan(r[key])]
    return max(ok) if ok else math.nan


def _ratio(a: float, b: float) -> float:
    return a / b if b and not (math.isnan(a) or math.isnan(b)) else math.nan


def _target(value: float, target: float) -> dict[str, Any]:
    return {"value": value, "target": target, "met": None if math.isnan(value) else value >= target}


def _first_difference(a: str, b: str) -> dict[str, Any]:
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return {"at_char": at, "off": a[max(0, at - 40) : at + 80], "on": b[max(0, at - 40) : at + 80]}


def _same(reference: Sequence[str], others: Sequence[str]) -> dict[str, Any]:
    """Whether every text of `reference` and `others` is the first of `reference`."""
    texts = [*reference, *others]
    if not reference or not others:
        return {"identical": None, "compared": len(texts)}
    diff = next((t for t in texts if t != texts[0]), None)
    out: dict[str, Any] = {"identical": diff is None, "compared": len(texts)}
    if diff is not None:
        out["first_difference"] = _first_difference(texts[0], diff)
    return out


def _all(verdicts: list[bool | None]) -> bool | None:
    if any(v is False for v in verdicts):
        return False
    return None if any(v is None for v in verdicts) or not verdicts else True


def identity(runs: Mapping[str, Run], loads: Sequence[Workload]) -> dict[str, Any]:
    """llamay off against on, every single-stream rep of every workload and every concurrent
    stream; batched against single and llama-server's own spec/plain pair, for information."""
    off, on = runs.get("llamay_off"), runs.get("llamay_on")
    single = {
        w.name: _same(off.texts.get(w.name, []) if off else [], on.texts.get(w.name, []) if on else [])
        for w in loads
    }
    conc: dict[str, Any] = {"identical": None}
    if off and on and off.concurrent_texts and on.concurrent_texts:
        pairs = list(zip(off.concurrent_texts, on.concurrent_texts, strict=True))
        bad = [i for i, (a, b) in enumerate(pairs) if a != b]
        conc = {"identical": not bad, "compared": len(pairs), "differing_streams": bad}
        if bad:
            conc["first_difference"] = _first_difference(*pairs[bad[0]])
    verdicts = [s["identical"] for s in single.values()] + [conc["identical"]]
    out: dict[str, Any] = {"single_stream": single, "concurrent": conc}
    draft = runs.get("llamay_on_draft")
    if draft is not None:  # speculation with a draft model must not change a token either
        out["single_stream_draft_model"] = {
            w.name: _same(off.texts.get(w.name, []) if off else [], draft.texts.get(w.name, []))
            for w in loads
        }
        verdicts += [s["identical"] for s in out["single_stream_draft_model"].values()]
    verdict = out["all"] = _all(verdicts)
    if verdict is False:
        print(f"bench.speculative: OUTPUT DIFFERS with speculation on: {out}", file=sys.stderr, flush=True)
    out["info_batched_equals_single"] = {
        name: _batched_equals_single(runs.get(name), loads) for name in ("llamay_off", "llamay_on")
    }
    ls_spec, ls = runs.get("llama_server_spec"), runs.get("llama_server")
    if ls_spec and ls:
        out["info_llama_server_spec_equals_plain"] = {
            w.name: _same(ls.texts.get(w.name, []), ls_spec.texts.get(w.name, []))["identical"] for w in loads
        }
    return out


def _batched_equals_single(run: Run | None, loads: Sequence[Workload]) -> bool | None:
    if run is None or not run.concurrent_texts:
        return None
    names = [loads[i % len(loads)].name for i in range(len(run.concurrent_texts))]
    return all(run.texts.get(n, [None])[0] == t for n, t in zip(names, run.concurrent_texts, strict=True))


def _drafts(runs: Mapping[str, Run], loads: Sequence[Workload]) -> dict[str, Any]:
    """Drafted and accepted tokens per workload, summed over reps: llamay's from /v1/stats
    deltas, llama-server's from the timings of its final chunk."""
    out: dict[str, Any] = {}
    for name, run in runs.items():
        per: dict[str, Any] = {}
        for w in loads:
            reps = run.result.get("single", {}).get(w.name, [])
            if name.startswith("llamay"):
                d = sum(r.get("stats", {}).get("draft_tokens", 0) for r in reps)
                a = sum(r.get("stats", {}).get("draft_accepted_tokens", 0) for r in reps)
                steps = sum(r.get("stats", {}).get("decode_steps", 0) for r in reps)
            else:
                d = sum(r.get("server_timings", {}).get("draft_n", 0) for r in reps)
                a = sum(r.get("server_timings", {}).get("draft_n_accepted", 0) for r in reps)
                steps = None
            toks = sum(r.get("completion_tokens", 0) for r in reps)
            per[w.name] = {
                "draft_tokens": d,
                "draft_accepted_tokens": a,
                "acceptance": a / d if d else None,
                "completion_tokens": toks,
                "decode_steps": steps,
            }
        conc = run.result.get("concurrent", {}).get("stats")
        if conc:
            per["concurrent"] = conc
        out[name] = per
    return out


def compare_model(runs: Mapping[str, Run], loads: Sequence[Workload]) -> dict[str, Any]:
    """Speeds, ratios, targets, draft counts and identity for one model's runs."""
    speeds = {name: {w.name: _best(run, w.name) for w in loads} for name, run in runs.items()}
    chars = {name: {w.name: _best(run, w.name, "chars_s") for w in loads} for name, run in runs.items()}
    off, on = speeds.get("llamay_off", {}), speeds.get("llamay_on", {})
    spec, plain = speeds.get("llama_server_spec", {}), speeds.get("llama_server", {})
    nan = math.nan
    ratios: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    for w in loads:
        r = {
            "llamay_on_over_off": _ratio(on.get(w.name, nan), off.get(w.name, nan)),
            "llamay_on_over_llama_server_spec": _ratio(on.get(w.name, nan), spec.get(w.name, nan)),
            "llama_server_spec_over_plain": _ratio(spec.get(w.name, nan), plain.get(w.name, nan)),
            "llamay_off_over_llama_server_plain": _ratio(off.get(w.name, nan), plain.get(w.name, nan)),
            "llamay_on_draft_over_llama_server_draft": _ratio(
                speeds.get("llamay_on_draft", {}).get(w.name, nan),
                speeds.get("llama_server_draft", {}).get(w.name, nan),
            ),
            "llamay_on_over_llama_server_spec_chars": _ratio(
                chars.get("llamay_on", {}).get(w.name, nan),
                chars.get("llama_server_spec", {}).get(w.name, nan),
            ),
        }
        ratios[w.name] = r
        if w.copies:
            targets[f"{w.name}_on_over_off"] = _target(r["llamay_on_over_off"], TARGETS["copy_on_over_off"])
            targets[f"{w.name}_on_over_llama_server_spec"] = _target(
                r["llamay_on_over_llama_server_spec"], TARGETS["copy_on_over_llama_server_spec"]
            )
        else:
            targets[f"{w.name}_on_over_off"] = _target(r["llamay_on_over_off"], TARGETS["free_on_over_off"])
    agg = {
        name: runs[name].result.get("concurrent", {}).get("aggregate_tok_s")
        for name in ("llamay_off", "llamay_on")
        if name in runs
    }
    a_on, a_off = agg.get("llamay_on"), agg.get("llamay_off")
    conc_ratio = _ratio(float(a_on), float(a_off)) if a_on and a_off else nan
    ratios["concurrent_aggregate_on_over_off"] = conc_ratio
    targets["concurrent_aggregate_on_over_off"] = _target(conc_ratio, TARGET_CONCURRENT)
    same = identity(runs, loads)
    targets["output_identical"] = {"value": same["all"], "target": True, "met": same["all"]}
    return {
        "decode_tok_s": speeds,
        "decode_chars_s": chars,
        "concurrent_aggregate_tok_s": agg,
        "ratios": ratios,
        "targets": targets,
        "drafts": _drafts(runs, loads),
        "identical": same,
    }
