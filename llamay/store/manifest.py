"""Manifests: what a model name points to.

A manifest names one or more blobs (`parts`: one for an ordinary GGUF, several for a llama.cpp
split set, in order) by their sha256, and carries where they came from (`source`) and the
per-model settings a `create` gave it (`params`, `template`, `system`). On disk it is JSON:

    {"schema": 2, "namespace": "library", "name": "smollm2", "tag": "135m",
     "digest": "sha256:<first part>", "size": <total bytes>,
     "parts": [{"digest": "sha256:<hex>", "size": 98362432, "filename": "...gguf"}],
     "source": {...}, "params": {"temperature": 0.6}, "template": null, "system": null,
     "created": "2025-01-01T00:00:00+00:00"}

Schema-1 manifests (no namespace, parts or params) are still read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from llamay.store.names import DEFAULT_NAMESPACE, ModelName

__all__ = ["Manifest", "Part"]

_HEX64 = re.compile(r"[0-9a-f]{64}")


def _digest(value: object) -> str:
    algo, _, digest = str(value).partition(":")
    if algo != "sha256" or not _HEX64.fullmatch(digest):
        raise ValueError(f"unsupported digest {value!r}")
    return digest


@dataclass(frozen=True)
class Part:
    """One blob of a model: hex sha256 `digest`, `size` in bytes, the original `filename`
    (what llama.cpp needs to find the other parts of a split set), and `key`: the id the bytes
    were fetched under when their digest was not known in advance ("" otherwise), so that a
    later pull of the same source finds them without fetching again."""

    digest: str
    size: int
    filename: str = ""
    key: str = ""

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"digest": f"sha256:{self.digest}", "size": self.size}
        if self.filename:
            data["filename"] = self.filename
        if self.key:
            data["key"] = self.key
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Part:
        return cls(
            digest=_digest(data["digest"]),
            size=int(data["size"]),
            filename=str(data.get("filename") or ""),
            key=str(data.get("key") or ""),
        )


@dataclass(frozen=True)
class Manifest:
    """A name -> its `parts` (at least one), plus `source` (free-form JSON describing the
    origin), `params` (Ollama-style option names -> values), an optional chat `template`
    (Jinja) and `system` prompt, and `created` (ISO 8601, UTC)."""

    name: ModelName
    parts: tuple[Part, ...]
    source: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    template: str | None = None
    system: str | None = None
    created: str = ""

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a manifest needs at least one part")

    @property
    def digest(self) -> str:
        """The model's id: the first part's digest (the only part for an unsplit model)."""
        return self.parts[0].digest

    @property
    def size(self) -> int:
        return sum(part.size for part in self.parts)

    def digests(self) -> set[str]:
        return {part.digest for part in self.parts}

    def to_json(self) -> str:
        data = {
            "schema": 2,
            "namespace": self.name.namespace,
            "name": self.name.model,
            "tag": self.name.tag,
            "digest": f"sha256:{self.digest}",
            "size": self.size,
            "parts": [part.to_dict() for part in self.parts],
            "source": self.source,
            "params": self.params,
            "template": self.template,
            "system": self.system,
            "created": self.created,
        }
        return json.dumps(data, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse a manifest; ValueError, KeyError or TypeError if it is malformed."""
        data = json.loads(text)
        name = ModelName(str(data.get("namespace") or DEFAULT_NAMESPACE), str(data["name"]), str(data["tag"]))
        if "parts" in data:
            parts = tuple(Part.from_dict(p) for p in data["parts"])
        else:  # schema 1: one blob
            parts = (Part(_digest(data["digest"]), int(data["size"]), f"{name.model}.gguf"),)
        template, system = data.get("template"), data.get("system")
        return cls(
            name=name,
            parts=parts,
            source=dict(data.get("source") or {}),
            params=dict(data.get("params") or {}),
            template=None if template is None else str(template),
            system=None if system is None else str(system),
            created=str(data.get("created", "")),
        )
