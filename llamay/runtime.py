"""Loaded models and their engines: what the HTTP layer and the CLI serve from.

An app factory receives a Runtime; nothing here is module-level state.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from .backend.context import Context, ContextConfig
from .backend.model import Model, ModelInfo
from .chat.template import ChatTemplate
from .engine.engine import Engine, EngineConfig
from .errors import ModelNotFound

__all__ = ["LoadedModel", "Runtime", "RuntimeConfig", "load_model"]

log = logging.getLogger("llamay.runtime")


@dataclass(frozen=True)
class RuntimeConfig:
    """Server-wide settings for loading models. `ctx` 0 means min(model's training
    context, 8192). `threads` 0 means the number of CPU cores."""

    ctx: int = 0
    batch: int = 512
    threads: int = 0
    concurrency: int = 8
    max_queue: int = 64
    kv_type: str = "f16"
    chat_template_file: Path | None = None
    home: Path | None = None  # contexts are saved under home/contexts; None: not kept


@dataclass
class LoadedModel:
    name: str
    model: Model
    ctx: Context
    engine: Engine
    template: ChatTemplate
    sha256: str | None
    loaded_at: float = field(default_factory=time.time)

    @property
    def info(self) -> ModelInfo:
        return self.model.info

    def close(self) -> None:
        self.engine.close()
        self.ctx.close()
        self.model.close()


def default_threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def load_model(name: str, path: Path, config: RuntimeConfig, sha256: str | None = None) -> LoadedModel:
    """Load weights, create a context sized by `config`, start its engine thread."""
    model = Model(path)
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
    engine_config = EngineConfig(
        concurrency=config.concurrency,
        max_queue=config.max_queue,
        model_name=name,
        model_sha256=sha256,
        contexts_dir=folder,
    )
    engine = Engine(model, ctx, engine_config)
    return LoadedModel(name, model, ctx, engine, template, sha256)


class Runtime:
    """The models a server holds. `get("")` or `get(None)` is the default model."""

    def __init__(self, default: LoadedModel) -> None:
        self._models: dict[str, LoadedModel] = {default.name: default}
        self.default_name = default.name
        self._lock = threading.Lock()
        self.started = time.time()

    def get(self, name: str | None) -> LoadedModel:
        if not name:
            return self._models[self.default_name]
        with self._lock:
            found = self._models.get(name) or self._models.get(_with_tag(name))
        if found is None:
            raise ModelNotFound(
                f"model '{name}' is not loaded here; available: {', '.join(sorted(self._models))}",
                param="model",
            )
        return found

    def models(self) -> list[LoadedModel]:
        with self._lock:
            return list(self._models.values())

    def close(self) -> None:
        """Stop every engine (saving its contexts) and free the models; idempotent."""
        with self._lock:
            models = list(self._models.values())
            self._models.clear()
        for m in models:
            m.close()


def _with_tag(name: str) -> str:
    return name if ":" in name else f"{name}:latest"
