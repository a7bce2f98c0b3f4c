"""What every measurement of bench.state shares: the sizes of a run, prompts fitted to a token
count with the model's own tokenizer, HTTP calls whose failures carry the request and the
response, a streamed chat request's time to first token, and `llamay serve` servers that each
have their own temporary LLAMAY_HOME."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import (
    Server,
    ServerError,
    free_port,
    llamay_serve_argv,
    log_tail,
    start_server,
    stop_server,
)

from ..common import DONE, BadEvent, sentences, sse_data, sse_event

REQUEST_TIMEOUT = httpx.Timeout(connect=10.0, read=1800.0, write=120.0, pool=1800.0)
SERVER_START_S = 180.0
SERVER_STOP_GRACE_S = 60.0
# Targets of measurements 1-3, also in the report.
TARGETS = {
    "ttft_hit_over_cold_max": 0.05,
    "fork_1000_seconds_max": 1.0,
    "fork_1000_rss_growth_mb_max": 20.0,
    "restore_speedup_min": 10.0,
}

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "river garden window winter summer bright quiet small large early late green old new "
    "good great high little long young important public able bad different free full real "
    "walks runs reads writes builds opens finds keeps brings holds turns moves lives falls"
)
WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class Sizes:
    """How much of each measurement to run."""

    server_ctx: int = 16384
    ttft_system_tokens: int = 2000
    ttft_reps: int = 3
    ttft_max_tokens: int = 4
    fork_context_tokens: int = 4000
    forks: int = 1000
    snapshot_tokens: int = 4000
    snapshot_reps: int = 3
    tickets: int = 200
    ticket_clients: int = 8
    ticket_max_tokens: int = 8
    ticket_examples: int = 12


FULL = Sizes()
QUICK = Sizes(
    ttft_system_tokens=300,
    ttft_reps=2,
    fork_context_tokens=300,
    forks=100,
    snapshot_tokens=300,
    snapshot_reps=1,
    tickets=8,
    ticket_clients=4,
    ticket_examples=2,
)


def progress(message: str) -> None:
    print(f"bench.state {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Prompts fitted to a token count with the model's own tokenizer.


class Tokenizer:
    """The served model's vocabulary, loaded in this process to size prompts."""

    def __init__(self, path: Path) -> None:
        from llamay.backend.model import Model

        self._model = Model(path)

    def count(self, text: str) -> int:
        """Tokens of `text` as a completion prompt (special tokens added, none parsed)."""
        return len(self._model.tokenize(text, add_special=True, parse_special=False))

    def close(self) -> None:
        self._model.close()


def fitted_text(tok: Tokenizer, seed: int, n_tokens: int) -> str:
    """Random sentences (seeded) of at most n_tokens tokens, within 1% of it. Distinct seeds
    give texts that differ from their first word on (almost surely)."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(n_tokens * 2)]
    lo, hi = 1, len(words)
    while lo < hi:  # the most words that still fit
        mid = (lo + hi + 1) // 2
        if tok.count(sentences(words[:mid])) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    return sentences(words[:lo])


# ---------------------------------------------------------------------------------------------
# HTTP: every non-200 answer is a RequestFailed that carries the request and the response.


class RequestFailed(RuntimeError):
    def __init__(self, method: str, path: str, body: Any, status: int | None, response: str) -> None:
        self.detail = {
            "request": f"{method} {path}",
            "body": shorten(body),
            "status": status,
            "response": response[:2000],
        }
        super().__init__(json.dumps(self.detail))


def shorten(obj: Any, keep: int = 120) -> Any:
    """A request body fit for a report: long strings cut, bytes as their length."""
    if isinstance(obj, str):
        return obj if len(obj) <= keep else f"{obj[:keep]}... ({len(obj)} chars)"
    if isinstance(obj, bytes):
        return f"<{len(obj)} bytes>"
    if isinstance(obj, dict):
        return {k: shorten(v, keep) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shorten(v, keep) for v in obj]
    return obj


def call(
    client: httpx.Client,
    method: str,
    path: str,
    *,
    body: dict[str, Any] | None = None,
    content: bytes | None = None,
    params: dict[str, Any] | None = None,
) -> httpx.Response:
    try:
        resp = client.request(method, path, json=body, content=content, params=params)
    except httpx.HTTPError as exc:
        raise RequestFailed(method, path, body or content, None, f"{type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise RequestFailed(method, path, body or content, resp.status_code, resp.text)
    return resp


async def acall(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None = None, **kw: Any
) -> dict[str, Any]:
    try:
        resp = await client.request(method, path, json=body, **kw)
    except httpx.HTTPError as exc:
        raise RequestFailed(method, path, body, None, f"{type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise RequestFailed(method, path, body, resp.status_code, resp.text)
    return dict(resp.json())


def cached_of(usage: dict[str, Any] | None) -> int | None:
    if not usage:
        return None
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))


@dataclass
class Streamed:
    """A streamed chat completion: time to the first token, and its usage."""

    ttft_s: float
    total_s: float
    prompt_tokens: int | None
    cached_tokens: int | None


def stream_chat(client: httpx.Client, body: dict[str, Any]) -> Streamed:
    """POST a streaming chat completion. The first token is the first chunk after the role
    chunk (which the server sends before it reads the prompt) that carries content or a
    finish_reason."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    first = 0.0
    usage: dict[str, Any] | None = None
    try:
        with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                raise RequestFailed(
                    "POST", "/v1/chat/completions", body, resp.status_code, resp.read().decode()
                )
            for line in resp.iter_lines():
                event = _sse_event(line, body)
                if event is None:
                    continue
                usage = event.get("usage") or usage
                if not first and _is_token(event):
                    first = time.perf_counter()
    except httpx.HTTPError as exc:
        raise RequestFailed(
            "POST", "/v1/chat/completions", body, None, f"{type(exc).__name__}: {exc}"
        ) from exc
    if not first:
        raise RequestFailed("POST", "/v1/chat/completions", body, 200, "the stream carried no token")
    done = time.perf_counter()
    prompt = int(usage["prompt_tokens"]) if usage else None
    return Streamed(first - sent, done - sent, prompt, cached_of(usage))


