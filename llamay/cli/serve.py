"""`llamay serve`: parse the flags and environment into a `ServerConfig`, build the server
from it (`server.build_server`), serve it. This module only parses: what a flag means is
the config's field; its default is the config's default."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..config import (
    ENV_ADMISSION,
    ENV_API_KEY,
    ENV_FINISH_TOOL,
    ENV_SNAPSHOT_KEY,
    KV_TYPES,
    ConfigError,
    RuntimeConfig,
    ServerConfig,
    ServerLimits,
    check_sampling,
)
from .common import fail, flag, human_bytes, human_count
from .logs import kv, setup_logging

__all__ = ["add_parser", "add_server_flags", "config_from_args", "parse_addr", "parse_duration", "parse_size"]

log = logging.getLogger("llamay.cli")
DEFAULT = ServerConfig()
DEFAULT_ADDR = DEFAULT.addr


# Server-wide sampling defaults, named as llama-server names them.
_SAMPLING_FLAGS = (
    ("temp", float, "temperature"),
    ("top-p", float, "top_p"),
    ("top-k", int, "top_k"),
    ("min-p", float, "min_p"),
    ("repeat-penalty", float, "repeat_penalty"),
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a model over HTTP (OpenAI-compatible API)",
        allow_abbrev=False,
        description="Load a model and serve the OpenAI-compatible HTTP API.",
    )
    add_server_flags(p)
    p.set_defaults(func=run_serve)


def add_server_flags(p: argparse.ArgumentParser, help_for: Mapping[str, str] | None = None) -> None:
    """Every `llamay serve` flag, each with one dash or two (`llamay fleet up` takes them
    too). `help_for`: other help texts, by flag name. `config_from_args` reads them."""
    d, rc, limits = DEFAULT, DEFAULT.runtime, DEFAULT.limits
    own = dict(help_for or {})

    def add(name: str, *short: str, help: str, **kw: Any) -> None:
        flag(p, name, *short, help=own.pop(name, help), **kw)

    add("model", "-m", default=None, help="model name or path to a .gguf file (default: smollm2:135m)")
    add("addr", default=DEFAULT_ADDR, help=f"HOST:PORT to listen on (default {DEFAULT_ADDR})")
    add("concurrency", type=int, default=rc.concurrency,
        help=f"requests generated at once (default {rc.concurrency})")  # fmt: skip
    add("queue", type=int, default=rc.max_queue,
        help="sequences each principal may have waiting beyond those (every prompt and choice is one); "
        f"more get 429, or 503 without keys (default {rc.max_queue})")  # fmt: skip
    add("admission", default=os.environ.get(ENV_ADMISSION, rc.admission),
        help="fair: with API keys, waiting sequences start by principal, the least served (by "
        "tokens, over its key's weight) first; fcfs: one queue, first come first served "
        f"(default {rc.admission}; ${ENV_ADMISSION})")  # fmt: skip
    add("ctx", type=int, default=rc.ctx,
        help="context size in tokens, shared by running requests (default: the model's, at most 8192)")  # fmt: skip
    add("batch", type=int, default=rc.batch, help=f"tokens per decode step (default {rc.batch})")
    add("max-tokens", dest="max_tokens", type=int, default=rc.max_tokens,
        help="the default output budget: tokens a request that sets no limit may generate, on every "
        "API (a schema that bounds its answers gets its own bound; a limit above what the context "
        f"holds is cut to that, and said) (default {rc.max_tokens})")  # fmt: skip
    add("finish-tool", dest="finish_tool", default=os.environ.get(ENV_FINISH_TOOL, rc.finish_tool),
        help='"auto" adds a finish tool to chat requests with tool_choice "required" that do not set '
        "finish_tool, so the model may end an agent loop without a call; off (the default): only "
        f"requests that ask get it (${ENV_FINISH_TOOL})")  # fmt: skip
    add("reasoning-budget", dest="reasoning_budget", type=int, default=rc.reasoning_budget,
        help="thinking tokens a reasoning model may spend when a request sets no budget; then the "
        "server closes its think block and it answers (default: unbounded)")  # fmt: skip
    add("threads", type=int, default=rc.threads, help="CPU threads (default: all cores)")
    for name, kind, field in _SAMPLING_FLAGS:
        add(name, dest=field, type=kind, default=None,
            help=f"default {field} for requests that set none (over the model's GGUF defaults)")  # fmt: skip
    add("kv", default=rc.kv_type, choices=list(KV_TYPES), help=f"KV cache type (default {rc.kv_type})")
    add("flash-attn", dest="flash_attn", default=_on_off(rc.flash_attn), choices=["on", "off"],
        help="flash attention: each sequence attends to its own KV cells only "
        f"(default {_on_off(rc.flash_attn)})")  # fmt: skip
    add("speculate", default=_on_off(rc.speculate), choices=["on", "off"],
        help="speculative decoding: guessed tokens (copied from the prompt or the output, or forced by "
        "the format) are checked in the same step, so copying work runs faster; the output is the "
        f"same token for token either way (default {_on_off(rc.speculate)})")  # fmt: skip
    add("draft-max", dest="draft_max", type=int, default=rc.draft_max,
        help=f"guessed tokens a request checks per step at most (default {rc.draft_max})")  # fmt: skip
    add("draft", default=None,
        help="a small model sharing the served model's tokenizer that guesses tokens for speculation "
        "where nothing in the prompt or output does (name or .gguf path; default: none)")  # fmt: skip
    add("cache-ram", dest="cache_ram", type=int, default=rc.cache_ram // 2**20,
        help="MiB of RAM per model for cached prefixes moved out of the KV cache; 0: none "
        f"(default {rc.cache_ram // 2**20})")  # fmt: skip
    add("chat-template", dest="chat_template", type=Path, default=None,
        help="a Jinja chat template file that overrides the model's own")  # fmt: skip
    add("embed", default=None, help="an embedding model to load beside the chat model (e.g. all-minilm)")
    add("rerank", default=None, help="a cross-encoder (rank pooling GGUF) for /v1/rerank and retrieval")
    add("index", type=Path, default=None,
        help="an index built by `llamay index build`, served at /v1/retrieve")  # fmt: skip
    add("max-loaded", dest="max_loaded", type=int, default=d.max_loaded,
        help=f"models held in memory at once (default {d.max_loaded})")  # fmt: skip
    add("keepalive", type=parse_duration, default=d.keep_alive,
        help="how long an idle model stays loaded: 30s, 5m, 1h; negative keeps it "
        f"(default {_span(d.keep_alive)}; the -m model stays)")  # fmt: skip
    add("keys", type=Path, default=None,
        help='API keys file: {"keys": [{"key", "principal", "groups", "role", "weight", ...}]} '
        f"({ENV_API_KEY} adds one admin key)")  # fmt: skip
    add("max-connections", dest="max_connections", type=int, default=limits.max_connections,
        help=f"open connections before new requests get 503 (default {limits.max_connections})")  # fmt: skip
    add("max-connections-per-address", dest="max_connections_per_address", type=int,
        default=limits.max_connections_per_address,
        help="open connections from one client address before its next gets 503; behind a proxy, "
        f"give -max-connections (default {limits.max_connections_per_address})")  # fmt: skip
    add("header-timeout", dest="header_timeout", type=parse_duration, default=limits.header_timeout,
        help=f"time a connection has to send a request's headers (default {_span(limits.header_timeout)})")  # fmt: skip
    add("body-timeout", dest="body_timeout", type=parse_duration, default=limits.body_timeout,
        help=f"time a request has to send its whole body, else 408 (default {_span(limits.body_timeout)})")  # fmt: skip
    add("max-body", dest="max_body", type=parse_size, default=limits.max_body,
        help=f"largest request body, else 413 (default {limits.max_body >> 20}M)")  # fmt: skip
    add("max-field", dest="max_field", type=parse_size, default=limits.max_field,
        help="largest free-text field the server keeps, such as a context's marking, else 400 "
        f"(default {limits.max_field} bytes)")  # fmt: skip
    add("responses-per-key", dest="responses_per_key", type=parse_size, default=limits.responses_per_key,
        help="bytes of stored Responses kept per API key; past it the oldest go "
        f"(default {limits.responses_per_key >> 20}M)")  # fmt: skip
    add("responses-total", dest="responses_total", type=parse_size, default=limits.responses_total,
        help=f"bytes of stored Responses kept in all (default {limits.responses_total >> 20}M)")  # fmt: skip
    add("response-ttl", dest="response_ttl", type=parse_duration, default=limits.response_ttl,
        help=f"how long a stored response is kept (default {_span(limits.response_ttl)})")  # fmt: skip
    add("log-level", dest="log_level", default=d.log_level,
        help=f"DEBUG, INFO, WARNING (default {d.log_level})")  # fmt: skip
    if own:
        raise ValueError(f"no such serve flag: {', '.join(own)}")


def _on_off(value: bool) -> str:
    return "on" if value else "off"


def _span(seconds: float) -> str:
    """A duration as parse_duration reads it: 1h, 5m, 10s."""
    for suffix, scale in (("h", 3600), ("m", 60)):
        if seconds >= scale and seconds % scale == 0:
            return f"{seconds / scale:g}{suffix}"
    return f"{seconds:g}s"


def parse_duration(text: str) -> float:
    """ "30s", "5m", "1h", "250ms" or plain seconds; negative means forever."""
    t = text.strip().lower()
    for suffix, scale in (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0)):
        if t.endswith(suffix) and t[: -len(suffix)].lstrip("-").replace(".", "", 1).isdigit():
            return float(t[: -len(suffix)]) * scale
    try:
        return float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 30s, 5m, 1h)") from None


def parse_size(text: str) -> int:
    """ "4096", "64K", "32M", "1G" (KiB, MiB, GiB; a trailing "B" or "iB" is allowed)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(t[-1:], 1)
    digits = t[:-1] if scale > 1 else t
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 4096, 64K, 32M, 1G)")
    return int(digits) * scale


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"-addr must be HOST:PORT, not {addr!r}")
    return (host or "localhost").strip("[]"), int(port)


