"""`llamay run [MODEL] [PROMPT]`: find what answers (a llamay server at LLAMAY_HOST, else the
model loaded here with a progress bar), then answer once or converse."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

import httpx

from ..errors import LlamayError
from ..library import LLM
from ..store import DEFAULT_MODEL
from .chat import ChatSession, Settings, converse
from .common import fail
from .term import Term

__all__ = ["run_chat", "server_url"]

DEFAULT_HOST = "localhost:11435"


def server_url(host: str | None) -> str:
    """`host` (else $LLAMAY_HOST, else localhost:11435) as a URL."""
    host = host or os.environ.get("LLAMAY_HOST") or DEFAULT_HOST
    return host.rstrip("/") if "://" in host else f"http://{host.rstrip('/')}"


def _llamay_models(url: str) -> list[str] | None:
    """The models a llamay server at `url` has loaded (its /health; no key needed), or None
    when no llamay server answers there."""
    try:
        r = httpx.get(url + "/health", timeout=1.0)
        models = r.json().get("models") if r.status_code == 200 else None
        return [str(m.get("name")) for m in models] if isinstance(models, list) else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def _load_on(url: str, model: str, key: str | None, term: Term) -> None:
    """Have the server load `model`, drawing its progress (/api/load's NDJSON). Errors are
    left to the first answer, which names them the way the server does."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    label = f"loading {model} on {url}"
    try:
        with httpx.stream(
            "POST", url + "/api/load", json={"model": model}, headers=headers, timeout=600
        ) as r:
            if r.status_code != 200:
                return
            for line in r.iter_lines():
                event = json.loads(line) if line.strip() else {}
                if event.get("status") == "loading" and event.get("total"):
                    term.progress(label, event["completed"] / event["total"])
                elif event.get("status") in ("success", "already_loaded"):
                    term.progress(label, 1.0)
    except (httpx.HTTPError, ValueError):
        return
    finally:
        term.end_progress()


def _is_file(model: str | None) -> bool:
    """A model given as a file, which only this process can open (a server loads by name)."""
    return model is not None and (model.endswith(".gguf") or Path(model).is_file())


def connect(args: argparse.Namespace, term: Term) -> tuple[LLM, str]:
    """The LLM to talk to and where it runs."""
    if not args.local and not _is_file(args.model):
        url = server_url(args.host)
        loaded = _llamay_models(url)
        if loaded is not None:
            key = os.environ.get("LLAMAY_API_KEY")
            if args.model and args.model not in loaded and args.model.removesuffix(":latest") not in loaded:
                _load_on(url, args.model, key, term)
            return LLM(args.model, url=url, api_key=key), url
    label = f"loading {args.model or DEFAULT_MODEL}"
    try:
        llm = LLM(
            args.model,
            ctx=args.ctx,
            threads=args.threads,
            progress=lambda fraction: term.progress(label, fraction),
        )
    finally:
        term.end_progress()
    return llm, "this process"


def _prompt(args: argparse.Namespace) -> str | None:
    """The one prompt to answer: the words given, then what is piped in; None for a chat."""
    words = " ".join(args.prompt_words)
    piped = "" if sys.stdin.isatty() else sys.stdin.read()
    if not words and not piped.strip():
        return None if sys.stdin.isatty() else ""
    return f"{words}\n\n{piped}".strip() if words and piped.strip() else (words or piped).strip()


def run_chat(args: argparse.Namespace) -> int:
    if args.json or args.schema or args.grammar_file:
        return fail(ValueError("-json, -schema and -grammar-file go with -p PROMPT"))
    term = Term()
    settings = Settings(
        temperature=args.temp,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        max_tokens=args.n,
        system=args.system,
        verbose=args.verbose,
    )
    try:
        prompt = _prompt(args)
        if prompt == "":
            return fail(ValueError("the piped prompt is empty"))
        llm, where = connect(args, term)
    except (LlamayError, OSError, ValueError, RuntimeError) as exc:
        return fail(exc)
    try:
        session = ChatSession(llm, term, settings, where)
        if prompt is not None:
            return 0 if session.ask(prompt, remember=False) else 1
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        converse(session, input)
        return 0
    except LlamayError as exc:
        return fail(exc)
    finally:
        llm.close()
