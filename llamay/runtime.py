"""Loaded models and their engines: what the HTTP layer and the CLI serve from.

An app factory receives a Runtime; nothing here is module-level state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .backend.memory import mem_available
from .chat.template import ChatTemplate
from .chat.traits import Traits, detect_traits
from .errors import Conflict, ModelNotFound, Overloaded
from .kv.manager import KvManager
from .kv.storelock import StoreBusy

if TYPE_CHECKING:  # llama.cpp is loaded by load_model, not by importing this module
    from .backend.context import Context
    from .backend.model import Model, ModelInfo
    from .engine.engine import Engine

__all__ = [
    "MANAGE_MODELS",
    "LoadedModel",
    "LoadRefused",
    "Runtime",
    "RuntimeConfig",
    "load_model",
    "mem_available",
]

log = logging.getLogger("llamay.runtime")

# Whether the caller may manage models: load one by path or URL, download one, change how
# long a model stays loaded, or evict a model kept without expiry. True outside the HTTP
# server (CLI, library); the server sets it per request from the key's role, so every
# route that names a model obeys it without passing it along.
MANAGE_MODELS: ContextVar[bool] = ContextVar("llamay_manage_models", default=True)
# Distinct model-name spellings remembered as aliases; older ones are resolved again.
MAX_ALIASES = 256


@dataclass(frozen=True)
class RuntimeConfig:
    """Server-wide settings for loading models. `ctx` 0 means min(model's training
    context, 8192). `threads` 0 means the number of CPU cores. `max_tokens` limits
    constrained output (schema, grammar, tools) whose request sets no limit and whose
    schema does not bound it. `temperature`, `top_p`, `top_k`, `min_p` and `repeat_penalty`
    (None: unset) are the server's sampling defaults: over a model's GGUF
    `general.sampling.*`, under each request's own values. `finish_tool` ("off" or "auto"):
    whether an OpenAI chat request with tool_choice "required" that does not set
    `finish_tool` gets the finish tool."""

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
    max_tokens: int = 2048  # limit for constrained output when a request sets none
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repeat_penalty: float | None = None
    finish_tool: str = "off"


class LoadRefused(Conflict):
    code = "load_refused"


@dataclass
class LoadedModel:
    name: str
    model: Model
    ctx: Context
    engine: Engine
    template: ChatTemplate
    sha256: str | None
    loaded_at: float = field(default_factory=time.time)
    keep_alive: float = -1.0  # seconds idle before unloading; negative: never
    last_used: float = field(default_factory=time.time)
    # Tool-call format and think markers, from the template and vocabulary; set at load.
    traits: Traits = field(init=False)

    def __post_init__(self) -> None:
        self.traits = detect_traits(self.template.source, self.model.special_id)

    def touch(self) -> None:
        self.last_used = time.time()

    @property
    def idle(self) -> bool:
        return self.engine.running == 0 and self.engine.queue_depth == 0

    @property
    def expires_at(self) -> float | None:
        return None if self.keep_alive < 0 else self.last_used + self.keep_alive

    @property
    def info(self) -> ModelInfo:
        return self.model.info

    def close(self) -> None:
        self.engine.close()
        self.ctx.close()
        self.model.close()


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def load_model(
    name: str,
    path: Path,
    config: RuntimeConfig,
    sha256: str | None = None,
    progress: Callable[[float], object] | None = None,
) -> LoadedModel:
    """Load weights, create a context sized by `config`, start its engine thread; the
    model's chat traits are detected here, once (`LoadedModel.traits`). `progress` gets the
    fraction of the weights loaded, as `Model` reports it."""
    from .backend.context import Context, ContextConfig
    from .backend.model import Model
    from .engine.engine import Engine, EngineConfig

    model = Model(path, progress)
    try:
        n_ctx = config.ctx or min(model.info.n_ctx_train or 8192, 8192)
        threads = config.threads or default_threads()
        ctx_config = ContextConfig(
            n_ctx=n_ctx,
            n_batch=min(config.batch, n_ctx),
            # Running requests plus as many again (at least 16) for cached prefixes.
            n_seq_max=min(256, config.concurrency + max(16, config.concurrency)),
            n_threads=threads,
            n_threads_batch=threads,
            type_kv=config.kv_type,
            flash_attn=config.flash_attn,
        )
        ctx = Context(model, ctx_config)
    except Exception:
        model.close()
        raise
    if config.chat_template_file is not None:
        template = ChatTemplate.from_file(
            config.chat_template_file, bos_token=model.info.bos_token, eos_token=model.info.eos_token
        )
    elif model.info.chat_template:
        template = ChatTemplate(
            model.info.chat_template, bos_token=model.info.bos_token, eos_token=model.info.eos_token
        )
    else:
        template = ChatTemplate.chatml()
    if sha256 is None:
        from .store import file_sha256

        sha256 = file_sha256(path)
    folder = config.home / "contexts" / sha256[:16] if config.home is not None else None
    try:
        try:
            kv = KvManager.create(
                ctx, folder=folder, model_name=name, model_sha256=sha256, cache_ram=config.cache_ram
            )
        except StoreBusy as busy:
            if not busy.here or folder is None:
                raise
            # The same weights are loaded here under another name: its store is its own.
            own = folder.with_name(f"{folder.name}-{_slug(name)}")
            kv = KvManager.create(
                ctx, folder=own, model_name=name, model_sha256=sha256, cache_ram=config.cache_ram
            )
    except BaseException:
        ctx.close()
        model.close()
        raise
    engine = Engine(model, ctx, EngineConfig(concurrency=config.concurrency, max_queue=config.max_queue), kv)
    try:
        return LoadedModel(name, model, ctx, engine, template, sha256)  # detects the traits
    except Exception:
        engine.close()
        ctx.close()
        model.close()
        raise


def _slug(name: str) -> str:
    """`name` as one safe folder-name part."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64] or "model"


