"""Shared helpers for benchmarks: server-sent events, percentiles, machine load, JSON output.
Server processes are started by `llamay.testing.server`, the launcher the tests use too."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import sys
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

__all__ = [
    "DONE",
    "BadEvent",
    "all_or_first_failure",
    "cpu_info",
    "machine_info",
    "percentile",
    "print_json",
    "sentences",
    "sse_data",
    "sse_event",
    "stop_on_sigterm",
]

DONE = "[DONE]"
"""The data of the event that ends an OpenAI stream."""


class BadEvent(ValueError):
    """A server-sent event whose data is not a JSON object (`problem` "malformed event"), or
    one that reports an error ("error in stream"); `data` is what it carried."""

    def __init__(self, problem: str, data: str) -> None:
        super().__init__(f"{problem}: {data[:300]}")
        self.problem = problem
        self.data = data


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def stop_on_sigterm() -> None:
    """SIGTERM is handled as Ctrl-C: a benchmark stops its servers and reports what it has."""
    signal.signal(signal.SIGTERM, _interrupt)


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation between closest ranks; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (rank - lo)


def sse_data(line: str) -> str | None:
    """The payload of a server-sent events `data:` line, stripped; None for any other line
    (blank separators, `event:` lines, comments such as keep-alive pings)."""
    return line[5:].strip() if line.startswith("data:") else None


def sse_event(data: str) -> dict[str, Any]:
    """The JSON object an event's data carries (OpenAI, Anthropic). Raises BadEvent when it is
    not a JSON object, or when it reports an error: an `error` member (OpenAI) or an event of
    type "error" (Anthropic)."""
    try:
        event = json.loads(data)
    except ValueError:
        raise BadEvent("malformed event", data) from None
    if not isinstance(event, dict):
        raise BadEvent("malformed event", data)
    if "error" in event or event.get("type") == "error":
        raise BadEvent("error in stream", data)
    return event


# The x86 extensions llama.cpp's CPU kernels (and native/'s) choose between: the same model file
# runs different kernels, at different speeds, on a machine with another set.
SIMD_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "avx512_bf16")


def cpu_info(cpuinfo: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The first CPU's model name and which of SIMD_FLAGS it has, read from `cpuinfo`; empty
    where the file is missing or unreadable (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block ends
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"model": fields.get("model name", ""), "simd": [f for f in SIMD_FLAGS if f in flags]}


def machine_info(load_start: tuple[float, float, float], busy_warning: str) -> dict[str, Any]:
    """CPU count, model and SIMD extensions (cpu_info), and load averages (os.getloadavg() taken
    at the start, and now), with `busy_warning` under "warning" when other processes kept over
    half the CPUs busy at the start."""
    cpus = os.cpu_count() or 1
    info: dict[str, Any] = {"cpus": cpus, "cpu": cpu_info(), "loadavg_start": load_start, "loadavg_end": os.getloadavg()}
    if load_start[0] > 0.5 * cpus:
        info["warning"] = busy_warning
    return info


def _finite(obj: Any) -> Any:
    """Replace NaN/inf (not valid JSON) with None, recursively."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def print_json(obj: Any) -> None:
    """Print `obj` to stdout as one indented, strictly valid JSON object."""
    json.dump(_finite(obj), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
    sys.stdout.flush()


T = TypeVar("T")


async def all_or_first_failure(coros: list[Coroutine[Any, Any, T]], failure: type[Exception]) -> list[T]:
    """Run `coros` concurrently; on the first `failure` (a benchmark's failed-request error)
    cancel the rest, closing their streams, and raise it. Any other error is raised as the
    task group raised it."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(c) for c in coros]
    except ExceptionGroup as eg:
        failures = [e for e in eg.exceptions if isinstance(e, failure)]
        if failures:
            raise failures[0] from None
        raise
    return [t.result() for t in tasks]


def sentences(words: list[str]) -> str:
    """Words as sentences of 12: capitalized, with full stops."""
    parts = []
    for i in range(0, len(words), 12):
        chunk = words[i : i + 12]
        parts.append(" ".join([chunk[0].capitalize(), *chunk[1:]]) + ".")
    return " ".join(parts)
