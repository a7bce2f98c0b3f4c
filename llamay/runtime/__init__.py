"""Loaded models and their engines: what the HTTP layer, the CLI and the library serve from.

`loading` builds one loaded model (weights, context, KV manager, engine, template);
`resident` keeps models resident (`Runtime`: load on demand, keep-alive, eviction);
`encoders` is the embeddings facade (encoders and the retrieval index beside the models).
"""

from ..backend.memory import mem_available
from ..config import RuntimeConfig
from .loading import LoadedModel, LoadRefused, check_memory, default_threads, load_model
from .resident import MANAGE_MODELS, MODELS_USED, Runtime, Store

__all__ = [
    "MANAGE_MODELS",
    "MODELS_USED",
    "LoadedModel",
    "LoadRefused",
    "Runtime",
    "RuntimeConfig",
    "Store",
    "check_memory",
    "default_threads",
    "load_model",
    "mem_available",
]
