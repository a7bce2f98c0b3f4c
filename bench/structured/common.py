"""What every part of bench.structured shares: the prompt and schema, run sizes, the issue list,
and how the decode parts turn timed generations into speeds and ratios."""

from __future__ import annotations

import math
import os
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from llamay.testing.server import Server, log_tail

from ..common import percentile

PROMPT = (
    "List 30 famous cities of the world as JSON. For each city give its name, its country "
    "and one interesting fact about it in a full sentence."
)
FACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cities": {
            "type": "array",
            "minItems": 3,
            "maxItems": 40,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 40},
                    "country": {"type": "string", "maxLength": 40},
                    "fact": {"type": "string", "maxLength": 200},
                },
                "required": ["name", "country", "fact"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["cities"],
    "additionalProperties": False,
}


@dataclass(frozen=True)
class Sizes:
    """How much of each measurement to run."""

    max_tokens: int = 128
    decode_reps: int = 15  # per part (HTTP, engine): each rep generates once per arm
    run_reps: int = 3
    mask_passes: int = 5
    compile_file_step: int = 1  # every n-th conformance file
    tool_runs: int = 10
    tool_max_tokens: int = 128
    coverage_every: int = 1  # every n-th real-world schema and suite group


FULL = Sizes()
QUICK = Sizes(
    max_tokens=128,
    decode_reps=2,
    run_reps=1,
    mask_passes=2,
    compile_file_step=8,
    tool_runs=1,
    tool_max_tokens=48,
    coverage_every=8,
)


@dataclass
class Issues:
    """Everything llamay got wrong during the run, reported rather than worked around."""

    items: list[dict[str, Any]] = field(default_factory=list)

    def add(self, where: str, detail: str, *, server: Server | None = None, **extra: Any) -> None:
        item: dict[str, Any] = {"where": where, "detail": detail[:4000], **extra}
        if server is not None:
            item["server_log_tail"] = log_tail(server.log_path, 25)
        self.items.append(item)
        print(f"[structured] issue in {where}: {detail[:300]}", file=sys.stderr, flush=True)


def say(message: str) -> None:
    print(f"[structured] {message}", file=sys.stderr, flush=True)


class RequestFailed(RuntimeError):
    pass


