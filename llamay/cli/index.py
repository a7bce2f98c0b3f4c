"""`llamay index build` (index a folder of documents) and `llamay retrieve` (search an index as
a reader with given groups, as ``POST /v1/retrieve`` does)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import textwrap
from pathlib import Path
from typing import Any

from .common import fail, flag

__all__ = ["DEFAULT_EMBED", "add_parser", "default_index", "run_build", "run_retrieve"]

DEFAULT_EMBED = "all-minilm"


def default_index() -> Path:
    """The index used when none is named: ``$LLAMAY_HOME/index.sqlite``."""
    from ..store.layout import llamay_home

    return llamay_home() / "index.sqlite"


def add_parser(sub: Any) -> None:
    """Register `index` (sub-verb `build`) and `retrieve` on the `llamay` subparsers object."""
    p = sub.add_parser(
        "index",
        help="index a folder of documents for retrieval (llamay index build DIR)",
        allow_abbrev=False,
    )
    verbs = p.add_subparsers(dest="index_verb", metavar="VERB")
    p.set_defaults(func=lambda _args: p.print_help() or 2)
    b = verbs.add_parser(
        "build",
        help="build or update the index of a folder",
        allow_abbrev=False,
        description=(
            "Index the text, Markdown, HTML and PDF files under DIR: passages with their byte "
            "ranges, vectors and a keyword index in one SQLite file. Run it again after changes: "
            "unchanged files are not embedded again, deleted ones leave the index. A folder's "
            ".llamay-access file (group names, one per line) says who may read the files below "
            "it; a folder named public, or none, means everyone."
        ),
    )
    b.add_argument("dir", metavar="DIR", help="the folder to index")
    b.add_argument(
        "-o",
        "-output",
        "--output",
        dest="output",
        default=None,
        help="index file (default $LLAMAY_HOME/index.sqlite)",
    )
    flag(b, "embed", default=DEFAULT_EMBED, help=f"embedding model (default {DEFAULT_EMBED})")
    flag(b, "threads", type=int, default=0, help="CPU threads (default: all cores)")
    b.set_defaults(func=run_build)

    r = sub.add_parser(
        "retrieve",
        help="search an index (hybrid: vectors and keywords)",
        allow_abbrev=False,
        description=(
            "Print the passages of the index that best match QUERY, as POST /v1/retrieve gives "
            "them. -groups a,b searches as a reader in those groups (public documents and those "
            "labelled a or b); without it, as the local user, who reads everything."
        ),
    )
    r.add_argument("query", metavar="QUERY")
    flag(r, "index", default=None, help="index file (default $LLAMAY_HOME/index.sqlite)")
    flag(r, "k", type=int, default=5, help="passages to return (1-100, default 5)")
    flag(r, "groups", default=None, help="comma-separated groups of the reader ('' = public only)")
    flag(r, "min-score", dest="min_score", type=float, default=None, help="drop passages scoring less")
    flag(r, "embed", default=None, help="embedding model (default: the one the index was built with)")
    flag(r, "rerank", default=None, help="rerank with this cross-encoder")
    flag(r, "json", action="store_true", help="print the JSON body /v1/retrieve would answer")
    flag(r, "threads", type=int, default=0, help="CPU threads (default: all cores)")
    r.set_defaults(func=run_retrieve)


def _quiet_llama() -> None:
    logging.getLogger("llamay.llama").setLevel(logging.ERROR)


def run_build(args: argparse.Namespace) -> int:
    from ..embed import load_encoder
    from ..rag import EncoderEmbedder, build_index
    from ..rag.progress import Progress

    index_path = Path(args.output) if args.output else default_index()
    root = Path(args.dir)
    try:
        if not root.is_dir():
            raise NotADirectoryError(f"{root} is not a folder")
        _quiet_llama()
        encoder = load_encoder(args.embed, "embed", threads=args.threads)
    except Exception as exc:
        return fail(exc)
    try:
        given = Path(args.embed).expanduser()
        report = build_index(
            root,
            index_path,
            EncoderEmbedder(encoder),
            progress=lambda total: Progress(total, "embedding"),
            model_source=str(given.resolve()) if given.is_file() else args.embed,
        )
    except Exception as exc:
        return fail(exc)
    finally:
        encoder.close()
    for rel, reason in report.skipped:
        print(f"llamay: skipped {rel}: {reason}", file=sys.stderr)
    print(
        f"indexed {root}: {report.documents} documents, {report.passages} passages "
        f"({len(report.added)} added, {len(report.changed)} changed, {report.unchanged} unchanged, "
        f"{len(report.removed)} removed, {len(report.relabelled)} relabelled, {len(report.skipped)} skipped); "
        f"{report.embedded} passages embedded in {report.seconds:.1f}s"
    )
    print(f"  {index_path}")
    return 0


def _reader(groups: str | None) -> Any:
    from ..rag import ADMIN, Reader

    if groups is None:
        return ADMIN
    return Reader(frozenset(g.strip() for g in groups.split(",") if g.strip()))


def run_retrieve(args: argparse.Namespace) -> int:
    from ..embed import Encoder, load_encoder
    from ..rag import open_index, retrieve

    encoders: dict[str, Encoder] = {}
    try:
        index = open_index(Path(args.index) if args.index else default_index())
    except Exception as exc:
        return fail(exc)
    try:
        _quiet_llama()
        encoders["embed"] = load_encoder(args.embed or index.model_source, "embed", threads=args.threads)
        if args.rerank:
            encoders["rerank"] = load_encoder(args.rerank, "rerank", threads=args.threads)
        found = asyncio.run(
            retrieve(
                index, encoders, args.query, _reader(args.groups), top_k=args.k, min_score=args.min_score
            )
        )
    except Exception as exc:
        return fail(exc)
    finally:
        for encoder in encoders.values():
            encoder.close()
        index.close()
    if args.json:
        print(json.dumps(found.as_json(), ensure_ascii=False))
        return 0
    if not found.hits:
        print("no passages found")
    for i, hit in enumerate(found.hits, 1):
        print(f"{i}. {hit.source}  bytes {hit.start}-{hit.end}  score {hit.score:.4f}")
        print(textwrap.indent(textwrap.shorten(hit.text, 300, placeholder=" ..."), "   "))
    return 0
