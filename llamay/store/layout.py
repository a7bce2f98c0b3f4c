"""The on-disk layout of the store, its manifests, and the lock that serializes fetches.

    <home>/models/blobs/sha256-<hex>                GGUF files, named by their content digest
    <home>/models/manifests/<model>/<tag>.json      which blob a name points to, and whence
    <home>/models/tmp/                              downloads in progress (same filesystem as
                                                    blobs/, so the final rename is atomic)
    <home>/models/locks/sha256-<hex>.lock           held while that blob is being fetched

A blob only ever appears by atomic rename after its digest was verified, and a manifest is
written (atomically too) only after its blob is in place, so readers never see partial data
and need no lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Layout", "Manifest", "file_sha256", "llamay_home"]

try:
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX; atomic renames still keep blobs whole
    fcntl = None  # type: ignore[assignment]


def llamay_home() -> Path:
    """`$LLAMAY_HOME` if set, else `~/.llamay`."""
    env = os.environ.get("LLAMAY_HOME")
    return Path(env).expanduser() if env else Path.home() / ".llamay"


@dataclass(frozen=True)
class Manifest:
    """What a name points to: blob `digest` (hex sha256) of `size` bytes, obtained from
    `source` (free-form JSON describing the index and wheels), written at `created` (ISO)."""

    name: str
    tag: str
    digest: str
    size: int
    source: dict[str, Any] = field(default_factory=dict)
    created: str = ""

    def to_json(self) -> str:
        data = asdict(self)
        data["digest"] = f"sha256:{self.digest}"
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        data = json.loads(text)
        algo, _, digest = str(data["digest"]).partition(":")
        if algo != "sha256" or len(digest) != 64:
            raise ValueError(f"unsupported digest {data['digest']!r}")
        return cls(
            name=str(data["name"]),
            tag=str(data["tag"]),
            digest=digest,
            size=int(data["size"]),
            source=dict(data.get("source") or {}),
            created=str(data.get("created", "")),
        )


class Layout:
    """Paths under one home directory, plus manifest I/O and the per-blob fetch lock."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.models = home / "models"
        self.blobs = self.models / "blobs"
        self.manifests = self.models / "manifests"
        self.tmp = self.models / "tmp"
        self.locks = self.models / "locks"

    def blob(self, sha256: str) -> Path:
        return self.blobs / f"sha256-{sha256}"

    def manifest(self, model: str, tag: str) -> Path:
        return self.manifests / model / f"{tag}.json"

    def make_dirs(self) -> None:
        for directory in (self.blobs, self.manifests, self.tmp, self.locks):
            directory.mkdir(parents=True, exist_ok=True)

    def temp_file(self, sha256: str, suffix: str) -> Path:
        """A new, uniquely named empty file in tmp/ whose name starts with the blob's digest
        (so `clear_temps` can find leftovers of a crashed fetch of the same blob)."""
        fd, name = tempfile.mkstemp(prefix=f"sha256-{sha256}.", suffix=suffix, dir=self.tmp)
        os.close(fd)
        # mkstemp makes it 0600; blobs and manifests are renamed from here and must stay
        # readable by other users who share the store (e.g. a server running as another user).
        os.chmod(name, 0o644)
        return Path(name)

    def clear_temps(self, sha256: str) -> None:
        """Delete temp files of earlier fetches of this blob. Only safe under `lock(sha256)`:
        then no live fetch of this blob can own them."""
        for path in self.tmp.glob(f"sha256-{sha256}.*"):
            path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def lock(self, sha256: str, *, on_wait: str | None = None) -> Iterator[None]:
        """Hold an exclusive lock for fetching this blob, across threads and processes.

        flock() locks belong to the open file description, so two threads that each open the
        lock file exclude each other just as two processes do. `on_wait` is printed to stderr
        if the lock is busy, so a blocked caller knows why it is waiting."""
        self.make_dirs()
        with open(self.locks / f"sha256-{sha256}.lock", "a+b") as handle:
            if fcntl is not None:
                try:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if on_wait:
                        print(on_wait, file=sys.stderr, flush=True)
                    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def read_manifest(self, model: str, tag: str) -> Manifest | None:
        """The manifest for `model:tag`, or None if absent or unreadable (an unreadable one is
        treated as absent so that the model is fetched again rather than failing forever)."""
        try:
            return Manifest.from_json(self.manifest(model, tag).read_text(encoding="utf-8"))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_manifest(self, manifest: Manifest) -> Path:
        """Write atomically: a reader sees the old manifest or the new one, never half."""
        path = self.manifest(manifest.name, manifest.tag)
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = self.temp_file(manifest.digest, ".json")
        try:
            temp.write_text(manifest.to_json(), encoding="utf-8")
            os.replace(temp, path)
        finally:
            temp.unlink(missing_ok=True)
        return path

    def iter_manifests(self) -> Iterator[tuple[Path, Manifest]]:
        """Every readable manifest, in path order."""
        for path in sorted(self.manifests.glob("*/*.json")):
            manifest = self.read_manifest(path.parent.name, path.stem)
            if manifest is not None:
                yield path, manifest


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
