"""Prompt caching in Anthropic's terms, on top of the automatic prefix cache.

Clients mark `cache_control` breakpoints on blocks (tools, then system, then messages);
the engine caches every prefix anyway. What the breakpoints change is the usage report:
`cache_creation_input_tokens` counts the prompt tokens up to the last breakpoint that were
not read from the cache. A top-level `cache_control` puts the breakpoint on the last block
of the last message (Anthropic's automatic caching).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import InvalidRequest
from .content import Spot, block_list, check_cache_control

__all__ = ["MAX_BREAKPOINTS", "last_breakpoint"]

MAX_BREAKPOINTS = 4


def _marked(item: Any, where: str) -> bool:
    return isinstance(item, Mapping) and check_cache_control(
        item.get("cache_control"), f"{where}.cache_control"
    )


def last_breakpoint(tools: Any, system: Any, messages: list[Any], top: Any) -> Spot | None:
    """The last block carrying a breakpoint, in prompt order (None without any). Raises
    InvalidRequest for a malformed `cache_control` or more than MAX_BREAKPOINTS of them.
    Shapes are not checked here beyond what finding breakpoints needs."""
    spots: list[Spot] = []
    for i, tool in enumerate(tools if isinstance(tools, list) else []):
        if _marked(tool, f"tools[{i}]"):
            spots.append(("tools", i, 0))
    if isinstance(system, list):
        spots += [("system", k, 0) for k, b in enumerate(system) if _marked(b, f"system[{k}]")]
    last: Spot | None = None
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, Mapping) else None
        if isinstance(content, str):
            last = ("messages", i, 0)
        elif isinstance(content, list) and content:
            last = ("messages", i, len(content) - 1)
            blocks = block_list(content, f"messages[{i}].content")
            spots += [
                ("messages", i, k) for k, b in enumerate(blocks) if _marked(b, f"messages[{i}].content[{k}]")
            ]
    if check_cache_control(top, "cache_control") and last is not None:
        spots.append(last)
    if len(spots) > MAX_BREAKPOINTS:
        raise InvalidRequest(
            f"at most {MAX_BREAKPOINTS} blocks may carry cache_control (got {len(spots)})",
            param="cache_control",
        )
    return spots[-1] if spots else None
