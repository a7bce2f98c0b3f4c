"""The on-disk layout of the store, manifest I/O, and the locks that serialize fetches.

    <home>/models/blobs/sha256-<hex>                        file contents, named by digest
    <home>/models/manifests/<namespace>/<model>/<tag>.json  which blobs a name points to
    <home>/models/splits/<id>/<original part names>         hard links to the blobs of a split
                                                            set, side by side under the names
                                                            llama.cpp derives from the first
    <home>/models/tmp/<key>.partial (+ .json)               downloads in progress (same file
                                                            system as blobs/: renames are atomic)
    <home>/models/locks/<key>.lock                          held while <key> is being fetched

A blob only appears by atomic rename after its digest was verified, and a manifest is written
(atomically too) only after its blobs are in place, so readers never see partial data and need
no lock. Manifests of the first layout (`manifests/<model>/<tag>.json`, namespace `library`)
are still read, and replaced by the new path when rewritten.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from llamay.errors import StoreError
from llamay.filelock import FileLock, is_locked
from llamay.store.manifest import Manifest
from llamay.store.names import DEFAULT_NAMESPACE, ModelName

__all__ = ["Layout", "file_sha256", "llamay_home"]

# The lock taken around every manifest change (write, copy, delete), held only briefly.
MANIFESTS_LOCK = "manifests"


def llamay_home() -> Path:
    """`$LLAMAY_HOME` if set, else `~/.llamay`."""
    env = os.environ.get("LLAMAY_HOME")
    return Path(env).expanduser() if env else Path.home() / ".llamay"


class Layout:
    """Paths under one home directory, plus manifest I/O and the per-key fetch locks."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.models = home / "models"
        self.blobs = self.models / "blobs"
        self.manifests = self.models / "manifests"
        self.splits = self.models / "splits"
        self.tmp = self.models / "tmp"
        self.locks = self.models / "locks"

    def blob(self, sha256: str) -> Path:
        return self.blobs / f"sha256-{sha256}"

    def manifest_path(self, name: ModelName) -> Path:
        return self.manifests / name.namespace / name.model / f"{name.tag}.json"

    def _legacy_path(self, name: ModelName) -> Path | None:
        if name.namespace != DEFAULT_NAMESPACE:
            return None
        return self.manifests / name.model / f"{name.tag}.json"

    def make_dirs(self) -> None:
        for directory in (self.blobs, self.manifests, self.tmp, self.locks):
            directory.mkdir(parents=True, exist_ok=True)

    def partial(self, key: str) -> Path:
        """Where the download for `key` accumulates; it survives failures so a later attempt
        resumes it. Only the holder of `lock(key)` may touch it."""
        return self.tmp / f"{key}.partial"

    def temp_file(self, key: str, suffix: str) -> Path:
        """A new, uniquely named empty file in tmp/ whose name starts with `key`."""
        fd, name = tempfile.mkstemp(prefix=f"{key}.", suffix=suffix, dir=self.tmp)
        os.close(fd)
        # mkstemp makes it 0600; blobs and manifests are renamed from here and must stay
        # readable by other users who share the store (e.g. a server running as another user).
        os.chmod(name, 0o644)
        return Path(name)

    def clear_temps(self, key: str) -> None:
        """Delete every temp file of `key`, partial downloads included. Only under lock(key)."""
        for path in self.tmp.glob(f"{key}.*"):
            path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def lock(self, key: str, *, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the exclusive lock `key`, across threads and processes (`llamay.filelock`:
        callers never nest a key). `on_wait` is called once if the lock is busy, before
        blocking, so a caller can say why it waits."""
        self.make_dirs()
        lock = FileLock(self.locks / f"{key}.lock")
        lock.acquire(on_wait=on_wait)
        try:
            yield
        finally:
            lock.release()

    def is_locked(self, key: str) -> bool:
        """Whether someone holds lock(key) right now (a fetch of it is under way)."""
        return is_locked(self.locks / f"{key}.lock")

    def read_manifest(self, name: ModelName) -> Manifest | None:
        """The manifest of `name`, or None if absent or unreadable (an unreadable one is treated
        as absent, so that a catalog model is fetched again rather than failing forever)."""
        for path in (self.manifest_path(name), self._legacy_path(name)):
            if path is None:
                continue
            try:
                manifest = Manifest.from_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            return dataclasses.replace(manifest, name=name)  # the path is what names it
        return None

    def write_manifest(self, manifest: Manifest) -> Path:
        """Write atomically: a reader sees the old manifest or the new one, never half."""
        path = self.manifest_path(manifest.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        temp = self.temp_file(f"manifest-{manifest.digest}", ".json")
        try:
            temp.write_text(manifest.to_json(), encoding="utf-8")
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)
        legacy = self._legacy_path(manifest.name)
        if legacy is not None:
            legacy.unlink(missing_ok=True)
        return path

    def delete_manifest(self, name: ModelName) -> bool:
        """Delete `name`'s manifest (either layout); True if there was one."""
        found = False
        for path in (self.manifest_path(name), self._legacy_path(name)):
            if path is not None and path.is_file():
                path.unlink()
                found = True
                with contextlib.suppress(OSError):  # tidy: drop directories left empty
                    path.parent.rmdir()
                    path.parent.parent.rmdir()
        return found

    def iter_manifests(self) -> Iterator[tuple[Path, Manifest]]:
        """Every readable manifest (either layout; the new one wins), in name order."""
        found: dict[ModelName, tuple[Path, Manifest]] = {}
        for path in sorted(self.manifests.glob("*/*.json")):  # first layout
            name = ModelName(DEFAULT_NAMESPACE, path.parent.name, path.stem)
            manifest = self.read_manifest(name)
            if manifest is not None:
                found[name] = (path, manifest)
        for path in sorted(self.manifests.glob("*/*/*.json")):
            name = ModelName(path.parent.parent.name, path.parent.name, path.stem)
            manifest = self.read_manifest(name)
            if manifest is not None:
                found[name] = (path, manifest)
        for name in sorted(found):
            yield found[name]

    def model_path(self, manifest: Manifest, *, link: bool) -> Path | None:
        """The file to load for `manifest` (its blob; for a split set the first part in its
        split folder), or None if a blob is missing. `link` (re)creates the split links."""
        blobs = [self.blob(p.digest) for p in manifest.parts]
        if not all(b.is_file() for b in blobs):
            return None
        if len(blobs) == 1:
            return blobs[0]
        if link:
            return self.link_split(manifest)
        return self.split_dir(manifest) / manifest.parts[0].filename

    def split_dir(self, manifest: Manifest) -> Path:
        """The folder holding a split set's parts under their original names (one per set)."""
        joined = "\n".join(part.digest for part in manifest.parts)
        return self.splits / hashlib.sha256(joined.encode()).hexdigest()[:32]

    def link_split(self, manifest: Manifest) -> Path:
        """Make sure the split folder of `manifest` holds every part under its original name,
        and return the first part's path there (what llama.cpp loads, finding the rest beside
        it). Hard links (same file system as blobs/), symbolic links where those fail."""
        folder = self.split_dir(manifest)
        for part in manifest.parts:
            # A part's name comes from its source: never let one reach outside its folder.
            if Path(part.filename).name != part.filename or part.filename in ("", ".", ".."):
                raise StoreError(
                    f"manifest {manifest.name}: part name {part.filename!r} is not a plain file name"
                )
        folder.mkdir(parents=True, exist_ok=True)
        for part in manifest.parts:
            link, blob = folder / part.filename, self.blob(part.digest)
            with contextlib.suppress(OSError):
                if os.path.samefile(link, blob):
                    continue
            link.unlink(missing_ok=True)
            try:
                os.link(blob, link)
            except OSError:
                link.symlink_to(blob)
        return folder / manifest.parts[0].filename


# Hashing a 100 MB+ file costs a noticeable fraction of a second, and callers (e.g. an API that
# reports digests) may ask repeatedly; the key changes whenever the file is replaced or edited.
_hash_cache: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's content, cached per (path, inode, size, mtime)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _hash_cache.get(key)
    if cached is None:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
        cached = _hash_cache[key] = digest.hexdigest()
    return cached
