"""HTTP routes for encoders: ``POST /v1/embeddings`` (OpenAI) and ``POST /rerank``,
``POST /v1/rerank`` (the Jina/Cohere rerank shape).

The encoders come from the app's state (``state_of(request).encoders``): a dict with "embed" and/or "rerank"
holding `llamay.embed.Encoder` objects (absent keys: no such model loaded).

/v1/embeddings body: ``input`` (a string, an array of strings, an array of token ids, or an
array of such arrays), ``model`` (reported back; the loaded embedder answers whatever it
names), ``encoding_format`` "float" | "base64" (little-endian float32), ``dimensions`` (keep the
first N components, renormalised), and the llamay extension ``truncate`` (default false: an
input longer than the model takes is a 400 naming it; true: cut to fit).

/rerank body: ``query``, ``documents`` (strings or ``{"text": ...}``), ``top_n``,
``return_documents`` (default false), ``model`` (optional: the reranker's or the embedder's
name picks that one), ``truncate`` (default true: documents are cut to fit).  Results are best
first; ``method`` says whether a cross-encoder scored them (``relevance_score`` = sigmoid of
the logit, ``logit`` the raw score) or the embedding model (cosine similarity).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..embed.api import embed_inputs
from ..embed.inputs import Input
from ..embed.rerank import rerank
from ..embed.service import Encoder
from ..embed.vectors import shorten, to_base64
from ..errors import InvalidRequest, ModelNotFound
from .fields import Fields
from .http import json_response, read_json, until_disconnect
from .state import state_of

__all__ = ["embeddings_routes", "parse_inputs", "MAX_INPUTS", "served_encoders", "find_encoder"]

#: Inputs per request (OpenAI's limit).
MAX_INPUTS = 2048


def _encoders(request: Request) -> dict[str, Encoder]:
    return state_of(request).encoders


def served_encoders(request: Request) -> list[Encoder]:
    """The encoder models this server holds beside its chat models (-embed, -rerank): the
    model lists name them too, so a client that checks the list before calling finds them."""
    return list(_encoders(request).values())


def find_encoder(request: Request, name: str) -> Encoder | None:
    """The encoder served under `name` (with or without ":latest"), if any."""
    for enc in served_encoders(request):
        if name in (enc.name, enc.name.removesuffix(":latest"), f"{enc.name}:latest"):
            return enc
    return None


def parse_inputs(value: Any) -> tuple[list[Input], bool]:
    """OpenAI's ``input`` -> (inputs, whether it was an array of inputs).  A flat array of
    integers is one token array.  InvalidRequest names the element at fault."""
    if value is None:
        raise InvalidRequest("'input' is required", param="input")
    if isinstance(value, str):
        return [value], False
    if not isinstance(value, list):
        raise InvalidRequest(
            "'input' must be a string, an array of strings or of token arrays", param="input"
        )
    if not value:
        raise InvalidRequest("'input' is an empty array", param="input")
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return [list(value)], False
    if len(value) > MAX_INPUTS:
        raise InvalidRequest(f"'input' has {len(value)} items; at most {MAX_INPUTS} are taken", param="input")
    for i, item in enumerate(value):
        if not isinstance(item, str | list):
            raise InvalidRequest(f"input[{i}] must be a string or an array of token ids", param=f"input[{i}]")
    return list(value), True


async def embeddings(request: Request) -> Response:
    f = Fields(await read_json(request))
    inputs, indexed = parse_inputs(f.raw("input"))
    encoding = f.text("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise InvalidRequest(
            f'\'encoding_format\' must be "float" or "base64", not {encoding!r}', param="encoding_format"
        )
    truncate = f.flag("truncate", False)
    encoders = _encoders(request)
    encoder = encoders.get("embed")
    if encoder is None:
        if "rerank" in encoders:
            raise InvalidRequest(
                f"this server holds only a reranker ({encoders['rerank'].name}), which gives no "
                "embeddings; start it with -embed MODEL",
                param="model",
            )
        raise ModelNotFound("this server holds no embedding model; start it with -embed MODEL", param="model")
    dimensions = f.integer("dimensions", None, lo=1, hi=encoder.dim)
    got = await until_disconnect(request, embed_inputs(encoder, inputs, truncate, indexed=indexed))
    vectors = shorten(got.vectors, dimensions)
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": to_base64(v) if encoding == "base64" else v.tolist(),
        }
        for i, v in enumerate(vectors)
    ]
    usage = {"prompt_tokens": got.n_tokens, "total_tokens": got.n_tokens}
    return json_response({"object": "list", "data": data, "model": encoder.name, "usage": usage})


def _documents(value: Any) -> list[str]:
    if value is None:
        raise InvalidRequest("'documents' is required", param="documents")
    if not isinstance(value, list):
        raise InvalidRequest("'documents' must be an array of strings", param="documents")
    if len(value) > MAX_INPUTS:
        raise InvalidRequest(
            f"'documents' has {len(value)} items; at most {MAX_INPUTS} are taken", param="documents"
        )
    docs: list[str] = []
    for i, item in enumerate(value):
        if isinstance(item, dict):
            item = Fields(item, f"documents[{i}]").text("text", required=True)
        if not isinstance(item, str):
            raise InvalidRequest(
                f'documents[{i}] must be a string or {{"text": string}}', param=f"documents[{i}]"
            )
        docs.append(item)
    return docs


def _rerank_encoder(encoders: dict[str, Encoder], model: str | None) -> Encoder:
    """The reranker, or the embedder if no reranker is loaded or `model` names the embedder."""
    ranker, embedder = encoders.get("rerank"), encoders.get("embed")
    if model and embedder is not None and model in (embedder.name, embedder.name.removesuffix(":latest")):
        return embedder
    chosen = ranker or embedder
    if chosen is None:
        raise ModelNotFound(
            "this server holds no reranker or embedding model; start it with -rerank MODEL or -embed MODEL",
            param="model",
        )
    return chosen


async def rerank_route(request: Request) -> Response:
    f = Fields(await read_json(request))
    query = f.text("query", required=True)
    docs = _documents(f.raw("documents"))
    top_n = f.integer("top_n", None, lo=1)
    with_docs = f.flag("return_documents", False)
    truncate = f.flag("truncate", True)
    encoder = _rerank_encoder(_encoders(request), f.text("model"))
    got = await until_disconnect(request, rerank(encoder, query, docs, truncate=truncate))
    results: list[dict[str, Any]] = []
    for r in got.ranked[:top_n]:
        item: dict[str, Any] = {"index": r.index, "relevance_score": r.score}
        if r.logit is not None:
            item["logit"] = r.logit
        if with_docs:
            item["document"] = {"text": docs[r.index]}
        results.append(item)
    usage = {"prompt_tokens": got.n_tokens, "total_tokens": got.n_tokens}
    return json_response({"model": got.model, "results": results, "method": got.method, "usage": usage})


def embeddings_routes() -> list[Route]:
    return [
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/rerank", rerank_route, methods=["POST"]),
        Route("/v1/rerank", rerank_route, methods=["POST"]),
    ]
