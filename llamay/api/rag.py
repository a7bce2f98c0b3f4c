"""HTTP routes for retrieval: ``POST /v1/retrieve``.

Body: ``query`` (string, required), ``top_k`` (1..100, default 5), ``min_score`` (drop passages
scoring less).  Answer: ``{"object": "list", "data": [{"text", "source", "start", "end",
"score"}], "method": "hybrid" | "hybrid+rerank", "index": ID}``, best first.  ``source`` is the file's path
under the indexed folder and [start, end) the byte range of that file the passage came from
(for text and Markdown, exactly the passage text).  ``score`` is the reciprocal-rank-fusion
score of the vector and keyword rankings, or the reranker's relevance score when the server
holds a reranker (see `llamay.rag.retrieve`).  ``index`` is the index's id (`index_id`), the
vector store id the Responses API's `file_search` tool names it by.

Only passages the caller may read take part: its key's groups against each document's access
label (admins read everything; without keys the local user is an admin).  The index is
the app state's `index` (None: 404) and `encoders`.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import NotFound
from ..rag.access import reader_of
from ..rag.index import Index
from ..rag.retrieve import MAX_TOP_K, retrieve
from .authn import principal_of
from .fields import Fields
from .http import json_response, read_json, until_disconnect
from .state import state_of

__all__ = ["index_id", "rag_routes"]


def index_id(index: Index) -> str:
    """The id the server's index answers to (as a vector store, to `file_search`): its file's
    name without the extension (``-index docs.sqlite``: "docs")."""
    return index.path.stem


async def retrieve_route(request: Request) -> Response:
    f = Fields(await read_json(request))
    query = f.text("query", required=True)
    top_k = f.integer("top_k", 5, lo=1, hi=MAX_TOP_K)
    min_score = f.number("min_score", None)
    state = state_of(request)
    index = state.index
    if index is None:
        raise NotFound("no index is loaded; start the server with -index")
    reader = reader_of(principal_of(request))
    found = await until_disconnect(
        request,
        retrieve(
            index,
            state.encoders,
            query,
            reader,
            top_k=top_k,
            min_score=min_score,
        ),
    )
    return json_response({**found.as_json(), "index": index_id(index)})


def rag_routes() -> list[Route]:
    return [Route("/v1/retrieve", retrieve_route, methods=["POST"])]
