"""HTTP for the store: one client configuration, error wording, and resumable downloads.

`download` keeps what it received in a `.partial` file with a small JSON sidecar (URL, ETag,
total size), so a dropped connection, a crash or a Ctrl-C costs only the bytes in flight: the
next attempt asks for the rest with a `Range` request (`If-Range` guards against the file
having changed meanwhile) and appends. It retries dropped connections and server errors by
itself a few times; anything else is a StoreError.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import ssl
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from llamay.errors import StoreError

__all__ = ["describe", "discard", "download", "make_client"]

# The system bundle, tried when no variable names one: it is what the OS trusts (including
# any corporate CA installed there), which httpx's bundled certifi list would not include.
_SYSTEM_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
_RETRY_STATUS = {408, 429, 500, 502, 503, 504}
# A download whose size nobody announced (no Content-Length, no size from the source) stops
# here, or where the disk would keep less than DISK_RESERVE free, whichever comes first.
MAX_UNSIZED = int(os.environ.get("LLAMAY_MAX_DOWNLOAD", str(256 * 2**30)))
DISK_RESERVE = 1 * 2**30
_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")


# The CA bundle variables honoured by the tools people already configure (OpenSSL, requests,
# pip, curl), in that order; then a directory of certificates.
_CA_VARS = ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "CURL_CA_BUNDLE", "SSL_CERT_DIR")


def _ssl_context() -> ssl.SSLContext:
    # Loading a CA bundle takes a good part of a second; contexts are safe to share.
    return _context_for(tuple((var, os.environ.get(var)) for var in _CA_VARS))


@functools.lru_cache(maxsize=4)
def _context_for(env: tuple[tuple[str, str | None], ...]) -> ssl.SSLContext:
    settings = dict(env)
    for var in _CA_VARS[:-1]:
        path = settings.get(var)
        if path and os.path.isfile(path):
            return ssl.create_default_context(cafile=path)
    cert_dir = settings.get("SSL_CERT_DIR")
    if cert_dir and os.path.isdir(cert_dir):
        return ssl.create_default_context(capath=cert_dir)
    if os.path.isfile(_SYSTEM_CA_BUNDLE):
        return ssl.create_default_context(cafile=_SYSTEM_CA_BUNDLE)
    return ssl.create_default_context()


def make_client() -> httpx.Client:
    """An HTTP client for indexes, hubs and file downloads. trust_env makes
    HTTP(S)_PROXY/NO_PROXY apply; redirects are followed because file hosts redirect to CDNs."""
    return httpx.Client(
        verify=_ssl_context(),
        trust_env=True,
        follow_redirects=True,
        timeout=httpx.Timeout(60.0, connect=15.0),
        headers={"User-Agent": "llamay-store"},
    )


def describe(exc: httpx.HTTPError, url: str) -> str:
    """A one-line account of an HTTP failure, naming the host."""
    host = urlsplit(url).netloc or url
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out talking to {host}"
    if isinstance(exc, httpx.TransportError):
        return f"cannot reach {host} or the connection dropped ({type(exc).__name__}: {exc})"
    return f"request to {url} failed: {exc}"


class _Retry(Exception):
    """An attempt failed in a way worth retrying (connection dropped, server error)."""


def _sidecar(partial: Path) -> Path:
    return partial.with_name(partial.name + ".json")


def _resume_offset(partial: Path, url: str, expected_size: int | None) -> tuple[int, str | None]:
    """How many bytes of `partial` can be kept, and the ETag they were fetched under."""
    try:
        meta: dict[str, Any] = json.loads(_sidecar(partial).read_text(encoding="utf-8"))
        offset = partial.stat().st_size
    except (OSError, ValueError):
        return 0, None
    total = meta.get("size")
    if meta.get("url") != url or (expected_size is not None and total not in (None, expected_size)):
        return 0, None
    if expected_size is not None and offset > expected_size:
        return 0, None
    etag = meta.get("etag")
    return offset, etag if isinstance(etag, str) else None


def download(
    client: httpx.Client,
    url: str,
    partial: Path,
    *,
    label: str,
    expected_size: int | None,
    on_bytes: Callable[[int], None],
    headers: Mapping[str, str] | None = None,
    retries: int = 3,
    retry_delay: float = 0.25,
) -> None:
    """Bring `partial` to the complete content of `url`, resuming from what it holds.

    `on_bytes(n)` is called once with the bytes kept from an earlier attempt, then for every
    block written; a negative n means the server ignored a Range request and the download
    restarted from zero. When `expected_size` is known, a server announcing another size is
    refused before any byte is read, and one sending more is cut off. The caller still
    checks size and digest. Raises StoreError; `partial` is then kept for the next attempt."""
    offset, etag = _resume_offset(partial, url, expected_size)
    if offset == 0 and partial.exists():
        partial.unlink()
    on_bytes(offset)  # what an earlier attempt got counts as done
    if expected_size is not None and offset == expected_size:
        return
    for attempt in range(retries + 1):
        try:
            _attempt(client, url, partial, label, expected_size, on_bytes, dict(headers or {}), offset, etag)
            return
        except _Retry as exc:
            offset, etag = _resume_offset(partial, url, expected_size)
            if attempt == retries:
                raise StoreError(f"{exc} (kept {offset} bytes: pulling again resumes from there)") from exc
            time.sleep(retry_delay * 4**attempt)
        except OSError as exc:
            raise StoreError(f"downloading {label}: cannot write {partial}: {exc}") from exc


def _attempt(
    client: httpx.Client,
    url: str,
    partial: Path,
    label: str,
    expected_size: int | None,
    on_bytes: Callable[[int], None],
    headers: dict[str, str],
    offset: int,
    etag: str | None,
) -> None:
    # identity: Range offsets and Content-Length must count the bytes that are stored.
    headers["Accept-Encoding"] = "identity"
    if offset:
        headers["Range"] = f"bytes={offset}-"
        if etag and not etag.startswith("W/"):
            headers["If-Range"] = etag
    received = 0
    try:
        with client.stream("GET", url, headers=headers) as response:
            status = response.status_code
            host = urlsplit(str(response.url)).netloc
            if status == 416 and offset:
                match = re.fullmatch(r"bytes \*/(\d+)", response.headers.get("content-range", ""))
                if match and int(match[1]) == offset:
                    return  # we already hold every byte
                _reset(partial, offset, on_bytes)
                raise _Retry(f"downloading {label}: {host} refused to resume; starting over")
            if status in _RETRY_STATUS:
                raise _Retry(f"downloading {label}: HTTP {status} from {host}")
            if status not in (200, 206):
                raise StoreError(f"downloading {label}: HTTP {status} from {host}")
            total = _total(response, offset if status == 206 else 0)
            if status == 200 and offset:
                _reset(partial, offset, on_bytes)
                offset = 0
            if expected_size is not None and total is not None and total != expected_size:
                raise StoreError(f"{host} serves {label} with {total} bytes, expected {expected_size}")
            limit = total if total is not None else expected_size
            unsized = limit is None
            if limit is None:
                limit = min(MAX_UNSIZED, offset + max(0, _free_bytes(partial) - DISK_RESERVE))
            tag = response.headers.get("etag")
            meta = {"url": url, "etag": tag, "size": total}
            _sidecar(partial).write_text(json.dumps(meta), encoding="utf-8")
            with open(partial, "ab" if offset else "wb") as out:
                for block in response.iter_raw():  # as received: a drop loses nothing
                    if offset + received + len(block) > limit:
                        if unsized:
                            raise StoreError(
                                f"{host} sent {label} without a size, and more than the {limit} bytes "
                                "this store takes that way (LLAMAY_MAX_DOWNLOAD, free disk space)"
                            )
                        raise StoreError(f"{host} sent more than the {limit} bytes of {label}")
                    out.write(block)
                    received += len(block)
                    on_bytes(len(block))
                out.flush()
                os.fsync(out.fileno())
    except httpx.HTTPError as exc:
        raise _Retry(f"downloading {label}: {describe(exc, url)}") from exc


def _free_bytes(partial: Path) -> int:
    try:
        return shutil.disk_usage(partial.parent).free
    except OSError:
        return MAX_UNSIZED


def _total(response: httpx.Response, offset: int) -> int | None:
    """The full size of the file, from Content-Range (206) or Content-Length (200)."""
    if response.status_code == 206:
        match = _CONTENT_RANGE.fullmatch(response.headers.get("content-range", "").strip())
        if match is None or int(match[1]) != offset:
            raise StoreError(f"{response.url.host} answered a Range request with a wrong range")
        return None if match[3] == "*" else int(match[3])
    length = response.headers.get("content-length", "")
    return int(length) if length.isdigit() else None


def discard(partial: Path) -> None:
    """Delete a download, complete or not, with what `download` keeps beside it."""
    partial.unlink(missing_ok=True)
    _sidecar(partial).unlink(missing_ok=True)


def _reset(partial: Path, offset: int, on_bytes: Callable[[int], None]) -> None:
    discard(partial)
    on_bytes(-offset)
