"""What a pull source is: something that turns a source string into a plan of files to fetch.

A `Source.plan(spec, env)` call does the cheap part (asking an API or an index what the files
are, their sizes and digests when known) and returns a `PullPlan`; fetching the bytes is left
to each part's `fetch`, which the pull pipeline (`llamay.store.pull`) calls under the part's
lock and whose output it verifies and installs. Sources are looked up by scheme in
`llamay.store.registry`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from llamay.store.catalog import Catalog
from llamay.store.layout import Layout
from llamay.store.names import ModelName
from llamay.store.net import download
from llamay.store.pypi import WheelFile, fetched_wheel

__all__ = [
    "FetchContext",
    "PartPlan",
    "PullPlan",
    "Source",
    "SourceEnv",
    "Staged",
    "digest_key",
    "http_part",
    "origin_key",
]


@dataclass(frozen=True)
class Staged:
    """A fetched file, complete, in the store's tmp/ (the pipeline verifies, then renames it),
    with its sha256 if the fetch computed it while writing (else the pipeline hashes it)."""

    path: Path
    sha256: str | None = None


@dataclass(frozen=True)
class FetchContext:
    """What a part's fetch gets: the HTTP client, the store layout, the part's `key` (its
    partial file is `layout.partial(key)`), `on_bytes(n)` for progress, and retry settings."""

    client: httpx.Client
    layout: Layout
    key: str
    on_bytes: Callable[[int], None]
    retries: int = 3
    retry_delay: float = 0.25

    def wheel(self, wheel: WheelFile, path: Path) -> AbstractContextManager[Path]:
        """`llamay.store.pypi.fetched_wheel` with this fetch's client, progress and retries."""
        return fetched_wheel(
            self.client,
            wheel,
            path,
            on_bytes=self.on_bytes,
            retries=self.retries,
            retry_delay=self.retry_delay,
        )


@dataclass(frozen=True)
class PartPlan:
    """One file of the model to produce.

    `key` identifies the bytes before they are fetched: `digest_key(sha256)` when the digest
    is known in advance, else `origin_key(...)` of where they come from. It names the lock,
    the partial file, and lets a later pull find the result. `size` and `sha256`, when known,
    are checked after the fetch; `transfer` is how many bytes the fetch moves (for progress;
    defaults to `size`). `filename` is the original name (split parts keep theirs)."""

    filename: str
    key: str
    fetch: Callable[[FetchContext], Staged]
    size: int | None = None
    sha256: str | None = None
    transfer: int | None = None
    origin: dict[str, Any] = field(default_factory=dict)

    @property
    def transfer_size(self) -> int:
        return self.transfer if self.transfer is not None else (self.size or 0)


@dataclass(frozen=True)
class PullPlan:
    """A model to pull: its default `name`, its `parts` in order, and `source`, the JSON
    recorded in the manifest to say where it came from."""

    name: ModelName
    parts: tuple[PartPlan, ...]
    source: dict[str, Any]


@dataclass(frozen=True)
class SourceEnv:
    """Settings sources read: client, layout, catalog, package index, Hugging Face endpoint
    and token (sent only to that endpoint; redirects to other hosts drop it)."""

    client: httpx.Client
    layout: Layout
    catalog: Catalog
    index_url: str
    hf_endpoint: str
    hf_token: str | None = None


class Source(Protocol):
    """A kind of pull source."""

    def accepts(self, spec: str, env: SourceEnv) -> bool:
        """For sources tried on a spec without a scheme: whether `spec` is theirs."""
        ...

    def plan(self, spec: str, env: SourceEnv) -> PullPlan:
        """Plan the pull of `spec` (scheme included). Raises InvalidRequest for a malformed
        spec, ModelNotFound when the thing named does not exist, StoreError when the remote
        cannot be asked."""
        ...


def digest_key(sha256: str) -> str:
    return f"sha256-{sha256}"


def origin_key(*parts: str) -> str:
    """A key for bytes whose digest is not known in advance, from what identifies them."""
    return "src-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:40]


def http_part(
    filename: str,
    url: str,
    *,
    size: int | None,
    sha256: str | None,
    headers: Mapping[str, str] | None = None,
    key: str | None = None,
    origin: dict[str, Any] | None = None,
) -> PartPlan:
    """A part downloaded from `url` with resume (see `llamay.store.net.download`)."""
    sent = dict(headers or {})

    def fetch(ctx: FetchContext) -> Staged:
        partial = ctx.layout.partial(ctx.key)
        download(
            ctx.client,
            url,
            partial,
            label=filename,
            expected_size=size,
            on_bytes=ctx.on_bytes,
            headers=sent,
            retries=ctx.retries,
            retry_delay=ctx.retry_delay,
        )
        return Staged(partial)

    return PartPlan(
        filename=filename,
        key=key or (digest_key(sha256) if sha256 else origin_key(url)),
        fetch=fetch,
        size=size,
        sha256=sha256,
        origin=origin if origin is not None else {"url": url},
    )