def sampling_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling flags that were given, as RuntimeConfig fields; ConfigError (a
    ValueError) when one is out of the range every API accepts."""
    given = {f: getattr(args, f) for _, _, f in _SAMPLING_FLAGS if getattr(args, f, None) is not None}
    check_sampling(given)
    return given


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    """What the `serve` flags in `args` and the environment mean: $LLAMAY_API_KEY,
    $LLAMAY_SNAPSHOT_KEY and $LLAMAY_HOME (where contexts are kept); $LLAMAY_FINISH_TOOL and
    $LLAMAY_ADMISSION are -finish-tool's and -admission's defaults (read when the parser is made). Files named by flags are made absolute, so the config means the
    same in another working directory (a fleet's replicas). ConfigError naming the flag
    for a bad value."""
    from ..store import llamay_home

    env = os.environ
    host, port = parse_addr(args.addr)
    runtime = RuntimeConfig(
        ctx=args.ctx,
        batch=args.batch,
        threads=args.threads,
        concurrency=args.concurrency,
        max_queue=args.queue,
        kv_type=args.kv,
        flash_attn=args.flash_attn == "on",
        cache_ram=args.cache_ram * 2**20,
        chat_template_file=_absolute(args.chat_template),
        home=llamay_home(),
        max_tokens=args.max_tokens,
        reasoning_budget=args.reasoning_budget,
        finish_tool=args.finish_tool,
        admission=args.admission,
        speculate=args.speculate == "on",
        draft_max=args.draft_max,
        draft=_model_ref(args.draft),
        **sampling_flags(args),
    )
    limits = ServerLimits(
        max_connections=args.max_connections,
        max_connections_per_address=args.max_connections_per_address,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        max_body=args.max_body,
        max_field=args.max_field,
        responses_per_key=args.responses_per_key,
        responses_total=args.responses_total,
        response_ttl=args.response_ttl,
    )
    return ServerConfig(
        model=args.model,
        host=host,
        port=port,
        runtime=runtime,
        limits=limits,
        max_loaded=args.max_loaded,
        keep_alive=args.keepalive,
        embed=args.embed,
        rerank=args.rerank,
        index=_absolute(args.index),
        keys=_absolute(args.keys),
        api_key=env.get(ENV_API_KEY) or None,
        snapshot_key=env.get(ENV_SNAPSHOT_KEY) or None,
        log_level=args.log_level,
    )


def _absolute(path: Path | None) -> Path | None:
    return path.expanduser().absolute() if path is not None else None


def banner_table(base: str) -> str:
    from ..api.app import ENDPOINTS

    width = max(len(path) for _, path, _ in ENDPOINTS) + len(base)
    lines = [f"  {'METHOD':<6}  {'URL':<{width}}  PURPOSE"]
    lines += [f"  {m:<6}  {base + path:<{width}}  {why}" for m, path, why in ENDPOINTS]
    return "\n".join(lines)


def run_serve(args: argparse.Namespace) -> int:
    from ..api.serving import bind, serve
    from ..api.state import state_of
    from ..server import build_server

    try:
        config = config_from_args(args)
    except Exception as exc:
        return fail(exc)
    setup_logging(config.log_level)
    try:
        sock = bind(config.host, config.port)  # a busy port fails now, not after the models load
    except Exception as exc:
        return fail(exc)
    try:
        app = build_server(config)
    except Exception as exc:
        sock.close()
        return fail(exc)
    state = state_of(app)
    runtime, keys = state.runtime, state.keys
    loaded = runtime.get(None)
    info = loaded.info
    addr = config.addr
    log.info(
        "llamay serving",
        extra=kv(
            addr=addr,
            model=loaded.name,
            arch=info.arch,
            params=human_count(info.n_params),
            size=human_bytes(info.size_bytes),
            context=loaded.engine.n_ctx,
            threads=loaded.ctx.config.n_threads,
            kv=config.runtime.kv_type,
            concurrency=config.runtime.concurrency,
            max_tokens=config.runtime.max_tokens,
            max_loaded=config.max_loaded,
            keep_alive=f"{config.keep_alive:g}s" if config.keep_alive >= 0 else "forever",
            auth="api keys" if keys.enabled else "none (single user)",
            batch_invariant="no" if loaded.batch_variance else "yes",
        ),
    )
    if loaded.batch_variance:
        log.warning(
            "this model's output may vary with what else the server runs (outside the promise of "
            "repeatable output)",
            extra=kv(model=loaded.name, why="; ".join(loaded.batch_variance)),
        )
    print(banner_table(f"http://{addr}"), file=sys.stderr, flush=True)
    if not keys.enabled and config.host not in ("localhost", "127.0.0.1", "::1"):
        log.warning(
            "listening beyond this machine without API keys: anyone who can reach it can use it",
            extra=kv(addr=addr),
        )
    try:
        serve(app, config.host, config.port, sock)
    finally:
        runtime.close()
        log.info("llamay stopped")
    return 0


def _model_ref(name: str | None) -> str | None:
    """A model name as given; a file path made absolute (a fleet's replicas run elsewhere)."""
    if name is None or not (name.lower().endswith(".gguf") or os.sep in name or "/" in name):
        return name
    return str(Path(name).expanduser().absolute())
