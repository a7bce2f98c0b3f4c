"""Keeping models resident: the models a server holds, loaded on demand, evicted when idle
or when another needs the room. An app factory receives a Runtime; nothing here is
module-level state.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..config import RuntimeConfig
from ..errors import Conflict, ModelNotFound, Overloaded, TooManyRequests
from .encoders import embed_with
from .loading import LoadedModel, check_memory, is_gguf, load_model

if TYPE_CHECKING:
    from ..embed import Encoder
    from ..store import ResolvedModel, StoredModel

__all__ = ["MANAGE_MODELS", "MODELS_USED", "Runtime", "Store"]

log = logging.getLogger("llamay.runtime")

# Whether the caller may manage models: load one by path or URL, download one, change how
# long a model stays loaded, or evict a model kept without expiry. True outside the HTTP
# server (CLI, library); the server sets it per request from the key's role, so every
# route that names a model obeys it without passing it along.
MANAGE_MODELS: ContextVar[bool] = ContextVar("llamay_manage_models", default=True)
# The models a request used, for the HTTP layer to report (a list it sets per request and
# reads when the response starts: whether the output was inside the batch-invariance
# promise); None outside the server.
MODELS_USED: ContextVar[list[LoadedModel] | None] = ContextVar("llamay_models_used", default=None)
# Distinct model-name spellings remembered as aliases; older ones are resolved again.
MAX_ALIASES = 256
# Seconds a model must have gone unused before a user's load may unload it to make room:
# without this, a user naming two installed models in turn reloads them over and over
# (each load reads the whole file and stops everyone's use of the model it replaces).
USER_EVICT_AFTER = 60.0


def _used(lm: LoadedModel) -> None:
    used = MODELS_USED.get()
    if used is not None and all(m is not lm for m in used):
        used.append(lm)


class Store(Protocol):
    """What a server asks of its model store (`store.ModelStore` is one): models to load
    for the runtime, and what the Ollama routes show and change. Those routes look for a
    method before calling it, so a store that offers fewer answers 501 for the rest."""

    def resolve(self, name: str | None) -> ResolvedModel: ...

    def installed(self, name: str) -> ResolvedModel | None: ...

    def params(self, name: str) -> dict[str, Any]: ...

    def template(self, name: str) -> str | None: ...

    def system(self, name: str) -> str | None: ...

    def pull(
        self,
        source: str,
        name: str | None = None,
        *,
        fresh: bool = False,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> StoredModel: ...

    def copy(self, source: str, destination: str) -> StoredModel: ...

    def remove(self, name: str) -> None: ...

    def create(
        self,
        name: str,
        source: str,
        *,
        params: dict[str, Any] | None = None,
        template: str | None = None,
        system: str | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> StoredModel: ...

    # Last: in this class body, the name `list` means this method from here on.
    def list(self) -> list[StoredModel]: ...


class Runtime:
    """The models a server holds, loaded on demand.

    `use(name)` returns a loaded model, loading it in a worker thread if needed (other
    models keep serving meanwhile). At most `max_loaded` stay resident; the least recently
    used idle one makes room. A model unloads once idle past its keep-alive (negative:
    never). A load that would not fit in available memory is refused (409 load_refused).
    A caller that may not manage models unloads only a model unused for `user_evict_after`
    seconds to make room; sooner, its load is a 429 saying which model is in the way.
    """

    def __init__(
        self,
        config: RuntimeConfig | None = None,
        *,
        resolve: Callable[[str], tuple[str, Path, str | None]] | None = None,
        store: Store | None = None,
        max_loaded: int = 2,
        keep_alive: float = 300.0,
        default: str | None = None,
        encoders: dict[str, Encoder] | None = None,
        user_evict_after: float = USER_EVICT_AFTER,
    ) -> None:
        self.config = config or RuntimeConfig()
        self.user_evict_after = user_evict_after
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
        # "embed" / "rerank" encoders loaded beside the models (the app's state holds the same)
        self.encoders: dict[str, Encoder] = {} if encoders is None else encoders
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
        _used(found)
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
        _used(found)
        return found

    # -- loading / unloading -------------------------------------------------------------
    async def _find(self, name: str, manage: bool) -> tuple[str, Path, str | None]:
        """(name, GGUF file, sha256) for `name`: a model loaded before, else (managers) any
        name, path or download the resolver takes, else (users) an installed model only."""
        known = self._files.get(name) or self._files.get(self._aliases.get(name, ""))
        if known is not None:
            return (self._aliases.get(name, name), *known)
        if not manage:
            found = await asyncio.to_thread(self.store.installed, name) if self.store is not None else None
            if found is None:
                raise ModelNotFound(f"model '{name[:200]}' not found", param="model")
            return found.name, found.path, found.sha256
        if self._resolve is None:
            raise ModelNotFound(
                f"model '{name}' is not loaded and this server cannot load models", param="model"
            )
        canonical, path, sha = await asyncio.to_thread(self._resolve, name)
        if not await asyncio.to_thread(is_gguf, path):
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
            await self._make_room(manage, canonical)
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

    async def _make_room(self, manage: bool = True, loading: str = "") -> None:
        while len(self._models) >= self.max_loaded:
            # Only a manager's load may evict a model kept without expiry (the -m model).
            idle = [m for m in self.loaded() if m.idle and (manage or m.keep_alive >= 0)]
            if not idle:
                raise Overloaded(
                    f"all {len(self._models)} loaded models are busy; retry shortly", retry_after=2
                )
            # Models kept without expiry (the one `serve` was started with) go last.
            victim = min(idle, key=lambda m: (m.keep_alive < 0, m.last_used))
            unused = time.time() - victim.last_used
            if not manage and unused < self.user_evict_after:
                wait = max(1, math.ceil(self.user_evict_after - unused))
                raise TooManyRequests(
                    f"loading '{loading}' would unload '{victim.name}', used {unused:.0f}s ago; a user's "
                    f"request unloads a model only after {self.user_evict_after:g}s unused "
                    f"(retry in {wait}s, or ask an admin to load it)",
                    retry_after=wait,
                )
            await self.unload(victim.name)

    async def embed(
        self, name: str, texts: Sequence[str], *, truncate: bool, keep_alive: float | None = None
    ) -> tuple[list[list[float]], int]:
        """Unit vectors for `texts` from the loaded embedding model, and the tokens read
        (what Ollama's /api/embed asks of a runtime; see `encoders.embed_with`)."""
        return await embed_with(self.encoders, name, texts, truncate=truncate)

    def forget_params(self) -> None:
        """The store changed: every loaded model reads its parameters again on its next
        request (chat.prepare.model_params)."""
        for lm in self.loaded():
            lm.params_memo = None

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


def _with_tag(name: str) -> str:
    return name if ":" in name else f"{name}:latest"
