"""Model names: `namespace/model:tag`, Ollama style.

`tag` defaults to `latest` and `namespace` to `library`, which is also left out when a name is
shown (`smollm2:135m` is `library/smollm2:135m`). Every part becomes a path component under
`models/manifests/`, so parts are restricted to lowercase `[a-z0-9][a-z0-9._-]*`: nothing can
climb out of that directory, and two spellings cannot collide on a case-insensitive disk.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DEFAULT_NAMESPACE", "ModelName", "parse_name", "sanitize_part", "split_names", "split_set"]

DEFAULT_NAMESPACE = "library"

_PART = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
# llama.cpp's split naming, `<prefix>-%05d-of-%05d.gguf`: it finds the other parts of a model
# from the first one's path by exactly this pattern (llama_split_prefix / llama_split_path).
_SPLIT = re.compile(r"(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class ModelName:
    """A parsed, canonical model name. `str()` gives the display form (no `library/`),
    `full` the complete `namespace/model:tag`."""

    namespace: str
    model: str
    tag: str

    @property
    def full(self) -> str:
        return f"{self.namespace}/{self.model}:{self.tag}"

    def __str__(self) -> str:
        prefix = "" if self.namespace == DEFAULT_NAMESPACE else f"{self.namespace}/"
        return f"{prefix}{self.model}:{self.tag}"


def parse_name(text: str) -> ModelName | None:
    """Parse `[namespace/]model[:tag]` (case-insensitive, surrounding blanks ignored) into a
    canonical ModelName, or None if it is not a well-formed name."""
    path, sep, tag = text.strip().lower().partition(":")
    if not sep:
        tag = "latest"
    namespace, slash, model = path.rpartition("/")
    if not slash:
        namespace = DEFAULT_NAMESPACE
    if all(_PART.fullmatch(part) for part in (namespace, model, tag)):
        return ModelName(namespace, model, tag)
    return None


def sanitize_part(text: str, fallback: str = "model") -> str:
    """`text` made into a valid name part: lowercased, other characters replaced by `-`,
    leading punctuation dropped, at most 128 characters (so `My Model.Q4` -> `my-model.q4`)."""
    cleaned = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).lstrip("._-")[:128].rstrip("-")
    return cleaned or fallback


def split_set(filename: str) -> tuple[str, int, int] | None:
    """`(prefix, number, count)` if `filename` is one part of a llama.cpp split set
    (`model-00002-of-00003.gguf` -> `("model", 2, 3)`), else None."""
    match = _SPLIT.fullmatch(filename)
    if match is None:
        return None
    number, count = int(match["no"]), int(match["count"])
    if not 1 <= number <= count:
        return None
    return match["prefix"], number, count


def split_names(prefix: str, count: int) -> list[str]:
    """Every file name of a split set, in order."""
    return [f"{prefix}-{n:05d}-of-{count:05d}.gguf" for n in range(1, count + 1)]
