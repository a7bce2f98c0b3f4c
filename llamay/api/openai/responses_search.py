"""OpenAI's hosted `file_search` tool on the server's retrieval index (`llamay serve -index`).

The server holds one index; its id as a vector store is the index file's name without its
extension (`-index docs.sqlite`: "docs"; `POST /v1/retrieve` answers it as `index`). A
`file_search` tool names it in `vector_store_ids` (any other id is a 404 naming it; without
`-index` the tool is a 400).

When the tool is given (and `tool_choice` is not "none"), the server searches once for the
latest user message, unless a `file_search_call` already follows that message in the
conversation (a later turn of a function-call loop does not search again). The query is
that message's text (its first `MAX_QUERY` characters), searched as `POST /v1/retrieve`
searches it, with the caller's own access: a passage its key may not read is never found.
The search becomes a `file_search_call` output item before the answer; its `results` are
null unless `include` holds "file_search_call.results".

In the prompt, a `file_search_call` item's passages (`passages_text`) are appended to the
user message it follows (or, following anything else, make a user message of their own).
The passages are those the search found, also for a later turn on a stored response whose
output item shows no results, or an `item_reference` to the item (the record keeps them);
an item given as input brings its own `results` (none: nothing is added)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from starlette.requests import Request

from ...errors import InvalidRequest, LlamayError, NotFound
from ...rag.access import reader_of
from ...rag.index import Hit
from ...rag.retrieve import retrieve
from ..authn import principal_of
from ..fields import Fields
from ..http import until_disconnect
from ..rag import index_id
from ..state import state_of

__all__ = [
    "DEFAULT_RESULTS",
    "MAX_QUERY",
    "MAX_RESULTS",
    "FileSearch",
    "call_item",
    "parse_call_item",
    "parse_file_search",
    "passages_text",
    "render_results",
    "result_json",
    "search",
    "search_point",
]

J = dict[str, Any]
MAX_RESULTS = 50  # OpenAI's bound on max_num_results
DEFAULT_RESULTS = 10
MAX_QUERY = 4096  # characters of the user message searched for
MAX_STORE_IDS = 16
MAX_ITEM_RESULTS = 100  # results a file_search_call input item may carry
MAX_ITEM_QUERIES = 16
RANKERS = ("auto",)
STATUSES = ("in_progress", "searching", "completed", "incomplete", "failed")


@dataclass(frozen=True)
class FileSearch:
    """A parsed `file_search` tool: `param` names it (`tools[i]`); `min_score` is
    `ranking_options.score_threshold`, on the scale of the results' `score`."""

    param: str
    store_ids: tuple[str, ...]
    max_results: int = DEFAULT_RESULTS
    min_score: float | None = None
    echoed: J = field(default_factory=dict)


def parse_file_search(tf: Fields) -> FileSearch:
    """A `file_search` tool object (its `type` already read). What this server cannot honour
    is refused by name: attribute `filters` (indexed passages carry no attributes to filter
    on), `ranking_options.hybrid_search` weights (the rankings are fused with equal weight)
    and rankers other than "auto"."""
    tf.refuse({"filters": "attribute filters"})
    ids = tf.array("vector_store_ids", required=True)
    if not ids or len(ids) > MAX_STORE_IDS:
        where = tf.name("vector_store_ids")
        raise InvalidRequest(f"'{where}' must hold 1 to {MAX_STORE_IDS} ids", param=where)
    for j, sid in enumerate(ids):
        if not isinstance(sid, str) or not sid:
            where = f"{tf.name('vector_store_ids')}[{j}]"
            raise InvalidRequest(f"'{where}' must be a non-empty string", param=where)
    n = tf.integer("max_num_results", DEFAULT_RESULTS, lo=1, hi=MAX_RESULTS)
    echoed: J = {"type": "file_search", "vector_store_ids": list(ids), "filters": None,
                 "max_num_results": n}  # fmt: skip
    min_score = None
    raw = tf.obj("ranking_options")
    if raw is not None:
        rf = Fields(raw, tf.name("ranking_options"))
        rf.refuse({"hybrid_search": "weights for the fusion of keyword and vector rankings"})
        ranker = rf.text("ranker", "auto")
        if ranker not in RANKERS:
            where = rf.name("ranker")
            raise InvalidRequest(
                f"'{where}' {ranker!r} is not supported by this server (only \"auto\")", param=where
            )
        min_score = rf.number("score_threshold", None, lo=0.0, hi=1.0)
        echoed["ranking_options"] = {
            "ranker": ranker,
            **({"score_threshold": min_score} if min_score is not None else {}),
        }
    return FileSearch(tf.prefix, tuple(dict.fromkeys(ids)), n, min_score, echoed)


def search_point(items: list[J]) -> int | None:
    """Where a search goes in the conversation `items`: after the latest user message (its
    position), or None when a `file_search_call` already follows it. InvalidRequest when
    there is no user message to search for."""
    for k in range(len(items) - 1, -1, -1):
        item = items[k]
        if item["type"] == "file_search_call":
            return None
        if item["type"] == "message" and item["role"] == "user":
            return k
    raise InvalidRequest(
        "file_search searches for the latest user message; the input holds none", param="input"
    )


