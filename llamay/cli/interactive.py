"""`llamay run [MODEL] [PROMPT]`: find what answers (a llamay server at LLAMAY_HOST, else the
model loaded here with a progress bar), then answer once or converse. `llamay run TEXT`, one
word group that names no model, asks TEXT of the default model."""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from pathlib import Path

import httpx

from ..errors import LlamayError
from ..library import LLM
from ..store import DEFAULT_MODEL, ModelStore
from .chat import ChatSession, Settings, converse
from .common import fail, pull_hint, server_url
from .term import Term

__all__ = ["run_chat", "server_url", "names_a_model"]

# The shape of a model reference that is not installed yet: `name:tag`, `owner/name`,
# `hf:owner/repo`. A lone word without either is more likely a prompt.
_REFERENCE = re.compile(r"[\w.+-]+(?:[/:][\w.+-]+)+")


def _llamay_models(url: str) -> list[str] | None:
    """The models a llamay server at `url` has loaded (its /health; no key needed), or None
    when no llamay server answers there."""
    try:
        r = httpx.get(url + "/health", timeout=1.0)
        models = r.json().get("models") if r.status_code == 200 else None
        return [str(m.get("name")) for m in models] if isinstance(models, list) else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def _server_names(url: str, key: str | None) -> set[str]:
    """The models a server at `url` has stored (/api/tags), with and without `:latest`."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        r = httpx.get(url + "/api/tags", headers=headers, timeout=5.0)
        models = r.json().get("models") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return set()
    names = {str(m.get("name")) for m in models if isinstance(m, dict)} if isinstance(models, list) else set()
    return names | {n.removesuffix(":latest") for n in names}


def names_a_model(text: str, served: set[str] | None) -> bool:
    """Whether `llamay run TEXT` means the model TEXT: a .gguf file, a catalog model, an
    installed one (here, or on the server, whose names are `served`), or a reference shaped
    like one (`name:tag`, `owner/name`), whose absence is then reported with the way to pull
    it. Anything else (words, a sentence) is a prompt for the default model."""
    text = text.strip()
    if not text or _is_file(text):
        return True
    if any(c.isspace() for c in text) or len(text) > 512:
        return False
    if served is not None and (text in served or text.removesuffix(":latest") in served):
        return True
    store = ModelStore()
    try:
        if store.catalog.get(text) is not None or store.installed(text) is not None:
            return True
    except (LlamayError, ValueError):
        pass
    return _REFERENCE.fullmatch(text) is not None


def _load_on(url: str, model: str, key: str | None, term: Term) -> None:
    """Have the server load `model`, drawing its progress (/api/load's NDJSON). A model
    the server cannot find or load raises its error before any chat begins; other failures
    are left to the first answer, which names them the way the server does."""
    from ..library.remote_wire import error_of

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    label = f"loading {model} on {url}"
    try:
        with httpx.stream(
            "POST", url + "/api/load", json={"model": model}, headers=headers, timeout=600
        ) as r:
            if r.status_code in (400, 404):
                r.read()
                error = r.json().get("error")
                if not error:
                    return
                body = error if isinstance(error, dict) else {"message": str(error)}
                if r.status_code == 404:  # Ollama's shape carries no code: 404 is the model
                    body = {"code": "model_not_found", **body}
                raise error_of(body, r.status_code)
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


def _server(args: argparse.Namespace) -> tuple[str, list[str]] | None:
    """(URL, loaded models) of the llamay server to use, or None to run here."""
    if args.local or _is_file(args.model):
        return None
    url = server_url(args.host)
    loaded = _llamay_models(url)
    return (url, loaded) if loaded is not None else None


def _model_or_prompt(args: argparse.Namespace, server: tuple[str, list[str]] | None) -> None:
    """`llamay run TEXT` (TEXT alone, no -m): a prompt for the default model unless TEXT
    names a model (see names_a_model)."""
    text = args.model
    if not getattr(args, "maybe_prompt", False) or text is None or args.prompt_words:
        return
    served = None
    if server is not None:
        served = set(server[1]) | _server_names(server[0], args.key)
    if not names_a_model(text, served):
        args.prompt_words, args.model = [text], None


def connect(args: argparse.Namespace, term: Term, server: tuple[str, list[str]] | None) -> tuple[LLM, str]:
    """The LLM to talk to and where it runs."""
    if server is not None:
        url, loaded = server
        if args.model and args.model not in loaded and args.model.removesuffix(":latest") not in loaded:
            _load_on(url, args.model, args.key, term)
        return LLM(args.model, url=url, api_key=args.key), url
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
        server = _server(args)
        _model_or_prompt(args, server)
        prompt = _prompt(args)
        if prompt == "":
            return fail(ValueError("the piped prompt is empty"))
        llm, where = connect(args, term, server)
    except (LlamayError, OSError, ValueError, RuntimeError) as exc:
        return fail(pull_hint(exc, args.model or DEFAULT_MODEL))
    try:
        session = ChatSession(llm, term, settings, where)
        if prompt is not None:
            return 0 if session.ask(prompt, remember=False) else 1
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        converse(session, input)
        return 0
    except LlamayError as exc:
        return fail(pull_hint(exc, args.model or DEFAULT_MODEL))
    finally:
        llm.close()
