"""Answers from your own documents: an index of passages over a folder, searched by meaning
and keywords, readable only by those the folder's access labels allow.

* `build_index(root, index_path, embedder)` builds or updates an index file (`llamay index
  build`): passages with exact byte ranges into their files, vectors, an FTS5 keyword index and
  each document's access label, in one SQLite file; unchanged files are not embedded again;
* `open_index(path)` opens it for searching (``app.state.index``);
* `retrieve(index, encoders, query, reader, top_k=, min_score=)` runs a hybrid search for a
  reader (``POST /v1/retrieve``, `llamay retrieve`).
"""

from .access import ADMIN, AccessResolver, Label, Reader, reader_of
from .build import BuildReport, build_index, scan
from .chunk import Passage, chunk
from .embedder import Embedder, EncoderEmbedder
from .extract import extract_file
from .extracted import Extracted, NotExtractable
from .index import Hit, Index, open_index
from .retrieve import Retrieved, query_encoder, retrieve
from .store import NotAnIndex

__all__ = [
    "ADMIN",
    "AccessResolver",
    "BuildReport",
    "Embedder",
    "EncoderEmbedder",
    "Extracted",
    "Hit",
    "Index",
    "Label",
    "NotAnIndex",
    "NotExtractable",
    "Passage",
    "Reader",
    "Retrieved",
    "build_index",
    "chunk",
    "extract_file",
    "open_index",
    "query_encoder",
    "reader_of",
    "retrieve",
    "scan",
]
