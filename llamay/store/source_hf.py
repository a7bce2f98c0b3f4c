"""`hf:` sources: GGUF files on a Hugging Face hub.

    hf:OWNER/REPO/PATH/FILE.gguf   that file (with all its parts, if it is one of a split set)
    hf:OWNER/REPO:QUANT            the one GGUF model of the repo whose name carries QUANT
    hf:OWNER/REPO                  the repo's only GGUF model
    OWNER/REPO[:QUANT]             the same without the scheme, as Ollama takes it
                                   (`HfBareSource`: only when nothing local is named so)

The hub's tree API (`GET {endpoint}/api/models/{repo}/tree/main/{dir}`) lists each file with
its size and, for LFS files (every GGUF in practice), `lfs.oid`: the file's sha256, checked
after download. Files come from `{endpoint}/{repo}/resolve/main/{path}`, which redirects to a
CDN; downloads resume with Range requests. The endpoint is `$LLAMAY_HF_ENDPOINT` (default
https://huggingface.co); `$HF_TOKEN`, if set, is sent for gated and private repos.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any
from urllib.parse import quote

import httpx

from llamay.errors import InvalidRequest, ModelNotFound, StoreError
from llamay.store.names import ModelName, sanitize_part, split_names, split_set
from llamay.store.net import describe
from llamay.store.sources import PartPlan, PullPlan, SourceEnv, http_part, origin_key

__all__ = ["HfBareSource", "HfSource", "quant_label"]

_REVISION = "main"
_QUANT = re.compile(r"(?<![a-z0-9])(i?q\d[a-z0-9_]*|bf16|f16|f32)(?![a-z0-9])", re.IGNORECASE)
_HEX64 = re.compile(r"[0-9a-f]{64}")
# OWNER/REPO[:QUANT] as the hub spells them: no pattern that can backtrack, and a bounded length.
_BARE_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*(?::[A-Za-z0-9._-]+)?")


def quant_label(filename: str) -> str | None:
    """The quantization named in a GGUF file name (`Model-Q4_K_M.gguf` -> `Q4_K_M`), or None."""
    stem = posixpath.basename(filename)
    split = split_set(stem)
    stem = split[0] if split else stem.removesuffix(".gguf")
    found = _QUANT.findall(stem)
    return found[-1] if found else None


def _has_quant(path: str, quant: str) -> bool:
    pattern = rf"(?<![a-z0-9_]){re.escape(quant.lower())}(?![a-z0-9_])"
    return re.search(pattern, posixpath.basename(path).lower()) is not None


class HfSource:
    """The `hf:` scheme (see the module docstring)."""

    def accepts(self, spec: str, env: SourceEnv) -> bool:
        return False  # only ever chosen by its scheme

    def plan(self, spec: str, env: SourceEnv) -> PullPlan:
        ref = spec.partition(":")[2].lstrip("/")
        owner, _, rest = ref.partition("/")
        repo, _, path = rest.partition("/")
        quant = None
        if not path:
            repo, _, quant = repo.partition(":")
        if not owner or not repo or ".." in ref.split("/"):
            raise InvalidRequest(
                f"bad source {spec!r}: expected hf:OWNER/REPO/FILE.gguf or hf:OWNER/REPO[:QUANT]"
            )
        repo_id = f"{owner}/{repo}"
        if path:
            directory = posixpath.dirname(path)
            files = self._tree(env, repo_id, directory, recursive=False)
            chosen = self._set_of(files, path, repo_id)
        else:
            files = self._tree(env, repo_id, "", recursive=True)
            chosen = self._by_quant(files, repo_id, quant or None)
        headers = {"Authorization": f"Bearer {env.hf_token}"} if env.hf_token else {}
        parts = tuple(self._part(env, repo_id, files[p], headers) for p in chosen)
        tag = quant or quant_label(chosen[0]) or "latest"
        name = ModelName(sanitize_part(owner), sanitize_part(repo), sanitize_part(tag, "latest"))
        source = {
            "type": "hf",
            "endpoint": env.hf_endpoint,
            "repo": repo_id,
            "revision": _REVISION,
            "files": list(chosen),
        }
        return PullPlan(name, parts, source)

    def _tree(
        self, env: SourceEnv, repo_id: str, directory: str, *, recursive: bool
    ) -> dict[str, dict[str, Any]]:
        """path -> entry for the files in `directory` of the repo."""
        url = f"{env.hf_endpoint.rstrip('/')}/api/models/{repo_id}/tree/{_REVISION}"
        if directory:
            url += "/" + quote(directory)
        headers = {"Authorization": f"Bearer {env.hf_token}"} if env.hf_token else {}
        try:
            response = env.client.get(
                url, params={"recursive": "true"} if recursive else None, headers=headers
            )
        except httpx.HTTPError as exc:
            raise StoreError(f"Hugging Face API: {describe(exc, url)}") from exc
        if response.status_code == 404:
            raise ModelNotFound(
                f"{repo_id}: no such repository or folder on {env.hf_endpoint}", param="model"
            )
        if response.status_code in (401, 403):
            raise StoreError(
                f"{repo_id} is gated or private on {env.hf_endpoint}: set HF_TOKEN to a token with access"
            )
        if response.status_code != 200:
            raise StoreError(f"Hugging Face API {url} answered HTTP {response.status_code}")
        try:
            entries = response.json()
            return {str(e["path"]): e for e in entries if e.get("type") == "file"}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StoreError(f"Hugging Face API {url} sent a malformed listing") from exc

    @staticmethod
    def _set_of(files: dict[str, dict[str, Any]], path: str, repo_id: str) -> list[str]:
        """`path`, or every part of the split set it belongs to, in order."""
        if path not in files:
            raise ModelNotFound(f"{path} not found in {repo_id}", param="model")
        split = split_set(posixpath.basename(path))
        if split is None:
            return [path]
        directory = posixpath.dirname(path)
        parts = [posixpath.join(directory, n) for n in split_names(split[0], split[2])]
        missing = [p for p in parts if p not in files]
        if missing:
            raise ModelNotFound(f"{repo_id} lacks parts of the split set {path}: {', '.join(missing)}")
        return parts

    def _by_quant(self, files: dict[str, dict[str, Any]], repo_id: str, quant: str | None) -> list[str]:
        models = sorted(
            p
            for p in files
            if p.lower().endswith(".gguf")
            and "mmproj" not in p.lower()
            and (split_set(posixpath.basename(p)) or ("", 1, 1))[1] == 1
        )
        if quant is not None:
            models = [p for p in models if _has_quant(p, quant)]
        if len(models) != 1:
            what = f" with {quant}" if quant else ""
            listing = ", ".join(models) or "none"
            error = ModelNotFound if not models else InvalidRequest
            raise error(
                f"{repo_id} has {len(models)} GGUF models{what} ({listing}); name one as "
                f"hf:{repo_id}/FILE.gguf or hf:{repo_id}:QUANT",
                param="model",
            )
        return self._set_of(files, models[0], repo_id)

    @staticmethod
    def _part(env: SourceEnv, repo_id: str, entry: dict[str, Any], headers: dict[str, str]) -> PartPlan:
        path = str(entry["path"])
        lfs = entry.get("lfs") or {}
        oid = str(lfs.get("oid", "")).lower()
        size = lfs.get("size", entry.get("size"))
        url = f"{env.hf_endpoint.rstrip('/')}/{repo_id}/resolve/{_REVISION}/{quote(path)}"
        sha256 = oid if _HEX64.fullmatch(oid) else None
        return http_part(
            posixpath.basename(path),
            url,
            size=int(size) if isinstance(size, int) else None,
            sha256=sha256,
            headers=headers,
            # Not in LFS: the git blob id still changes whenever the content does.
            key=None if sha256 else origin_key(url, str(entry.get("oid", ""))),
            origin={"url": url, "path": path},
        )


class HfBareSource:
    """`OWNER/REPO[:QUANT]` without the `hf:` scheme; tried after the catalog and local files."""

    def accepts(self, spec: str, env: SourceEnv) -> bool:
        return len(spec) <= 200 and _BARE_REPO.fullmatch(spec) is not None

    def plan(self, spec: str, env: SourceEnv) -> PullPlan:
        return HfSource().plan(f"hf:{spec}", env)
