"""What a llamay server runs with: typed, frozen records, checked when they are made.

`RuntimeConfig` says how models are loaded and run (`llamay run` and the library use it
too); `ServerLimits` how the HTTP server treats slow and numerous clients; `ServerConfig`
everything `llamay serve`'s flags and environment mean. The command line only parses into a
`ServerConfig` (`cli/serve.config_from_args`); `server.build_server(config)` builds the app
and runtime from it; a fleet ships the same object to every replica. Nothing here imports
the engine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .auth import KeyRing
from .types import SamplingParams

__all__ = [
    "ConfigError",
    "RuntimeConfig",
    "ServerLimits",
    "ServerConfig",
    "KV_TYPES",
    "LOG_LEVELS",
    "SAMPLING_FIELDS",
    "ENV_API_KEY",
    "ENV_SNAPSHOT_KEY",
    "ENV_FINISH_TOOL",
    "ENV_ADMISSION",
    "ADMISSION_MODES",
    "check_sampling",
]

# The environment `llamay serve` reads (besides $LLAMAY_HOME, where it keeps its files).
ENV_API_KEY = "LLAMAY_API_KEY"  # one admin key, beside any -keys file
ENV_SNAPSHOT_KEY = "LLAMAY_SNAPSHOT_KEY"  # signs snapshots; servers that share it trust each other's
ENV_FINISH_TOOL = "LLAMAY_FINISH_TOOL"  # -finish-tool when the flag is not given
ENV_ADMISSION = "LLAMAY_ADMISSION"  # -admission when the flag is not given

KV_TYPES = ("f16", "f32", "q8_0")
# "fair": waiting sequences start by principal, the least served first (engine/tenants.py);
# "fcfs": first come, first served, one queue.
ADMISSION_MODES = ("fair", "fcfs")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# RuntimeConfig fields that are the server's sampling defaults (-temp, -top-p, ...).
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty")


class ConfigError(ValueError):
    """A server setting that cannot be used; the message names the flag that sets it."""


@dataclass(frozen=True)
class RuntimeConfig:
    """Server-wide settings for loading models. `ctx` 0 means min(model's training
    context, 8192). `threads` 0 means the number of CPU cores. `max_tokens` is the default
    output budget: what a request that sets no limit may generate, on every API (a schema
    that bounds its answers gets that bound instead). `temperature`, `top_p`, `top_k`, `min_p` and `repeat_penalty`
    (None: unset) are the server's sampling defaults: over a model's GGUF
    `general.sampling.*`, under each request's own values. `finish_tool` ("off" or "auto"):
    whether an OpenAI chat request with tool_choice "required" that does not set
    `finish_tool` gets the finish tool. `admission` ("fair" or "fcfs"): with "fair", each
    principal (API key owner) may have `max_queue` sequences waiting and the least served
    one's start first; with "fcfs", and always without keys, one queue of `max_queue`, first
    come first served."""

    ctx: int = 0
    batch: int = 512
    threads: int = 0
    concurrency: int = 8
    max_queue: int = 64
    kv_type: str = "f16"
    flash_attn: bool = True  # attention over a sequence's own cells only (see backend/context.py)
    cache_ram: int = 512 * 1024 * 1024  # bytes per model for cached prefixes kept in RAM
    chat_template_file: Path | None = None
    home: Path | None = None  # contexts are saved under home/contexts; None: not kept
    max_tokens: int = 2048  # the default output budget of a request that sets none
    reasoning_budget: int | None = None  # thinking tokens when a request sets no budget; None: unbounded
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    finish_tool: str = "off"
    admission: str = "fair"
    speculate: bool = True  # speculative decoding, which never changes a token (engine/speculate.py)
    draft_max: int = 8  # drafted tokens per sequence and step at most
    draft: str | None = None  # a draft model (name or .gguf path) sharing the served models' tokenizer

    def sampling(self) -> dict[str, Any]:
        """The sampling defaults that are set, by field name."""
        values = {k: getattr(self, k) for k in SAMPLING_FIELDS}
        return {k: v for k, v in values.items() if v is not None}


@dataclass(frozen=True)
class ServerLimits:
    """`max_connections`: open connections (and running requests) before uvicorn answers
    503. `max_connections_per_address`: open connections from one client address (an IPv6
    client's /64) before its next one is answered 503 and closed, so one address cannot hold
    them all. `header_timeout`: seconds to receive a request's headers. `body_timeout`:
    seconds to receive a whole request body. `keep_alive_timeout`: seconds an idle connection
    stays open between requests. `max_body`: bytes of a request body (a snapshot restore's
    limit follows from its model instead), else 413. `max_field`: UTF-8 bytes of a free-text
    field the server keeps beyond the request (a context's marking, an item id stored with
    a response), else 400 naming the field. `responses_per_key` / `responses_total`: bytes
    of stored Responses (their conversation and output, as JSON) kept for one principal /
    for everyone; past either the oldest records go. `response_ttl`: seconds a stored
    response is kept."""

    max_connections: int = 256
    max_connections_per_address: int = 32
    header_timeout: float = 10.0
    body_timeout: float = 120.0
    keep_alive_timeout: float = 5.0
    max_body: int = 32 * 1024 * 1024
    max_field: int = 1024
    responses_per_key: int = 64 * 1024 * 1024
    responses_total: int = 512 * 1024 * 1024
    response_ttl: float = 24 * 3600.0


@dataclass(frozen=True)
class ServerConfig:
    """Everything `llamay serve` is told, by flag or environment; a bad value is a
    ConfigError naming its flag, raised here, before anything is bound or loaded.

    `model`: -m, a model name or .gguf path (None: the default model). `host`/`port`: -addr.
    `runtime`: how models load and run; its `home` is where contexts and the snapshot key are
    kept (the command line sets $LLAMAY_HOME; None keeps nothing). `limits`: the slow-client
    limits. `max_loaded`, `keep_alive`: residency (seconds; negative keeps a model; the -m
    model always stays). `embed`, `rerank`, `index`: encoders and a retrieval index served
    beside the models. `keys`: an API keys file; `api_key` ($LLAMAY_API_KEY) one admin key
    more. `snapshot_key` ($LLAMAY_SNAPSHOT_KEY): signs context snapshots (None: a key kept in
    `runtime.home`). The two keys never appear in the repr."""

    model: str | None = None
    host: str = "localhost"
    port: int = 11435
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    limits: ServerLimits = field(default_factory=ServerLimits)
    max_loaded: int = 2
    keep_alive: float = 300.0
    embed: str | None = None
    rerank: str | None = None
    index: Path | None = None
    keys: Path | None = None
    api_key: str | None = field(default=None, repr=False)
    snapshot_key: str | None = field(default=None, repr=False)
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        _check_runtime(self.runtime)
        _check_limits(self.limits)
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"-addr: the port must be from 0 to 65535, not {self.port}")
        if self.max_loaded < 1:
            raise ConfigError(f"-max-loaded must be at least 1, not {self.max_loaded}")
        if math.isnan(self.keep_alive):
            raise ConfigError("-keepalive must be a duration, not NaN")
        if self.log_level.upper() not in LOG_LEVELS:
            raise ConfigError(f"-log-level must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}")
        if self.snapshot_key is not None and len(self.snapshot_key) < 16:
            raise ConfigError(f"{ENV_SNAPSHOT_KEY} must be at least 16 characters")

    @property
    def addr(self) -> str:
        """HOST:PORT, as -addr takes it."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def key_ring(self) -> KeyRing:
        """The API keys: the -keys file's and `api_key`; none at all means a single user."""
        return KeyRing.load(self.keys, env={ENV_API_KEY: self.api_key} if self.api_key else {})


def check_sampling(given: dict[str, Any]) -> None:
    """ConfigError unless the server's sampling defaults `given` (RuntimeConfig field ->
    value) are in the range every API accepts."""
    try:
        SamplingParams(**given).validate()
    except Exception as exc:
        raise ConfigError(f"sampling flag: {exc}") from None
    if given.get("temperature", 0.0) > 2.0:
        raise ConfigError("-temp must be between 0 and 2")


def _at_least(flag: str, value: int, low: int) -> None:
    if value < low:
        raise ConfigError(f"-{flag} must be at least {low}, not {value}")


def _check_runtime(rc: RuntimeConfig) -> None:
    from .chat.flow import FINISH_TOOL_MODES  # the chat layer's own list

    _at_least("ctx", rc.ctx, 0)
    _at_least("batch", rc.batch, 1)
    _at_least("threads", rc.threads, 0)
    _at_least("concurrency", rc.concurrency, 1)
    _at_least("queue", rc.max_queue, 0)
    _at_least("max-tokens", rc.max_tokens, 1)
    _at_least("draft-max", rc.draft_max, 0)
    if rc.reasoning_budget is not None:
        _at_least("reasoning-budget", rc.reasoning_budget, 0)
    if rc.cache_ram < 0:
        raise ConfigError(f"-cache-ram must be 0 MiB or more, not {rc.cache_ram // 2**20}")
    if rc.kv_type not in KV_TYPES:
        raise ConfigError(f"-kv must be one of {', '.join(KV_TYPES)}, not {rc.kv_type!r}")
    if rc.finish_tool not in FINISH_TOOL_MODES:  # the flag, or $LLAMAY_FINISH_TOOL
        raise ConfigError(f"-finish-tool must be off or auto, not {rc.finish_tool!r}")
    if rc.admission not in ADMISSION_MODES:  # the flag, or $LLAMAY_ADMISSION
        raise ConfigError(f"-admission must be fair or fcfs, not {rc.admission!r}")
    check_sampling(rc.sampling())


def _check_limits(limits: ServerLimits) -> None:
    names = ("max_connections", "max_connections_per_address", "header_timeout", "body_timeout", "max_body", "max_field",
             "responses_per_key", "responses_total", "response_ttl")  # fmt: skip
    for name in names:
        value = getattr(limits, name)
        if not value > 0:  # NaN too
            raise ConfigError(f"-{name.replace('_', '-')} must be positive, not {value}")
    if not limits.keep_alive_timeout > 0:
        raise ConfigError(f"keep_alive_timeout must be positive, not {limits.keep_alive_timeout}")