def query_of(item: J) -> str:
    """What a user message item searches for: its text, cut to MAX_QUERY characters."""
    text = "\n".join(p.get("text", "") for p in item["content"])
    return text[:MAX_QUERY]


async def search(request: Request, fs: FileSearch, query: str) -> list[Hit]:
    """The passages the caller may read that the index holds for `query`, best first."""
    state = state_of(request)
    index = state.index
    if index is None:
        raise InvalidRequest(
            f"'{fs.param}': file_search searches the server's retrieval index, and this server has "
            "none (start it with -index FILE)",
            param=fs.param,
        )
    name = index_id(index)
    for j, sid in enumerate(fs.store_ids):
        if sid != name:
            where = f"{fs.param}.vector_store_ids[{j}]"
            raise NotFound(f"'{where}': no vector store {sid!r} here (this server's index is {name!r})",
                           param=where)  # fmt: skip
    if not query.strip():
        raise InvalidRequest(
            "file_search has nothing to search for: the latest user message is blank", param="input"
        )
    reader = reader_of(principal_of(request))
    try:
        found = await until_disconnect(
            request,
            retrieve(index, state.encoders, query, reader, top_k=fs.max_results, min_score=fs.min_score),
        )
    except LlamayError as exc:
        if exc.param == "model":  # no embedding model for the index: the tool is what needs one
            exc.param = fs.param
        raise
    return found.hits


def result_json(hit: Hit) -> J:
    """One result as a `file_search_call` lists it: `file_id` is the file's path under the
    indexed folder, `filename` its name, `attributes` the passage's byte range in it."""
    return {
        "file_id": hit.source,
        "filename": PurePosixPath(hit.source).name,
        "score": hit.score,
        "text": hit.text,
        "attributes": {"start": hit.start, "end": hit.end},
    }


def call_item(iid: str, query: str, results: list[J] | None, status: str = "completed") -> J:
    return {"id": iid, "type": "file_search_call", "status": status, "queries": [query], "results": results}


def passages_text(results: list[Mapping[str, Any]]) -> str:
    """The passages as the prompt shows them: numbered, each under its file's path."""
    if not results:
        return "File search found no passages for this message."
    blocks = [f"[{i}] {r.get('file_id', '')}\n{r.get('text', '')}" for i, r in enumerate(results, 1)]
    return "File search found these passages:\n\n" + "\n\n".join(blocks)


def render_results(messages: list[J], results: list[Mapping[str, Any]]) -> None:
    """Add a `file_search_call`'s passages to the chat `messages` built so far: appended to
    the last message if it is the user's, else as a user message of their own."""
    block = passages_text(results)
    last = messages[-1] if messages else None
    if last is None or last["role"] != "user":
        messages.append({"role": "user", "content": block})
    elif isinstance(last["content"], str):
        last["content"] = f"{last['content']}\n\n{block}"
    else:
        last["content"] = [*last["content"], {"type": "text", "text": block}]


def parse_call_item(f: Fields, new_id: str) -> J:
    """A `file_search_call` input item (one this server made, given back), checked."""
    status = f.text("status", "completed")
    if status not in STATUSES:
        raise InvalidRequest(
            f"'{f.name('status')}' must be one of {', '.join(STATUSES)}", param=f.name("status")
        )
    queries = list(f.strings("queries", MAX_ITEM_QUERIES, single=False))
    raw = f.array("results")
    results: list[J] | None = None
    if raw is not None:
        if len(raw) > MAX_ITEM_RESULTS:
            where = f.name("results")
            raise InvalidRequest(f"'{where}' may hold at most {MAX_ITEM_RESULTS} results", param=where)
        results = []
        for j, r in enumerate(raw):
            rf = Fields(r, f"{f.name('results')}[{j}]")
            out: J = {"file_id": rf.text("file_id", ""), "filename": rf.text("filename", ""),
                      "score": rf.number("score", 0.0), "text": rf.text("text", "")}  # fmt: skip
            out["attributes"] = _attributes(rf)
            results.append(out)
    return {"id": f.text("id", max_bytes=256) or new_id, "type": "file_search_call", "status": status,
            "queries": queries, "results": results}  # fmt: skip


def _attributes(rf: Fields) -> J | None:
    """A result's `attributes` as OpenAI bounds them: at most 16 keys of up to 64 characters,
    each a string of up to 512 characters, a number or a boolean."""
    raw = rf.obj("attributes")
    if raw is None:
        return None
    where = rf.name("attributes")
    ok = len(raw) <= 16 and all(
        len(k) <= 64 and (isinstance(v, int | float | bool) or (isinstance(v, str) and len(v) <= 512))
        for k, v in raw.items()
    )
    if not ok:
        raise InvalidRequest(
            f"'{where}' maps at most 16 keys of up to 64 characters to strings of up to 512 "
            "characters, numbers or booleans",
            param=where,
        )
    return dict(raw)
