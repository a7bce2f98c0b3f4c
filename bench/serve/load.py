"""The serving benchmark's load: a tokenizer to size prompts, deterministic distinct prompts,
and one streamed /v1/completions request timed chunk by chunk (the same request for every
server under test: llamay, llama.cpp's llama-server, llama-cpp-python's server)."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from ..common import DONE, BadEvent, sentences, sse_data, sse_event

BAN_BIAS = -100.0
REQUEST_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=300.0)
REQUEST_DEADLINE_S = 900.0
T = TypeVar("T")

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy music market sense nation plan college interest death "
    "river garden window winter summer bright quiet small large early late green old new "
    "good great high little long young important public able bad different free full real "
    "sure strong clear open simple hard easy warm cold deep heavy light fast slow happy "
    "walks runs reads writes builds opens finds keeps brings holds turns moves lives falls"
)
WORDS = tuple(_WORD_TEXT.split())


# ---------------------------------------------------------------------------------------------
# The model's tokenizer (llama.cpp, vocab only): end-of-generation ids and prompt lengths.


class Vocab:
    """A vocab-only llama.cpp model: the same tokenizer both servers use."""

    def __init__(self, path: Path) -> None:
        import llama_cpp

        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # its load log goes to stderr
        self._lib = llama_cpp
        llama_cpp.llama_backend_init()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load the vocabulary of {path}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)

    def eog_ids(self) -> list[int]:
        """Every token llama.cpp treats as end of generation (EOS, EOT, <|im_end|>, ...)."""
        n = self._lib.llama_vocab_n_tokens(self._vocab)
        return [t for t in range(n) if self._lib.llama_vocab_is_eog(self._vocab, t)]

    def count(self, text: str) -> int:
        """Prompt tokens for `text`, tokenized as a completion prompt (special tokens added)."""
        raw = text.encode()
        cap = len(raw) + 8
        buf = (self._lib.llama_token * cap)()
        n = self._lib.llama_tokenize(self._vocab, raw, len(raw), buf, cap, True, False)
        if n < 0:
            raise RuntimeError("tokenization overflowed its buffer")
        return int(n)

    def close(self) -> None:
        if self._model:
            self._lib.llama_model_free(self._model)
            self._model = None


class Prompts:
    """Deterministic, distinct prompts of a given token length. `reset()` restarts the sequence,
    so every server gets the same prompts in the same order."""

    def __init__(self, vocab: Vocab, seed: int = 1234) -> None:
        self._vocab = vocab
        self._seed = seed
        self._next = 0

    def reset(self) -> None:
        self._next = 0

    def make(self, n_tokens: int) -> tuple[str, int]:
        """(prompt text, its token count), the count at most n_tokens and close to it."""
        rng = random.Random(self._seed * 1_000_003 + self._next)
        self._next += 1
        words = [rng.choice(WORDS) for _ in range(n_tokens)]
        return self._fit(words, n_tokens)

    def _fit(self, words: list[str], n_tokens: int) -> tuple[str, int]:
        k = len(words)
        for _ in range(64):
            text = sentences(words[:k])
            count = self._vocab.count(text)
            if count <= n_tokens or k <= 1:
                return text, count
            # Shrink in proportion (a tokenizer may split words into many tokens), never
            # below one word: a negative slice would keep nearly all of them.
            k = max(1, min(k - 1, k * n_tokens // count))
        raise RuntimeError(f"could not fit a prompt to {n_tokens} tokens")


# ---------------------------------------------------------------------------------------------
# One streamed completion.


class RequestFailed(RuntimeError):
    """A request that did not stream a full completion; carries the request and response."""

    def __init__(self, what: str, body: dict[str, Any], status: int | None, response: str) -> None:
        shown = {**body, "prompt": _short(str(body.get("prompt", "")))}
        super().__init__(f"{what}: request {json.dumps(shown)} -> status {status}, response {response!r}")
        self.detail = {"what": what, "request": shown, "status": status, "response": response[:2000]}


def _short(text: str, keep: int = 80) -> str:
    return text if len(text) <= keep else f"{text[:keep]}... ({len(text)} chars)"


@dataclass
class Stream:
    """Client-side times (time.perf_counter) of one streamed completion."""

    sent: float
    first: float  # first chunk carrying a choice (the first token)
    last: float  # last chunk carrying a choice (the last token / the finish)
    done: float  # end of the response
    chunks: int
    finish_reason: str | None

    @property
    def ttft(self) -> float:
        return self.first - self.sent


def plain_sampling(max_tokens: int) -> dict[str, Any]:
    """Greedy and plain: no penalties, so every server computes the same distribution."""
    return {
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "top_p": 1.0,
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
    }


def completion_body(prompt: str, max_tokens: int, banned: list[int]) -> dict[str, Any]:
    return {
        "prompt": prompt,
        **plain_sampling(max_tokens),
        "logit_bias": {str(t): BAN_BIAS for t in banned},
        "stream": True,
    }


async def stream_completion(client: httpx.AsyncClient, body: dict[str, Any]) -> Stream:
    """POST /v1/completions with stream=true and time its chunks; RequestFailed unless the
    stream ends with [DONE] after a finish_reason of "length"."""
    return await within_deadline(_stream(client, body), body)


async def within_deadline(request: Coroutine[Any, Any, T], body: dict[str, Any]) -> T:
    """`request`'s result; RequestFailed on a transport error or no result within
    REQUEST_DEADLINE_S."""
    try:
        return await asyncio.wait_for(request, REQUEST_DEADLINE_S)
    except TimeoutError:
        raise RequestFailed(
            "timeout", body, None, f"no complete response in {REQUEST_DEADLINE_S:.0f}s"
        ) from None
    except httpx.HTTPError as exc:
        raise RequestFailed("transport", body, None, f"{type(exc).__name__}: {exc}") from exc


async def _stream(client: httpx.AsyncClient, body: dict[str, Any]) -> Stream:
    sent = time.perf_counter()
    first = last = 0.0
    chunks = 0
    finish: str | None = None
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")
            raise RequestFailed("HTTP error", body, resp.status_code, text)
        async for line in resp.aiter_lines():
            data = sse_data(line)
            if data is None:
                continue  # blank separators, SSE comments (pings)
            if data == DONE:
                return _finished(body, Stream(sent, first, last, time.perf_counter(), chunks, finish))
            event = _event(body, data)
            if not event.get("choices"):
                continue  # e.g. a usage-only chunk
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
            finish = event["choices"][0].get("finish_reason") or finish
    raise RequestFailed("stream ended without [DONE]", body, 200, f"{chunks} chunks, finish {finish}")


def _event(body: dict[str, Any], data: str) -> dict[str, Any]:
    try:
        return sse_event(data)
    except BadEvent as bad:
        raise RequestFailed(bad.problem, body, 200, data) from None


def _finished(body: dict[str, Any], s: Stream) -> Stream:
    if s.chunks == 0 or s.finish_reason != "length":
        raise RequestFailed(
            "generation did not run to max_tokens",
            body,
            200,
            f"{s.chunks} chunks, finish_reason {s.finish_reason!r}",
        )
    return s
