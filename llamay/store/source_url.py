"""`http://` and `https://` sources: a GGUF file at a URL.

A HEAD request tells the size and, when the server gives one, a sha256: as `X-Linked-Etag` or
an `ETag` that is 64 hex digits (Hugging Face and other LFS-backed hosts do this), or pinned
by the caller in the URL fragment, `#sha256=<hex>` (pip's convention). With no digest, the
download is only checked against the announced size. A URL naming one part of a split set
(`...-00001-of-00003.gguf`) pulls every part, from the sibling URLs. Downloads resume.
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from llamay.errors import InvalidRequest, ModelNotFound
from llamay.store.names import ModelName, sanitize_part, split_names, split_set
from llamay.store.sources import PartPlan, PullPlan, SourceEnv, http_part, origin_key

__all__ = ["UrlSource", "etag_sha256"]

_HEX64 = re.compile(r"[0-9a-f]{64}")


def etag_sha256(value: str | None) -> str | None:
    """The sha256 an ETag carries (`"<64 hex>"`, possibly weak), or None."""
    if not value:
        return None
    tag = value.strip().removeprefix("W/").strip('"').lower()
    return tag if _HEX64.fullmatch(tag) else None


def plain_filename(name: str, spec: str) -> str:
    """`name` if it is a plain file name; InvalidRequest for one that unquoting made into a
    path ("..%2Fx.gguf"), a hidden or control-character name: parts of a split set are
    stored under their names, so one must never reach outside the store."""
    if (
        name in (".", "..")
        or name.startswith(".")
        or any(c in name for c in "/\\")
        or any(ord(c) < 32 for c in name)
        or len(name) > 255
    ):
        raise InvalidRequest(
            f"bad source {spec[:300]!r}: the file name {name[:100]!r} is not a plain file name"
        )
    return name


class UrlSource:
    """The `http:` and `https:` schemes (see the module docstring)."""

    def accepts(self, spec: str, env: SourceEnv) -> bool:
        return False  # only ever chosen by its scheme

    def plan(self, spec: str, env: SourceEnv) -> PullPlan:
        url, _, fragment = spec.partition("#")
        pinned = None
        if fragment:
            algo, _, value = fragment.partition("=")
            if algo != "sha256" or not _HEX64.fullmatch(value.lower()):
                raise InvalidRequest(f"bad source {spec!r}: the only fragment understood is #sha256=<64 hex>")
            pinned = value.lower()
        parts = urlsplit(url)
        if not parts.netloc:
            raise InvalidRequest(f"bad source {spec!r}: not a URL")
        filename = plain_filename(unquote(posixpath.basename(parts.path)) or "model.gguf", spec)
        split = split_set(filename)
        plans: tuple[PartPlan, ...]
        if split is None:
            plans = (self._part(env, url, filename, pinned),)
            stem = filename.removesuffix(".gguf")
        else:
            folder = posixpath.dirname(parts.path)
            plans = tuple(
                self._part(env, urlunsplit(parts._replace(path=posixpath.join(folder, name))), name, None)
                for name in split_names(split[0], split[2])
            )
            stem = split[0]
        name = ModelName("library", sanitize_part(stem), "latest")
        return PullPlan(name, plans, {"type": "url", "url": url})

    @staticmethod
    def _part(env: SourceEnv, url: str, filename: str, pinned: str | None) -> PartPlan:
        size, etag, sha256 = None, None, None
        try:
            response = env.client.head(url, headers={"Accept-Encoding": "identity"})
        except httpx.HTTPError:
            response = None  # the GET will say what is wrong, or work where HEAD does not
        if response is not None and response.status_code in (404, 410):
            raise ModelNotFound(f"{url}: HTTP {response.status_code}", param="model")
        if response is not None and response.status_code == 200:
            hops = [*response.history, response]
            linked = next((r.headers["x-linked-etag"] for r in hops if "x-linked-etag" in r.headers), None)
            etag = linked or response.headers.get("etag")
            sha256 = etag_sha256(etag)
            length = next((r.headers["x-linked-size"] for r in hops if "x-linked-size" in r.headers), None)
            length = length or response.headers.get("content-length")
            size = int(length) if length and length.isdigit() else None
        if pinned is not None:
            sha256 = pinned
        return http_part(
            filename,
            url,
            size=size,
            sha256=sha256,
            key=None if sha256 else origin_key(url, etag or "", str(size)),
            origin={"url": url},
        )
