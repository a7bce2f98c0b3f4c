"""`llamay serve`: load a model and serve the HTTP APIs."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from .common import fail, flag, human_bytes, human_count, resolve_model
from .logs import kv, setup_logging

__all__ = ["add_parser", "build_server", "parse_addr", "parse_duration"]

log = logging.getLogger("llamay.cli")
DEFAULT_ADDR = "localhost:11435"


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
    flag(p, "model", "-m", default=None, help="model name or path to a .gguf file (default: smollm2:135m)")
    flag(p, "addr", default=DEFAULT_ADDR, help=f"HOST:PORT to listen on (default {DEFAULT_ADDR})")
    flag(p, "concurrency", type=int, default=8, help="requests generated at once (default 8)")
    flag(
        p,
        "queue",
        type=int,
        default=64,
        help="sequences each principal may have waiting beyond those (every prompt and choice is one); "
        "more get 429, or 503 without keys (default 64)",
    )
    flag(
        p,
        "ctx",
        type=int,
        default=0,
        help="context size in tokens, shared by running requests (default: the model's, at most 8192)",
    )
    flag(p, "batch", type=int, default=512, help="tokens per decode step (default 512)")
    flag(
        p,
        "max-tokens",
        dest="max_tokens",
        type=int,
        default=2048,
        help="limit for constrained output (schema, grammar, tools) when a request sets none and the "
        "schema does not bound it (default 2048)",
    )
    flag(
        p,
        "finish-tool",
        dest="finish_tool",
        default=os.environ.get("LLAMAY_FINISH_TOOL", "off"),
        help='"auto" adds a finish tool to chat requests with tool_choice "required" that do not set '
        "finish_tool, so the model may end an agent loop without a call; off (the default): only "
        "requests that ask get it ($LLAMAY_FINISH_TOOL)",
    )
    flag(p, "threads", type=int, default=0, help="CPU threads (default: all cores)")
    for name, kind, field in _SAMPLING_FLAGS:
        flag(
            p,
            name,
            dest=field,
            type=kind,
            default=None,
            help=f"default {field} for requests that set none (over the model's GGUF defaults)",
        )
    flag(p, "kv", default="f16", choices=["f16", "f32", "q8_0"], help="KV cache type (default f16)")
    flag(
        p,
        "flash-attn",
        dest="flash_attn",
        default="on",
        choices=["on", "off"],
        help="flash attention: each sequence attends to its own KV cells only (default on)",
    )
    flag(
        p,
        "cache-ram",
        dest="cache_ram",
        type=int,
        default=512,
        help="MiB of RAM per model for cached prefixes moved out of the KV cache; 0: none (default 512)",
    )
    flag(
        p,
        "chat-template",
        dest="chat_template",
        type=Path,
        default=None,
        help="a Jinja chat template file that overrides the model's own",
    )
    flag(p, "embed", default=None, help="an embedding model to load beside the chat model (e.g. all-minilm)")
    flag(p, "rerank", default=None, help="a cross-encoder (rank pooling GGUF) for /v1/rerank and retrieval")
    flag(
        p,
        "index",
        type=Path,
        default=None,
        help="an index built by `llamay index build`, served at /v1/retrieve",
    )
    flag(
        p,
        "max-loaded",
        dest="max_loaded",
        type=int,
        default=2,
        help="models held in memory at once (default 2)",
    )
    flag(
        p,
        "keepalive",
        type=parse_duration,
        default=300.0,
        help="how long an idle model stays loaded: 30s, 5m, 1h; negative keeps it (default 5m; the -m model stays)",
    )
    flag(
        p,
        "keys",
        type=Path,
        default=None,
        help='API keys file: {"keys": [{"key", "principal", "groups", "role"}]} (LLAMAY_API_KEY adds one admin key)',
    )
    flag(
        p,
        "max-connections",
        dest="max_connections",
        type=int,
        default=256,
        help="open connections before new requests get 503 (default 256)",
    )
    flag(
        p,
        "header-timeout",
        dest="header_timeout",
        type=parse_duration,
        default=10.0,
        help="time a connection has to send a request's headers (default 10s)",
    )
    flag(
        p,
        "body-timeout",
        dest="body_timeout",
        type=parse_duration,
        default=120.0,
        help="time a request has to send its whole body, else 408 (default 2m)",
    )
    flag(p, "log-level", dest="log_level", default="INFO", help="DEBUG, INFO, WARNING (default INFO)")
    p.set_defaults(func=run_serve)


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


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"-addr must be HOST:PORT, not {addr!r}")
    return (host or "localhost").strip("[]"), int(port)


def banner_table(base: str) -> str:
    from ..api.app import ENDPOINTS

    width = max(len(path) for _, path, _ in ENDPOINTS) + len(base)
    lines = [f"  {'METHOD':<6}  {'URL':<{width}}  PURPOSE"]
    lines += [f"  {m:<6}  {base + path:<{width}}  {why}" for m, path, why in ENDPOINTS]
    return "\n".join(lines)


def load_extras(args: argparse.Namespace) -> tuple[dict[str, Any], Any]:
    """Encoders (-embed, -rerank) and the retrieval index (-index), when asked for. An
    index records the embedding model it was built with, which is the default -embed."""
    index = None
    embed = args.embed
    if args.index:
        from ..rag import open_index

        index = open_index(args.index)
        embed = embed or index.model_source
        log.info("index opened", extra=kv(path=args.index))
    encoders: dict[str, Any] = {}
    if embed or args.rerank:
        from ..embed import load_encoders

        encoders = load_encoders(embed, args.rerank, threads=args.threads)
        for kind, enc in encoders.items():
            log.info("encoder loaded", extra=kv(role=kind, model=enc.name, dim=enc.dim))
    if index is not None:
        from ..rag import query_encoder

        query_encoder(index, encoders)  # refuses an embedder other than the index's
    return encoders, index


def sampling_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling flags that were given, as RuntimeConfig fields; ValueError when one is
    out of the range every API accepts."""
    from ..types import SamplingParams

    given = {f: getattr(args, f) for _, _, f in _SAMPLING_FLAGS if getattr(args, f, None) is not None}
    try:
        SamplingParams(**given).validate()
    except Exception as exc:
        raise ValueError(f"sampling flag: {exc}") from None
    if given.get("temperature", 0.0) > 2.0:
        raise ValueError("-temp must be between 0 and 2")
    return given


