"""How an engine is set up (`EngineConfig`) and what it counts (`EngineStats`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .speculate import SpecConfig

__all__ = ["EngineConfig", "EngineStats"]


@dataclass(frozen=True)
class EngineConfig:
    """`concurrency` caps running sequences. With `fair` (the default; `-admission fcfs` turns
    it off) waiting sequences start by tenant, the least served first, and each tenant
    may have up to `max_queue` waiting: past that its submit() raises QueueLimit (HTTP 429),
    whatever other tenants do. The single user (tenant "") and first-come-first-served
    admission have one queue of `max_queue`, past which submit() raises Overloaded (HTTP 503
    with Retry-After)."""

    concurrency: int = 8
    max_queue: int = 64
    fair: bool = True
    # Used only when the engine builds its own KvManager (see KvManager.create).
    model_name: str = "model"
    model_sha256: str = ""
    contexts_dir: Path | None = None  # where contexts are spilled and saved; None: a temp folder
    cache_ram: int = 512 * 1024 * 1024  # bytes of RAM for cached prefixes moved out of the KV cache
    speculate: SpecConfig = SpecConfig()  # speculative decoding (engine/speculate.py)


@dataclass
class EngineStats:
    """Counts since the engine started. `prompt_tokens`, `cached_tokens` and
    `generated_tokens` are counted when a request ends; `computed_tokens` as each step is
    decoded (prompt positions read and tokens fed back), in all and per tenant (`by_tenant`:
    a tenant's name, "" for the single user, -> its computed tokens)."""

    requests: int = 0
    aborted: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    computed_tokens: int = 0
    by_tenant: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    decode_seconds: float = 0.0
