"""What the store answers: a model to load, a stored model, and `show`'s details."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llamay.store.manifest import Manifest, Part

__all__ = ["ModelDetails", "ResolvedModel", "StoredModel", "stored_model"]


@dataclass(frozen=True)
class ResolvedModel:
    """A model ready to load. `name` is the display name (`smollm2:135m`, `user/m:tag`) or,
    for a file path, the file's stem; `path` is absolute (for a split set: its first part);
    `sha256` is the stored model's digest (its first part's) and None for an arbitrary file
    (hashing it at every start would cost too much; see `file_sha256`)."""

    name: str
    path: Path
    sha256: str | None


@dataclass(frozen=True)
class StoredModel:
    """A model present in the store: display `name`, loadable `path`, total `size` in bytes,
    `sha256` (first part's), `modified` (UTC) = when its manifest was last written, and how
    many `parts` (files) it has."""

    name: str
    path: Path
    size: int
    sha256: str
    modified: datetime
    parts: int = 1


@dataclass(frozen=True)
class ModelDetails(StoredModel):
    """`show`'s answer: a StoredModel plus the manifest's `files` (parts), `source`, own
    `params` (as created), GGUF `defaults` (general.sampling.*), `effective` parameters
    (defaults overlaid by params), chat `template` and `system` prompt."""

    files: tuple[Part, ...] = ()
    source: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    effective: dict[str, Any] = field(default_factory=dict)
    template: str | None = None
    system: str | None = None


def stored_model(manifest: Manifest, path: Path, manifest_path: Path) -> StoredModel:
    """The StoredModel for `manifest`, loadable at `path`, modified when `manifest_path` was."""
    try:
        modified = datetime.fromtimestamp(manifest_path.stat().st_mtime, UTC)
    except OSError:
        modified = datetime.now(UTC)
    return StoredModel(
        str(manifest.name), path, manifest.size, manifest.digest, modified, len(manifest.parts)
    )
