"""`build_server(config)`: the HTTP app and its runtime, as a `ServerConfig` describes them.

`llamay serve` parses its flags into the config and serves what this builds; a fleet
replica builds the config its fleet shipped. Nothing here reads flags or the environment.
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette

from .config import ServerConfig

__all__ = ["build_server"]


def build_server(config: ServerConfig, *, model: tuple[str, Path, str | None] | None = None) -> Starlette:
    """The ASGI app `config` describes, its state (`app.state`, an `api.state.ServerState`)
    complete: the -m model loaded and kept for good, encoders and index open, keys read,
    snapshot key ready. `model`: -m already resolved as (name, file, sha256), as a fleet
    ships it; else `config.model` is resolved here (fetched on first use). The caller
    serves the app, whose lifespan closes the runtime, or closes `app.state.runtime`
    itself. Raises on a model, file or key that cannot be used, holding nothing then."""
    from .api.app import create_app
    from .api.state import load_key
    from .runtime import Runtime, load_model
    from .runtime.encoders import load_extras
    from .store import ModelStore

    keys = config.key_ring()
    store = ModelStore()
    if model is None:
        found = store.resolve(config.model)
        model = found.name, found.path, found.sha256
    name, path, sha = model
    snapshot_key = load_key(config.runtime.home, config.snapshot_key)
    loaded = load_model(name, path, config.runtime, sha)
    try:
        encoders, index = load_extras(config.embed, config.rerank, config.index, config.runtime.threads)
    except BaseException:
        loaded.close()
        raise

    def resolve(name: str) -> tuple[str, Path, str | None]:
        found = store.resolve(name)
        return found.name, found.path, found.sha256

    runtime = Runtime(
        config.runtime,
        resolve=resolve,
        store=store,
        max_loaded=config.max_loaded,
        keep_alive=config.keep_alive,
        encoders=encoders,
    )
    runtime.add(loaded, default=True, keep_alive=-1.0)
    return create_app(
        runtime, keys, encoders=encoders, index=index, limits=config.limits, snapshot_key=snapshot_key
    )
