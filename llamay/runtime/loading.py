"""Building a loaded model: weights, a context sized by the RuntimeConfig, the KV manager,
the engine thread and the chat template, as one `LoadedModel` that closes them together."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backend.memory import mem_available
from ..chat.template import ChatTemplate
from ..chat.traits import Traits, detect_traits
from ..config import RuntimeConfig
from ..errors import Conflict
from ..kv.manager import KvManager
from ..kv.storelock import StoreBusy

log = logging.getLogger("llamay.runtime")

if TYPE_CHECKING:  # llama.cpp is loaded by load_model, not by importing this module
    from ..backend.context import Context
    from ..backend.model import Model, ModelInfo
    from ..engine.draft_model import DraftModel
    from ..engine.engine import Engine

__all__ = [
    "LoadedModel",
    "LoadRefused",
    "load_model",
    "check_memory",
    "is_gguf",
    "default_threads",
    "model_variance",
]


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
    thinking_budget: int | None = None  # the server's default thinking budget (-reasoning-budget)
    last_used: float = field(default_factory=time.time)
    # The template for requests with tools, when the GGUF has its own for them.
    tool_template: ChatTemplate | None = None
    # Tool-call format and think markers, from the template and vocabulary; set at load.
    traits: Traits = field(init=False)
    tool_traits: Traits | None = field(init=False, default=None)
    # Why this model's output may vary with what else the server runs (backend.invariance;
    # empty: it is inside the batch-invariance promise); set at load.
    batch_variance: tuple[str, ...] = ()
    # The model's parameters before a request's own (chat.prepare.model_params), with the
    # monotonic time they were read; None: read them on the next request.
    params_memo: tuple[float, dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        self.traits = detect_traits(self.template.source, self.model.special_id)
        if self.tool_template is not None:
            self.tool_traits = detect_traits(self.tool_template.source, self.model.special_id)

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
    from ..backend.context import Context, ContextConfig
    from ..backend.model import Model
    from ..engine.engine import Engine, EngineConfig
    from ..engine.speculate import SpecConfig

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
    tool_template = None
    if config.chat_template_file is None and model.info.tool_template:
        tool_template = ChatTemplate(
            model.info.tool_template, bos_token=model.info.bos_token, eos_token=model.info.eos_token
        )
    if sha256 is None:
        from ..store import file_sha256

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
    variance = model_variance(path, config.kv_type)
    # Speculation keeps every token only where a position's logits do not depend on the step
    # (backend/invariance.py): elsewhere it is off.
    speculate = SpecConfig(enabled=config.speculate and not variance, max_draft=config.draft_max)
    settings = EngineConfig(
        concurrency=config.concurrency,
        max_queue=config.max_queue,
        fair=config.admission == "fair",
        speculate=speculate,
    )
    try:
        drafter = load_drafter(config, model, ctx) if speculate.enabled else None
    except BaseException:
        ctx.close()
        model.close()
        raise
    engine = Engine(model, ctx, settings, kv, drafter)
    try:
        # Building it detects the traits.
        loaded = LoadedModel(name, model, ctx, engine, template, sha256, tool_template=tool_template)
        loaded.thinking_budget = config.reasoning_budget
        loaded.batch_variance = variance
        return loaded
    except Exception:
        engine.close()
        ctx.close()
        model.close()
        raise


def load_drafter(config: RuntimeConfig, target: Model, target_ctx: Context) -> DraftModel | None:
    """The draft model `config.draft` names, with a context beside `target_ctx`'s; None (and
    a warning) when none is set or its tokenizer is not the target's."""
    if config.draft is None:
        return None
    from ..backend.context import Context
    from ..backend.model import Model
    from ..engine.draft_model import DraftModel, same_tokenizer
    from ..store import ModelStore

    path = ModelStore(config.home).resolve(config.draft).path
    model = Model(path)
    if not same_tokenizer(model, target):
        log.warning(
            "draft model %s does not share this model's tokenizer: speculation runs without it", config.draft
        )
        model.close()
        return None
    c = target_ctx.config
    try:
        ctx = Context(model, replace(c, n_batch=min(256, c.n_batch), type_kv="f16"))
    except BaseException:
        model.close()
        raise
    return DraftModel(model, ctx)


def model_variance(path: Path, kv_type: str) -> tuple[str, ...]:
    """Why the model at `path` may give output that varies with the batch (see
    backend.invariance), from its GGUF header; a header that cannot be read says so."""
    from ..backend.invariance import batch_variance
    from ..store.gguf_header import read_header

    try:
        header = read_header(path, max_array=0)
    except (OSError, ValueError):
        return ("an unreadable GGUF header (not checked)",)
    return batch_variance(header.metadata, header.weight_types, kv_type)


def _slug(name: str) -> str:
    """`name` as one safe folder-name part."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64] or "model"


def is_gguf(path: Path) -> bool:
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
