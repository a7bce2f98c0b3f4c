"""`llamay ctx`: list, snapshot, restore, delete and move server-held contexts over HTTP."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import httpx

from .common import flag

__all__ = ["add_parser"]

DEFAULT_URL = "http://localhost:11435"


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "ctx",
        help="manage server-held contexts",
        allow_abbrev=False,
        description="List, snapshot, restore, delete and move contexts on a running server.",
    )
    verbs = p.add_subparsers(dest="ctx_verb", metavar="VERB", required=True)

    def verb(name: str, help_: str) -> argparse.ArgumentParser:
        v: argparse.ArgumentParser = verbs.add_parser(name, help=help_, allow_abbrev=False, description=help_)
        flag(
            v,
            "url",
            default=os.environ.get("LLAMAY_URL", DEFAULT_URL),
            help=f"server URL (default {DEFAULT_URL})",
        )
        flag(v, "key", default=os.environ.get("LLAMAY_API_KEY"), help="API key (default: $LLAMAY_API_KEY)")
        return v

    verb("ls", "list contexts").set_defaults(func=ls)
    v = verb("snapshot", "write a context to a file")
    v.add_argument("id")
    flag(v, "o", "-output", dest="output", type=Path, required=True, help="file to write")
    v.set_defaults(func=snapshot)
    v = verb("restore", "restore a snapshot file as a new context")
    v.add_argument("file", type=Path)
    v.set_defaults(func=restore)
    v = verb("rm", "delete a context")
    v.add_argument("id")
    v.set_defaults(func=rm)
    v = verb("move", "move a context to another server (deleted here only once the target has it)")
    v.add_argument("id")
    flag(v, "from", dest="src", default=None, help="source server URL (default: -url)")
    flag(v, "to", dest="dst", required=True, help="target server URL")
    flag(v, "to-key", dest="to_key", default=None, help="API key for the target (default: -key)")
    v.set_defaults(func=move)


def _client(url: str, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=600)


def _check(r: httpx.Response) -> httpx.Response:
    if r.status_code >= 400:
        try:
            message = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = r.text
        raise RuntimeError(f"{r.request.method} {r.request.url.path}: {r.status_code} {message}")
    return r


def ls(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    with _client(args.url, args.key) as c:
        params = {"limit": "1000"}
        while True:  # the server returns a page at a time
            page = _check(c.get("/v1/contexts", params=params)).json()
            rows += page["data"]
            if not page.get("has_more") or not page["data"]:
                break
            params["after"] = page["last_id"]
    print(f"{'ID':<30} {'MODEL':<16} {'TOKENS':>7} {'OWNER':<10} {'MARKING':<14} RESIDENT")
    for r in rows:
        print(f"{r['id']:<30} {r['model']:<16} {r['tokens']:>7} {str(r['owner'] or '-'):<10} "
              f"{str(r['marking'] or '-'):<14} {'yes' if r['resident'] else 'no (on disk)'}")  # fmt: skip
    return 0


def snapshot(args: argparse.Namespace) -> int:
    with _client(args.url, args.key) as c:
        data = _check(c.get(f"/v1/contexts/{args.id}/snapshot")).content
    args.output.write_bytes(data)
    print(f"wrote {args.output} ({len(data):,} bytes)", file=sys.stderr)
    return 0


def restore(args: argparse.Namespace) -> int:
    with _client(args.url, args.key) as c:
        got = _check(c.post("/v1/contexts/restore", content=args.file.read_bytes())).json()
    print(got["id"])
    return 0


def rm(args: argparse.Namespace) -> int:
    with _client(args.url, args.key) as c:
        _check(c.delete(f"/v1/contexts/{args.id}"))
    return 0


def move(args: argparse.Namespace) -> int:
    src_url = args.src or args.url
    with _client(src_url, args.key) as src, _client(args.dst, args.to_key or args.key) as dst:
        data = _check(src.get(f"/v1/contexts/{args.id}/snapshot")).content
        new_id = _check(dst.post("/v1/contexts/restore", content=data)).json()["id"]
        # Only now, with the target holding it, does the source let go.
        _check(dst.get(f"/v1/contexts/{new_id}"))
        _check(src.delete(f"/v1/contexts/{args.id}"))
    print(new_id)
    return 0
