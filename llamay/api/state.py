"""The app's state: one typed object, made whole when the app is built.

`app.state` is a `ServerState` (not Starlette's attribute bag): every field is set by
`server_state` before the first request, routes read them (`state_of(request).runtime`) and
nothing is added later; being slotted, an attribute that is not a field cannot be set.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request

from ..auth import KeyRing
from ..chat.contexts import ContextService
from ..config import ENV_SNAPSHOT_KEY, ServerLimits
from ..store.gguf_header import HeaderCache
from .metrics import RequestCounter
from .openai.responses_store import ResponseStore

if TYPE_CHECKING:
    from ..embed import Encoder
    from ..rag import Index
    from ..runtime import Runtime

__all__ = ["ServerState", "server_state", "state_of", "load_key", "MAX_RESTORES"]

MAX_RESTORES = 2  # snapshot restores running at once; more get 503
KEY_FILE = "snapshot.key"


@dataclass(slots=True)
class ServerState:
    """What every route of one app shares. `runtime`: the loaded models. `keys`: the API
    keys (none: a single user). `encoders`: "embed" / "rerank" encoders served beside the
    models (the runtime holds the same dict). `index`: the retrieval index (None: -index not
    given). `limits`: the slow-client limits the body reader applies. `counter`: requests by
    route and status. `snapshot_key`: signs context snapshots. `restore_slots`: restores
    running at once. `responses`: the Responses API's stored responses. `ollama_headers`:
    GGUF headers read for Ollama's model routes."""

    runtime: Runtime
    keys: KeyRing
    encoders: dict[str, Encoder]
    index: Index | None
    limits: ServerLimits
    counter: RequestCounter
    snapshot_key: bytes
    restore_slots: asyncio.Semaphore
    responses: ResponseStore
    ollama_headers: HeaderCache


def server_state(
    runtime: Runtime,
    keys: KeyRing | None = None,
    *,
    encoders: dict[str, Encoder] | None = None,
    index: Index | None = None,
    limits: ServerLimits | None = None,
    snapshot_key: bytes | None = None,
) -> ServerState:
    """A complete state for `runtime`. `snapshot_key` None: the key kept in the runtime's
    home (made there once), or one for this process when it has none."""
    if snapshot_key is None:
        config = getattr(runtime, "config", None)  # test runtimes may have none
        snapshot_key = load_key(getattr(config, "home", None), None)
    limits = limits or ServerLimits()
    responses = ResponseStore(
        ContextService(runtime),
        bytes_per_owner=limits.responses_per_key,
        bytes_total=limits.responses_total,
        ttl=limits.response_ttl,
    )
    return ServerState(
        runtime=runtime,
        keys=keys or KeyRing([]),
        encoders={} if encoders is None else encoders,
        index=index,
        limits=limits,
        counter=RequestCounter(),
        snapshot_key=snapshot_key,
        restore_slots=asyncio.Semaphore(MAX_RESTORES),
        responses=responses,
        ollama_headers=HeaderCache(),
    )


def state_of(holder: Request | Starlette) -> ServerState:
    """The state of the app serving a request, or of an app."""
    state: Any = holder.app.state if isinstance(holder, Request) else holder.state
    if not isinstance(state, ServerState):
        raise TypeError("this app was not built with a ServerState (api.app.create_app)")
    return state


def load_key(home: Path | None, given: str | None) -> bytes:
    """The snapshot signing key: from `given` ($LLAMAY_SNAPSHOT_KEY: servers that share it
    trust each other's snapshots), else `<home>/snapshot.key`, created once with mode 0600;
    without a home, one for this process."""
    if given:
        if len(given) < 16:
            raise ValueError(f"{ENV_SNAPSHOT_KEY} must be at least 16 characters")
        return hashlib.sha256(given.encode()).digest()
    if home is None:
        return secrets.token_bytes(32)
    path = home / KEY_FILE
    home.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        text = path.read_text().strip()
        if len(text) < 32:
            raise ValueError(
                f"the snapshot key file {path} is damaged; remove it to make a new one"
            ) from None
        return bytes.fromhex(text)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())
