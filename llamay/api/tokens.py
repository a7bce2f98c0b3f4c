"""The tokenizer over HTTP, in llama-server's shapes (and vLLM's names, which
lm-evaluation-harness's remote tokenizer sends):

- ``POST /tokenize``: ``content`` (or ``prompt``), ``add_special`` (or
  ``add_special_tokens``; default false), ``parse_special`` (default true), ``with_pieces``
  (default false) -> ``{"tokens": [ids]}``, or with pieces ``{"tokens": [{"id", "piece"}]}``
  where a piece that is not whole UTF-8 is a list of bytes (as llama-server writes it);
  ``count`` and ``max_model_len`` ride along (vLLM's fields).
- ``POST /detokenize``: ``tokens`` -> ``{"content": text, "prompt": text}``.
- ``GET /tokenizer_info``: ``bos_token``, ``eos_token``, ``pad_token``, ``chat_template``
  (empty when the model ships none), ``model_max_length``, ``vocab_size``.
- ``POST /apply-template``: an OpenAI chat body -> ``{"prompt": text}``, the exact text
  /v1/chat/completions would feed the model (the same parser and pipeline).

Every route takes an optional ``model`` (a body field, or ``?model=`` on GET; absent: the
default model) and is behind the API keys like any other. Tokenizing runs off the event
loop; the body is bounded by the server's body limit and a token list by MAX_TOKENS.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..chat.prepare import ModelRef, lookup, prepare
from ..errors import InvalidRequest
from ..runtime import LoadedModel
from .fields import Fields
from .http import json_response, read_json
from .openai.chat import chat_job
from .openai.schemas import parse_chat
from .state import state_of

__all__ = ["token_routes", "MAX_TOKENS"]

#: Token ids one /detokenize request may send.
MAX_TOKENS = 1 << 20


async def _model(request: Request, name: str | None) -> LoadedModel:
    lm, _ = await lookup(state_of(request).runtime, ModelRef(name or ""))
    return lm


def _first(f: Fields, keys: tuple[str, str], kind: str, default: Any) -> Any:
    """The value of the first of two synonymous fields present (llama-server's, vLLM's)."""
    for key in keys:
        if f.raw(key) is not None:
            return f.text(key) if kind == "text" else f.flag(key)
    return default


def _piece(raw: bytes) -> str | list[int]:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return list(raw)


async def tokenize(request: Request) -> Response:
    f = Fields(await read_json(request))
    content = _first(f, ("content", "prompt"), "text", None)
    if content is None:
        raise InvalidRequest("'content' is required: the text to tokenize", param="content")
    add_special = _first(f, ("add_special", "add_special_tokens"), "flag", False)
    parse_special = f.flag("parse_special", True)
    with_pieces = f.flag("with_pieces", False)
    lm = await _model(request, f.text("model"))
    model = lm.model

    def work() -> list[Any]:
        ids = model.tokenize(content, add_special=add_special, parse_special=parse_special)
        return [{"id": t, "piece": _piece(model.piece(t))} for t in ids] if with_pieces else ids

    tokens = await asyncio.to_thread(work)
    return json_response({"tokens": tokens, "count": len(tokens), "max_model_len": lm.ctx.n_ctx})


async def detokenize(request: Request) -> Response:
    f = Fields(await read_json(request))
    tokens = f.array("tokens", required=True)
    if len(tokens) > MAX_TOKENS:
        raise InvalidRequest(
            f"'tokens' has {len(tokens)} ids; at most {MAX_TOKENS} are taken", param="tokens"
        )
    lm = await _model(request, f.text("model"))
    model = lm.model

    def work() -> str:  # a million ids are checked off the event loop
        for i, t in enumerate(tokens):
            if not isinstance(t, int) or isinstance(t, bool):
                raise InvalidRequest(f"tokens[{i}] must be a token id (an integer)", param=f"tokens[{i}]")
        model.check_tokens(tokens)  # a 400 naming an id outside the vocabulary
        return model.detokenize(tokens)

    text = await asyncio.to_thread(work)
    return json_response({"content": text, "prompt": text})


async def tokenizer_info(request: Request) -> Response:
    lm = await _model(request, request.query_params.get("model"))
    info, model = lm.info, lm.model
    eos = info.eos_token or None
    return json_response(
        {
            "model": lm.name,
            "bos_token": info.bos_token or None,
            "eos_token": eos,
            "pad_token": eos,
            "chat_template": "" if lm.template.fallback else lm.template.source,
            "model_max_length": lm.ctx.n_ctx,
            "vocab_size": model.n_vocab,
            "add_bos_token": model.add_bos,
        }
    )


async def apply_template(request: Request) -> Response:
    # Parsing compiles tool specs and schemas: CPU work, off the event loop.
    req = await asyncio.to_thread(parse_chat, await read_json(request))
    ready = await prepare(state_of(request).runtime, chat_job(req))
    prompt = ready.prompts[0]
    text = prompt.text if prompt.text is not None else ready.lm.model.detokenize(prompt.tokens)
    return json_response({"prompt": text})


def token_routes() -> list[Route]:
    return [
        Route("/tokenize", tokenize, methods=["POST"]),
        Route("/detokenize", detokenize, methods=["POST"]),
        Route("/tokenizer_info", tokenizer_info, methods=["GET"]),
        Route("/apply-template", apply_template, methods=["POST"]),
    ]