class Runtime:
    """The models a server holds, loaded on demand.

    `use(name)` returns a loaded model, loading it in a worker thread if needed (other
    models keep serving meanwhile). At most `max_loaded` stay resident; the least recently
    used idle one makes room. A model unloads once idle past its keep-alive (negative:
    never). A load that would not fit in available memory is refused (409 load_refused).
    """

    def __init__(
        self,
        config: RuntimeConfig | None = None,
        *,
        resolve: Callable[[str], tuple[str, Path, str | None]] | None = None,
        store: Any = None,
        max_loaded: int = 2,
        keep_alive: float = 300.0,
        default: str | None = None,
    ) -> None:
        self.config = config or RuntimeConfig()
        self.store = store
        self._resolve = resolve
        self.max_loaded = max(1, max_loaded)
        self.keep_alive = keep_alive
        self.default_name = default or ""
        self._models: dict[str, LoadedModel] = {}
        self._aliases: OrderedDict[str, str] = OrderedDict()
        # Every model loaded so far, by name: a model first loaded from a file path (the
        # -m model) can be loaded again by its name after it was unloaded.
        self._files: dict[str, tuple[Path, str | None]] = {}
        self._loading: dict[str, asyncio.Future[LoadedModel]] = {}
        self._progress: dict[str, tuple[float, int]] = {}  # (fraction read, file bytes) per load
        self._cancelled: set[str] = set()  # loads an unload asked to stop
        self._generation = 0
        self.encoders: dict[str, Any] = {}  # "embed" / "rerank" encoders loaded beside the models
        self._lock = threading.Lock()
        self.started = time.time()

    # -- lookup --------------------------------------------------------------------------
    def add(self, lm: LoadedModel, *, default: bool = False, keep_alive: float | None = None) -> None:
        """Hold an already loaded model (serve preloads its default model this way)."""
        lm.keep_alive = self.keep_alive if keep_alive is None else keep_alive
        lm.touch()
        with self._lock:
            self._models[lm.name] = lm
            self._remember(lm.name, lm.name)
            self._files[lm.name] = (lm.info.path, lm.sha256)
        if default or not self.default_name:
            self.default_name = lm.name

    def get(self, name: str | None) -> LoadedModel:
        """A model that is loaded now (no loading); ModelNotFound otherwise."""
        key = self._canonical(name)
        with self._lock:
            found = self._models.get(key) if key else None
        if found is None:
            loaded = ", ".join(sorted(self._models)) or "none"
            raise ModelNotFound(f"model '{name}' is not loaded (loaded: {loaded})", param="model")
        found.touch()
        return found

    def loaded(self) -> list[LoadedModel]:
        with self._lock:
            return list(self._models.values())

    models = loaded

    async def use(self, name: str | None, keep_alive: float | None = None) -> LoadedModel:
        """The model `name` ("" or None: the default), loading it if needed. A caller that
        may not manage models (`MANAGE_MODELS`) gets only a loaded or installed model (one
        uniform ModelNotFound for anything else) and its `keep_alive` is ignored."""
        manage = MANAGE_MODELS.get()
        key = self._canonical(name)
        with self._lock:
            found = self._models.get(key) if key else None
        if found is None:
            key, found = await self._load(name or self.default_name, manage)
        if keep_alive is not None and manage:
            found.keep_alive = keep_alive
        found.touch()
        return found

    # -- loading / unloading -------------------------------------------------------------
    async def _find(self, name: str, manage: bool) -> tuple[str, Path, str | None]:
        """(name, GGUF file, sha256) for `name`: a model loaded before, else (managers) any
        name, path or download the resolver takes, else (users) an installed model only."""
        known = self._files.get(name) or self._files.get(self._aliases.get(name, ""))
        if known is not None:
            return (self._aliases.get(name, name), *known)
        if not manage:
            installed = getattr(self.store, "installed", None)
            found = await asyncio.to_thread(installed, name) if installed is not None else None
            if found is None:
                raise ModelNotFound(f"model '{name[:200]}' not found", param="model")
            return found.name, found.path, found.sha256
        if self._resolve is None:
            raise ModelNotFound(
                f"model '{name}' is not loaded and this server cannot load models", param="model"
            )
        canonical, path, sha = await asyncio.to_thread(self._resolve, name)
        if not await asyncio.to_thread(_is_gguf, path):
            raise ModelNotFound(f"model '{name}' not found: {path} is not a GGUF file", param="model")
        return canonical, path, sha

    async def _load(self, name: str, manage: bool = True) -> tuple[str, LoadedModel]:
        canonical, path, sha = await self._find(name, manage)
        self._remember(name, canonical)
        with self._lock:
            if canonical in self._models:
                return canonical, self._models[canonical]
            pending = self._loading.get(canonical)
        if pending is not None:  # someone is loading it already: share that load
            return canonical, await asyncio.shield(pending)
        fut: asyncio.Future[LoadedModel] = asyncio.get_running_loop().create_future()
        self._loading[canonical] = fut
        try:
            check_memory(canonical, path)
            await self._make_room(manage)
            generation = self._generation
            size = path.stat().st_size
            self._progress[canonical] = (0.0, size)

            def progress(fraction: float) -> bool:
                # On the loading thread: record it; False stops llama.cpp reading the weights.
                self._progress[canonical] = (fraction, size)
                return generation == self._generation and canonical not in self._cancelled

            try:
                lm = await asyncio.to_thread(load_model, canonical, path, self.config, sha, progress)
            except Exception:
                if generation != self._generation or canonical in self._cancelled:
                    raise Conflict(f"loading '{canonical}' was cancelled") from None
                raise
            if generation != self._generation or canonical in self._cancelled:  # stopped meanwhile
                await asyncio.to_thread(lm.close)
                raise Conflict(f"loading '{canonical}' was cancelled")
            self.add(lm)
            fut.set_result(lm)
            return canonical, lm
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: waiters re-raise it
            raise
        finally:
            self._loading.pop(canonical, None)
            self._progress.pop(canonical, None)
            self._cancelled.discard(canonical)

    def load_progress(self, name: str | None) -> tuple[int, int] | None:
        """(bytes of `name`'s weights read so far, their total) while it loads; None when no
        load of it is under way."""
        key = self._canonical(name)
        got = self._progress.get(key) if key else None
        return (int(got[0] * got[1]), got[1]) if got is not None else None

    async def _make_room(self, manage: bool = True) -> None:
        while len(self._models) >= self.max_loaded:
            # Only a manager's load may evict a model kept without expiry (the -m model).
            idle = [m for m in self.loaded() if m.idle and (manage or m.keep_alive >= 0)]
            if not idle:
                raise Overloaded(
                    f"all {len(self._models)} loaded models are busy; retry shortly", retry_after=2
                )
            # Models kept without expiry (the one `serve` was started with) go last.
            await self.unload(min(idle, key=lambda m: (m.keep_alive < 0, m.last_used)).name)

    async def embed(
        self, name: str, texts: list[str], *, truncate: bool, keep_alive: float | None = None
    ) -> tuple[list[list[float]], int]:
        """Unit vectors for `texts` from the loaded embedding model, and the tokens read."""
        encoder = self.encoders.get("embed")
        if encoder is None:
            raise ModelNotFound(
                f"no embedding model is loaded for '{name}'; start the server with -embed MODEL",
                param="model",
            )
        from .embed import embed_texts

        vectors, n_tokens = await embed_texts(encoder, texts, truncate)
        return vectors.astype(float).tolist(), n_tokens  # plain floats: JSON-ready

    async def unload(self, name: str) -> bool:
        """Unload a model (its running requests end with reason 'abort'), or stop its load
        if one is under way; False if it is neither loaded nor loading."""
        key = self._canonical(name)
        with self._lock:
            lm = self._models.pop(key, None)
        if lm is None:
            if key in self._loading:
                self._cancelled.add(key)
                return True
            return False
        log.info("unloading model", extra={"fields": {"model": lm.name}})
        await asyncio.to_thread(lm.close)
        return True

    async def reset(self) -> list[str]:
        """Unload everything now, and cancel loads in progress; never waits behind work."""
        self._generation += 1
        names = [m.name for m in self.loaded()]
        for n in names:
            await self.unload(n)
        return names

    async def reap(self) -> None:
        """Unload models idle past their keep-alive (call periodically)."""
        now = time.time()
        for m in self.loaded():
            expires = m.expires_at
            if expires is not None and expires <= now and m.idle:
                await self.unload(m.name)

    def close(self) -> None:
        """Stop every engine (saving its contexts) and free the models; idempotent."""
        with self._lock:
            models = list(self._models.values())
            self._models.clear()
        for m in models:
            m.close()

    def _remember(self, alias: str, canonical: str) -> None:
        """Note `alias` as a spelling of `canonical`, keeping the newest MAX_ALIASES: names
        come from requests, and any number of spellings may resolve to one model."""
        self._aliases[alias] = canonical
        self._aliases.move_to_end(alias)
        while len(self._aliases) > MAX_ALIASES:
            self._aliases.popitem(last=False)

    def _canonical(self, name: str | None) -> str:
        if not name:
            return self.default_name
        if name in self._models:
            return name
        return self._aliases.get(name) or self._aliases.get(_with_tag(name)) or name


def _is_gguf(path: Path) -> bool:
    """Whether `path` starts like a GGUF file (so any other file is a 404, not a 500)."""
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def check_memory(name: str, path: Path, reserve: int = 256 * 1024 * 1024) -> None:
    """Refuse a load that would not fit: MemAvailable below the file size plus a reserve."""
    available = mem_available()
    if available is None:
        return
    need = path.stat().st_size + reserve
    if available < need:
        raise LoadRefused(
            f"not enough memory to load '{name}': it needs about {need // 2**20} MiB "
            f"and {available // 2**20} MiB are available"
        )


def _with_tag(name: str) -> str:
    return name if ":" in name else f"{name}:latest"