def _sse_event(line: str, body: dict[str, Any]) -> dict[str, Any] | None:
    data = sse_data(line)
    if data is None or data == DONE:
        return None
    try:
        return sse_event(data)
    except BadEvent as bad:
        raise RequestFailed("POST", "/v1/chat/completions", body, 200, str(bad)) from None


def _is_token(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or []:
        if (choice.get("delta") or {}).get("content") or choice.get("finish_reason"):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Servers.


@contextlib.contextmanager
def llamay_server(name: str, model: Path, sizes: Sizes, logs: dict[str, str]) -> Iterator[Server]:
    """`llamay serve` with its own temporary LLAMAY_HOME; always stopped, home removed."""
    home = tempfile.mkdtemp(prefix=f"bench-state-{name}-home-")
    port = free_port()
    argv = llamay_serve_argv(
        model, port, "-ctx", str(sizes.server_ctx), "-concurrency", str(sizes.ticket_clients)
    )
    progress(f"{name}: starting {' '.join(argv[1:])}")
    try:
        server = start_server(name, argv, port, "/health", env={"LLAMAY_HOME": home}, timeout=SERVER_START_S)
        logs[name] = str(server.log_path)
        try:
            yield server
        finally:
            progress(f"{name}: stopping")
            stop_server(server, grace=SERVER_STOP_GRACE_S)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def guarded(name: str, server: Server | None, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one measurement; a failure becomes an "error" entry with the server log tail."""
    progress(f"measuring {name}")
    try:
        result = fn()
        progress(f"{name}: {json.dumps(result, default=str)}")
        return result
    except RequestFailed as exc:
        error: dict[str, Any] = {"error": exc.detail}
    except (ServerError, httpx.HTTPError, OSError, RuntimeError, ValueError, KeyError) as exc:
        error = {"error": f"{type(exc).__name__}: {exc}"}
    if server is not None:
        error["server_exit_code"] = server.proc.poll()
        error["server_log_tail"] = log_tail(server.log_path, 25).splitlines()
    progress(f"{name} failed: {error['error']}")
    return error


def warm_up(client: httpx.Client) -> None:
    """One short request so that first-call costs (graph allocation) stay out of every timing."""
    body = {"messages": [{"role": "user", "content": "Hello there."}], "max_tokens": 2, "temperature": 0}
    call(client, "POST", "/v1/chat/completions", body=body)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def resolve_model(name: str | None) -> Path:
    """The local .gguf file of a model name or path (None: the default model); a catalog model
    is pulled on first use, so before anything is timed."""
    from llamay.store import ModelStore

    return Path(ModelStore().resolve(name).path)
