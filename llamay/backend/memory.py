"""How much memory the machine has free, and what the loader makes of it (weights read into
memory or mapped from the file); the runtime refuses a load that would not fit. Pure Python:
importing it does not load llama.cpp."""

from __future__ import annotations

import os

__all__ = ["mem_available", "read_into_memory"]


def mem_available() -> int | None:
    """MemAvailable from /proc/meminfo in bytes (None where it cannot be read), or the
    LLAMAY_MEM_AVAILABLE override, which lets tests simulate a small machine."""
    override = os.environ.get("LLAMAY_MEM_AVAILABLE")
    if override:
        return int(override)
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def read_into_memory(size: int, available: int | None = None) -> bool:
    """Whether weights of `size` bytes are read into memory rather than mapped from the file:
    when they take at most half of the memory available (`available`, else MemAvailable from
    /proc/meminfo; mapped where that cannot be read). Read weights sit in transparent huge pages
    (the engine's allocator asks for them), which decodes several percent faster than the 4 KiB
    pages of a mapped file; a model too big for that is mapped, so it still loads."""
    if available is None:
        available = mem_available()
    return available is not None and 2 * size <= available
