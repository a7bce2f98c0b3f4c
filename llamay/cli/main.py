"""The `llamay` command: one module per verb group."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

import httpx

from .. import __version__
from ..errors import LlamayError
from . import ctx, docs, embed, fleet, index, models, redact, run, serve

__all__ = ["main", "build_parser", "parse"]


# argparse reads `-hots` as `-h` given "ots": a mistyped flag that starts like -h.
_AFTER_HELP = re.compile(r"argument -h/--help: ignored explicit argument '(.*)'")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors about a mistyped flag name the nearest real one.
    Every verb's parser is one too (subparsers take their parent's class)."""

    def error(self, message: str) -> Any:
        stuck = _AFTER_HELP.fullmatch(message)
        if stuck:
            message = _unknown(self, ["-h" + stuck.group(1)])
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
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


def _verb_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost parser `args` went through (`llamay fleet status`'s, say)."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs else None
        if chosen is None or chosen not in subs[0].choices:
            return parser
        parser = subs[0].choices[chosen]


def _unknown(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """The error for arguments `parser` does not take, with the closest flag it does take."""
    message = f"unrecognized arguments: {' '.join(extras)}"
    flags = [s for a in parser._actions for s in a.option_strings]
    for extra in extras:
        if extra.startswith("-"):
            name = extra.split("=", 1)[0]
            close = difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
            if not close and not name.startswith("--"):
                close = difflib.get_close_matches("-" + name, flags, n=1, cutoff=0.6)
            if close:
                return f"{message} (did you mean -{close[0].lstrip('-')}?)"
    return message


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, but an argument no verb takes is reported by that verb's own
    parser (its usage, not the top level's), with the nearest flag it does take."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        _verb_parser(parser, args).error(_unknown(_verb_parser(parser, args), extras))
    return args


def _address(exc: httpx.ConnectError) -> str:
    """scheme://host:port of the request that could not connect."""
    try:
        url = exc.request.url
    except RuntimeError:
        return "the address given"
    return f"{url.scheme}://{url.netloc.decode()}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse(parser, argv)
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
    except LlamayError as exc:
        print(f"llamay: {exc.message}", file=sys.stderr)
        return 1
    except httpx.ConnectError as exc:
        what = "fleet" if args.verb == "fleet" else "llamay server"
        print(f"llamay: no {what} is running at {_address(exc)}", file=sys.stderr)
        return 1
    except (RuntimeError, OSError, httpx.HTTPError) as exc:
        print(f"llamay: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
