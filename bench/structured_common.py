"""What every part of bench.structured shares: the prompt and schema, run sizes, the issue list."""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass, field
from typing import Any

from .common import Server, log_tail, percentile

PROMPT = (
    "List 30 famous cities of the world as JSON. For each city give its name, its country "
    "and one interesting fact about it in a full sentence."
)
FACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cities": {
            "type": "array",
            "minItems": 30,
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
    decode_reps: int = 9
    run_reps: int = 3
    mask_passes: int = 5
    compile_file_step: int = 1  # every n-th conformance file
    tool_runs: int = 10
    tool_max_tokens: int = 128
    coverage_every: int = 1  # every n-th real-world schema and suite group


FULL = Sizes()
QUICK = Sizes(
    max_tokens=32,
    decode_reps=1,
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
