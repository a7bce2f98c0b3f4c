"""The `llamay` command: one module per verb group."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import httpx

from .. import __version__
from . import ctx, docs, embed, fleet, index, models, redact, run, serve

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llamay",
        description="Run GGUF models locally behind the APIs your code already speaks.",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    serve.add_parser(sub)
    run.add_parser(sub)
    ctx.add_parser(sub)
    models.add_parser(sub)
    embed.add_parser(sub)
    index.add_parser(sub)
    redact.add_parser(sub)
    fleet.add_parser(sub)
    docs.add_parser(sub)
    v = sub.add_parser("version", help="print the version")
    v.set_defaults(func=lambda _args: print(f"llamay {__version__}") or 0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # The reader left (`llamay ... | head`): stop quietly, as other command-line tools do.
        # Later writes (the interpreter's own flush at exit) go nowhere instead of failing.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (RuntimeError, OSError, httpx.HTTPError) as exc:
        print(f"llamay: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
