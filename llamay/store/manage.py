"""Manifest operations that need no download: copy, remove (with blob reference counting),
and writing a derived manifest (`create`). All run under the manifests lock, which the pull
pipeline also takes to commit, so a blob is never deleted under a pull that is about to
reference it (and one being fetched right now is left alone).
"""

from __future__ import annotations

import dataclasses
import shutil
from datetime import UTC, datetime
from typing import Any

from llamay.errors import InvalidRequest, ModelNotFound
from llamay.store.catalog import Catalog
from llamay.store.layout import MANIFESTS_LOCK, Layout
from llamay.store.manifest import Manifest
from llamay.store.names import ModelName
from llamay.store.sources import digest_key

__all__ = ["copy_manifest", "guard_catalog_name", "remove_model", "write_derived"]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def guard_catalog_name(catalog: Catalog, name: ModelName, digests: list[str] | None) -> None:
    """Refuse to point a catalog name at other bytes than the catalog's: the next resolve
    would fetch the catalog model over it. `digests` None means not known yet (refused)."""
    if name.namespace != "library":
        return
    entry = catalog.get(f"{name.model}:{name.tag}")
    if entry is not None and digests != [entry.sha256]:
        raise InvalidRequest(f"{name} is a catalog model name; choose another name", param="name")


def copy_manifest(layout: Layout, catalog: Catalog, src: ModelName, dst: ModelName) -> Manifest:
    """Point `dst` at `src`'s blobs, with its params, template and system prompt (nothing is
    copied on disk). ModelNotFound if `src` is not stored."""
    with layout.lock(MANIFESTS_LOCK):
        manifest = layout.read_manifest(src)
        if manifest is None:
            raise ModelNotFound(f"model '{src}' not found", param="source")
        guard_catalog_name(catalog, dst, [p.digest for p in manifest.parts])
        copied = dataclasses.replace(manifest, name=dst, created=_now())
        layout.write_manifest(copied)
        return copied


def write_derived(
    layout: Layout,
    catalog: Catalog,
    base: Manifest,
    name: ModelName,
    *,
    params: dict[str, Any],
    template: str | None,
    system: str | None,
    source: str,
) -> Manifest:
    """Write `name` with `base`'s blobs; `params` overlay base's, and `template`/`system`
    replace base's when given (not None)."""
    with layout.lock(MANIFESTS_LOCK):
        guard_catalog_name(catalog, name, [p.digest for p in base.parts])
        manifest = Manifest(
            name=name,
            parts=base.parts,
            source={**base.source, "from": source},
            params={**base.params, **params},
            template=template if template is not None else base.template,
            system=system if system is not None else base.system,
            created=_now(),
        )
        layout.write_manifest(manifest)
        if len(manifest.parts) > 1:
            layout.link_split(manifest)
        return manifest


def remove_model(layout: Layout, name: ModelName, *, label: str | None = None) -> Manifest:
    """Delete `name`'s manifest, then every blob of it that no other manifest uses (and is
    not being fetched right now), and its split folder if no other manifest uses it. Returns
    the removed manifest; ModelNotFound (naming it `label`, default `name`) if there was none."""
    with layout.lock(MANIFESTS_LOCK):
        manifest = layout.read_manifest(name)
        if manifest is None or not layout.delete_manifest(name):
            raise ModelNotFound(f"model '{label or name}' not found", param="model")
        used: set[str] = set()
        folders = set()
        for _, other in layout.iter_manifests():
            used |= other.digests()
            if len(other.parts) > 1:
                folders.add(layout.split_dir(other))
        if len(manifest.parts) > 1 and layout.split_dir(manifest) not in folders:
            shutil.rmtree(layout.split_dir(manifest), ignore_errors=True)
        for digest in manifest.digests() - used:
            if not layout.is_locked(digest_key(digest)):
                layout.blob(digest).unlink(missing_ok=True)
        return manifest
