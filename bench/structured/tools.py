"""bench.structured, part 4: the tool-call round trip with the official openai client (see
bench.structured)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llamay.testing.server import Server

from ..common import percentile
from .common import Issues, RequestFailed, Sizes

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CITIES = ("Paris", "Berlin", "Madrid", "Rome", "Oslo", "Lisbon", "Vienna", "Prague", "Dublin", "Athens")


@dataclass
class Pair:
    first_s: float
    second_s: float
    first_tokens: int
    second_tokens: int
    first_cached: int
    second_cached: int
    final: str  # "content", "tool_calls" or the finish reason

    @property
    def round_trip_s(self) -> float:
        return self.first_s + self.second_s


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _cached(resp: Any) -> int:
    details = getattr(resp.usage, "prompt_tokens_details", None)
    return int(getattr(details, "cached_tokens", 0) or 0)


def _final_kind(resp: Any) -> str:
    choice = resp.choices[0]
    if choice.message.tool_calls:
        return "tool_calls"
    return "content" if choice.message.content else f"empty ({choice.finish_reason})"


def tool_pair(client: Any, city: str, max_tokens: int, *, with_tools: bool) -> Pair:
    """Ask -> tool call -> tool result -> answer. Without tools, the same two requests
    (the same messages, including the call and its result) without `tools`."""
    ask = [{"role": "user", "content": f"What is the weather in {city} in celsius?"}]
    common: dict[str, Any] = {"model": "", "temperature": 0, "max_tokens": max_tokens}
    first_kw: dict[str, Any] = {}
    if with_tools:
        first_kw = {"tools": [WEATHER_TOOL], "tool_choice": "required", "parallel_tool_calls": False}
        first_kw["extra_body"] = {"finish_tool": False}
    r1, t1 = _timed(lambda: client.chat.completions.create(messages=ask, **common, **first_kw))
    calls = r1.choices[0].message.tool_calls
    if with_tools and not calls:
        raise RequestFailed(f"tool_choice required gave no tool call: {r1.model_dump_json()}")
    call_id = calls[0].id if calls else "call_0"
    arguments = calls[0].function.arguments if calls else json.dumps({"city": city, "unit": "celsius"})
    call = {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    result = json.dumps({"city": city, "temperature": 18, "unit": "celsius", "sky": "sunny"})
    history = ask + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]
    second_kw = {"tools": [WEATHER_TOOL], "tool_choice": "auto"} if with_tools else {}
    r2, t2 = _timed(lambda: client.chat.completions.create(messages=history, **common, **second_kw))
    return Pair(
        t1,
        t2,
        r1.usage.completion_tokens,
        r2.usage.completion_tokens,
        _cached(r1),
        _cached(r2),
        _final_kind(r2),
    )


def summarize_pairs(pairs: list[Pair]) -> dict[str, Any]:
    def p50(values: list[float]) -> float:
        return percentile(values, 50)

    finals: dict[str, int] = {}
    for p in pairs:
        finals[p.final] = finals.get(p.final, 0) + 1
    return {
        "runs": len(pairs),
        "round_trip_p50_ms": p50([p.round_trip_s * 1000 for p in pairs]),
        "first_p50_ms": p50([p.first_s * 1000 for p in pairs]),
        "second_p50_ms": p50([p.second_s * 1000 for p in pairs]),
        "first_completion_tokens_p50": p50([float(p.first_tokens) for p in pairs]),
        "second_completion_tokens_p50": p50([float(p.second_tokens) for p in pairs]),
        "first_cached_tokens_p50": p50([float(p.first_cached) for p in pairs]),
        "second_cached_tokens_p50": p50([float(p.second_cached) for p in pairs]),
        "second_answer": finals,
    }


def run_tools(server: Server, sizes: Sizes, issues: Issues) -> dict[str, Any]:
    import openai

    client = openai.OpenAI(base_url=server.base_url + "/v1", api_key="x", max_retries=0, timeout=300)
    out: dict[str, Any] = {}
    for label, with_tools in (("with_tools", True), ("without_tools", False)):
        pairs: list[Pair] = []
        cold = math.nan
        for i in range(sizes.tool_runs + 1):  # run 0 is the cold one (compiles the tool grammar)
            try:
                pair = tool_pair(
                    client, CITIES[i % len(CITIES)], sizes.tool_max_tokens, with_tools=with_tools
                )
            except (RequestFailed, openai.OpenAIError) as exc:
                issues.add(f"tools.{label}", f"{type(exc).__name__}: {exc}", server=server)
                continue
            if i == 0:
                cold = pair.round_trip_s * 1000
            else:
                pairs.append(pair)
        out[label] = {"cold_round_trip_ms": cold, **summarize_pairs(pairs)}
    with_p50 = out["with_tools"]["round_trip_p50_ms"]
    without_p50 = out["without_tools"]["round_trip_p50_ms"]
    out["round_trip_ratio_with_over_without"] = with_p50 / without_p50 if without_p50 > 0 else math.nan
    return out