def finite_median(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def safe_ratio(num: float, den: float) -> float:
    return num / den if den > 0 and math.isfinite(num) else math.nan


def ms_stats(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000.0 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "mean_ms": statistics.fmean(ms) if ms else math.nan,
        "max_ms": max(ms) if ms else math.nan,
    }


TARGET_RATIO = 0.97
TRIM = 0.1  # share of a generation's token gaps dropped at each end for the trimmed figure
ARMS = ("unconstrained", "constrained", "constrained_no_ngram")


def arm_order(rep: int) -> tuple[str, ...]:
    """The arms' order in repetition `rep`: forwards, then backwards, so the constrained arm
    always runs right next to the unconstrained one it is paired with, and a drift in
    the machine's speed favours neither side over two reps."""
    return ARMS if rep % 2 == 0 else ARMS[::-1]


def trimmed_mean(values: list[float], trim: float = TRIM) -> float:
    finite = sorted(v for v in values if math.isfinite(v))
    cut = int(len(finite) * trim)
    kept = finite[cut : len(finite) - cut]
    return statistics.fmean(kept) if kept else math.nan


@dataclass
class TokenTiming:
    """One timed generation: `seconds` from its first token to its finish, `gaps` between
    consecutive tokens, and (from the engine) the constraint's share."""

    arm: str
    tokens: int
    seconds: float
    gaps: list[float]
    mask_steps: int = 0
    mask_seconds: float = 0.0
    stamped: bool = False  # gaps stamped where the tokens are made (none merged in transit)
    made: tuple[int, ...] = ()  # the tokens, when known

    @property
    def per_token(self) -> float:
        """Seconds per token after the first (whose time belongs to the prompt)."""
        if self.tokens < 2 or not self.seconds > 0:
            return math.nan
        return self.seconds / (self.tokens - 1)

    @property
    def per_token_trimmed(self) -> float:
        """The mean gap between tokens without the TRIM slowest and fastest: blind to the
        odd preemption by another process."""
        return trimmed_mean(self.gaps)


def _quartiles(values: list[float]) -> list[float]:
    finite = sorted(v for v in values if math.isfinite(v))
    if len(finite) < 2:
        return finite * 2
    q = statistics.quantiles(finite, n=4, method="inclusive")
    return [q[0], q[2]]


def token_floor(timings: list[TokenTiming]) -> float:
    """Seconds per token, each token position at its fastest over the repetitions.

    Greedy generations of one arm make the same tokens every time, so position i costs
    the same work in each; another process on the machine can only add to it. Summing
    every position's least disturbed time gives the arm's own cost per token, including
    whatever it spends at some positions only (the mask is harder at some than others)."""
    if not all(t.stamped for t in timings):
        return math.nan
    # Only repetitions that made the same tokens are comparable position by position:
    # those that made the most common output.
    common, _ = Counter(t.made for t in timings).most_common(1)[0] if timings else ((), 0)
    timings = [t for t in timings if t.made == common]
    if len(timings) < 2:
        return math.nan
    n = min(len(t.gaps) for t in timings)
    if n == 0:
        return math.nan
    return sum(min(t.gaps[i] for t in timings) for i in range(n)) / n


def summarize_timings(reps: list[dict[str, TokenTiming]]) -> dict[str, Any]:
    """Speeds per arm and each arm's ratio to the unconstrained one.

    `ratio` is the median over repetitions of constrained speed / unconstrained speed
    within the repetition (the two ran back to back, so a slower or busier stretch of
    the machine slows both): each speed is the whole generation's, every token counted.
    `ratio_trimmed` pairs the trimmed per-token speeds the same way; `ratio_of_medians`
    is the ratio of the arms' median speeds. With gaps stamped where the tokens are made,
    `ratio_token_floor` compares the arms' `token_floor`s, the figure least moved by the
    rest of the machine, and `meets_target` is judged on it; otherwise on `ratio`."""

    def per_arm(metric: str) -> dict[str, list[float]]:
        return {arm: [getattr(r[arm], metric) for r in reps if arm in r] for arm in ARMS}

    def paired(metric: str, arm: str) -> list[float]:
        return [
            safe_ratio(getattr(r["unconstrained"], metric), getattr(r[arm], metric))
            for r in reps
            if arm in r and "unconstrained" in r
        ]

    whole = per_arm("per_token")
    med = {arm: finite_median(v) for arm, v in whole.items()}
    ratios = paired("per_token", "constrained")
    ratio = finite_median(ratios)
    floor = {arm: token_floor([r[arm] for r in reps if arm in r]) for arm in ARMS}
    floor_ratio = safe_ratio(floor["unconstrained"], floor["constrained"])
    judged_on = "ratio_token_floor" if math.isfinite(floor_ratio) else "ratio"
    judged = floor_ratio if math.isfinite(floor_ratio) else ratio
    out: dict[str, Any] = {
        "ratio": ratio,
        "ratio_token_floor": floor_ratio,
        "target_ratio": TARGET_RATIO,
        "meets_target": bool(judged >= TARGET_RATIO),
        "judged_on": judged_on,
        "ratio_quartiles": _quartiles(ratios),
        "ratio_token_floor_no_ngram": safe_ratio(floor["unconstrained"], floor["constrained_no_ngram"]),
        "ratio_trimmed": finite_median(paired("per_token_trimmed", "constrained")),
        "ratio_of_medians": safe_ratio(med["unconstrained"], med["constrained"]),
        "ratio_no_ngram": finite_median(paired("per_token", "constrained_no_ngram")),
        "tok_s": {arm: _speed(v) for arm, v in med.items()},
        "tok_s_trimmed": {arm: _speed(finite_median(v)) for arm, v in per_arm("per_token_trimmed").items()},
        "tok_s_token_floor": {arm: _speed(v) for arm, v in floor.items()},
        "reps": len(reps),
        "ratio_all": [round(r, 4) for r in ratios],
        "tok_s_all": {arm: [_speed(v) for v in vs] for arm, vs in whole.items()},
    }
    steps = sum(r[a].mask_steps for r in reps for a in r)
    if steps:
        mask = sum(r[a].mask_seconds for r in reps for a in r)
        spent = sum(r[a].seconds for r in reps for a in r if r[a].mask_steps)
        out["mask_ms_per_step"] = round(1000.0 * mask / steps, 4)
        out["mask_share_pct"] = round(100.0 * mask / spent, 2) if spent > 0 else math.nan
    return out


def load_average() -> float:
    """The machine's 1-minute load average, reported next to the speeds: on a machine
    busy with other work every figure is slower and noisier, and the ratio less certain."""
    return round(os.getloadavg()[0], 2)


def _speed(seconds_per_token: float) -> float:
    return round(1.0 / seconds_per_token, 2) if seconds_per_token > 0 else math.nan