def build_server(
    args: argparse.Namespace,
    *,
    home: Path | None = None,
    model: tuple[str, Path, str | None] | None = None,
) -> tuple[Any, Any]:
    """The ASGI app and its Runtime, as `serve` flags describe them (the caller serves the app
    and closes the runtime). `home`: where contexts are kept (default `llamay_home()`);
    `model`: an already resolved (name, file, sha256) for -m. Raises on a bad flag or model."""
    from ..api.app import create_app
    from ..auth import KeyRing
    from ..chat.flow import FINISH_TOOL_MODES
    from ..runtime import Runtime, RuntimeConfig, load_model
    from ..store import ModelStore, llamay_home

    if args.max_tokens < 1:
        raise ValueError(f"-max-tokens must be at least 1, not {args.max_tokens}")
    if args.finish_tool not in FINISH_TOOL_MODES:  # the flag, or $LLAMAY_FINISH_TOOL
        raise ValueError(f"-finish-tool must be off or auto, not {args.finish_tool!r}")
    keys = KeyRing.load(args.keys)
    name, path, sha = model or resolve_model(args.model)
    config = RuntimeConfig(
        ctx=args.ctx,
        batch=args.batch,
        threads=args.threads,
        concurrency=args.concurrency,
        max_queue=args.queue,
        kv_type=args.kv,
        flash_attn=args.flash_attn == "on",
        cache_ram=max(0, args.cache_ram) * 1024 * 1024,
        chat_template_file=args.chat_template,
        home=home or llamay_home(),
        max_tokens=args.max_tokens,
        finish_tool=args.finish_tool,
        **sampling_flags(args),
    )
    loaded = load_model(name, path, config, sha)
    store = ModelStore()

    def resolve(name: str) -> tuple[str, Path, str | None]:
        found = store.resolve(name)
        return found.name, found.path, found.sha256

    runtime = Runtime(
        config, resolve=resolve, store=store, max_loaded=args.max_loaded, keep_alive=args.keepalive
    )
    runtime.add(loaded, default=True, keep_alive=-1.0)
    app = create_app(runtime, keys)
    try:
        app.state.encoders, app.state.index = load_extras(args)
        runtime.encoders = app.state.encoders
    except Exception:
        runtime.close()
        raise
    return app, runtime


def server_limits(args: argparse.Namespace) -> Any:
    """The slow-client limits from the flags; ValueError for one that is not positive."""
    from ..api.serving import ServerLimits

    for name in ("max_connections", "header_timeout", "body_timeout"):
        if getattr(args, name) <= 0:
            raise ValueError(f"-{name.replace('_', '-')} must be positive, not {getattr(args, name)}")
    return ServerLimits(
        max_connections=args.max_connections,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
    )


def run_serve(args: argparse.Namespace) -> int:
    from ..api.serving import bind, serve

    setup_logging(args.log_level)
    try:
        host, port = parse_addr(args.addr)
        limits = server_limits(args)
        sock = bind(host, port)  # a busy port fails now, not after the models load
    except Exception as exc:
        return fail(exc)
    try:
        app, runtime = build_server(args)
    except Exception as exc:
        sock.close()
        return fail(exc)
    keys = app.state.keys
    loaded = runtime.get(None)
    info = loaded.info
    addr = f"{host}:{port}"
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
            kv=args.kv,
            concurrency=args.concurrency,
            max_tokens=args.max_tokens,
            max_loaded=args.max_loaded,
            keep_alive=f"{args.keepalive:g}s" if args.keepalive >= 0 else "forever",
            auth="api keys" if keys.enabled else "none (single user)",
        ),
    )
    print(banner_table(f"http://{addr}"), file=sys.stderr, flush=True)
    if not keys.enabled and host not in ("localhost", "127.0.0.1", "::1"):
        log.warning(
            "listening beyond this machine without API keys: anyone who can reach it can use it",
            extra=kv(addr=addr),
        )
    try:
        serve(app, host, port, limits, sock)
    finally:
        runtime.close()
        log.info("llamay stopped")
    return 0
