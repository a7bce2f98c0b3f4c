"""`llamay run [MODEL] [PROMPT]`: chat with a model, on a running llamay server when one
answers at LLAMAY_HOST, else loaded in this process. With a prompt (or one piped in) it
answers once; without, it is an interactive conversation. `-p` keeps the single generation
it always ran, with its stats line (and `-json`, `-schema`, `-grammar-file`, `-chat`)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from ..types import FinishEvent, SamplingParams
from .common import fail, flag, host_flags, pull_hint, resolve_model

__all__ = ["add_parser", "stats_line"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "run",
        help="chat with a model (interactive without a prompt)",
        allow_abbrev=False,
        description=(
            "Chat with a model: one answer to PROMPT (or to what is piped in), or, without one, "
            "an interactive conversation (/? lists its commands). It uses the llamay server at "
            "LLAMAY_HOST (default localhost:11435) when one answers, else loads the model here. "
            "A lone argument that names no model is a prompt for the default model: "
            'llamay run "Say hello." '
            "-p PROMPT runs one raw generation in this process and prints its stats."
        ),
    )
    p.add_argument("model_arg", nargs="?", default=None, metavar="MODEL", help="model name or .gguf path")
    p.add_argument("prompt_words", nargs="*", metavar="PROMPT", help="a prompt: answer it and exit")
    flag(p, "model", "-m", default=None, help="model name or .gguf path (default: smollm2:135m)")
    flag(p, "prompt", "-p", default=None, help="one generation from this text in this process, with stats")
    flag(p, "chat", action="store_true", help="with -p: send the prompt through the chat template")
    flag(p, "system", default=None, help="a system message")
    flag(p, "verbose", action="store_true", help="print a stats line after each answer")
    flag(p, "local", action="store_true", help="load the model in this process even if a server answers")
    host_flags(p)
    flag(p, "n", type=int, default=None, help="maximum tokens to generate (-p: default 256)")
    flag(p, "temp", type=float, default=None, help="temperature; 0 is greedy (-p: default 0.8)")
    flag(p, "top-k", dest="top_k", type=int, default=None, help="top-k (-p: default 40, 0 off)")
    flag(p, "top-p", dest="top_p", type=float, default=None, help="top-p (-p: default 0.95)")
    flag(p, "seed", type=int, default=None, help="random seed (default: random)")
    flag(p, "json", action="store_true", help="constrain the output to a JSON object")
    flag(p, "schema", type=Path, default=None, help="constrain the output to this JSON schema file")
    flag(
        p,
        "grammar-file",
        dest="grammar_file",
        type=Path,
        default=None,
        help="constrain the output to this GBNF grammar file (llama.cpp dialect)",
    )
    flag(p, "ctx", type=int, default=0, help="context size (default: the model's, at most 8192)")
    flag(p, "threads", type=int, default=0, help="CPU threads (default: all cores)")
    p.set_defaults(func=run_run)


def stats_line(
    n_prompt: int, prompt_ms: float, n_gen: int, gen_ms: float, reason: str, drafted: int = 0, taken: int = 0
) -> str:
    """`prompt 9 tokens in 40ms (225.0 tok/s) · generated 64 in 610ms (104.9 tok/s) · 48 of
    60 drafted taken · stop: length` (the drafts part only when speculation drafted any)."""

    def rate(n: int, ms: float) -> str:
        return f"{n / (ms / 1000):.1f}" if ms > 0 else "inf"

    gen = f"{gen_ms / 1000:.3f}s" if gen_ms >= 1000 else f"{gen_ms:.0f}ms"
    drafts = f"{taken} of {drafted} drafted taken · " if drafted else ""
    return (
        f"prompt {n_prompt} tokens in {prompt_ms:.0f}ms ({rate(n_prompt, prompt_ms)} tok/s) · "
        f"generated {n_gen} in {gen} ({rate(n_gen, gen_ms)} tok/s) · {drafts}stop: {reason}"
    )


def mask_line(label: str, steps: int, mask_ms: float, decode_ms: float) -> str:
    """`json mask: 27 steps, 0.05 ms each, 0.4% of decode`"""
    each = mask_ms / steps if steps else 0.0
    share = 100.0 * mask_ms / decode_ms if decode_ms > 0 else 0.0
    return f"{label} mask: {steps} steps, {each:.2f} ms each, {share:.1f}% of decode"


def print_stats(ev: FinishEvent, label: str | None) -> None:
    """The stats line, and with a constraint (`label` names it) the mask's cost."""
    x = ev.extra
    u = ev.usage
    print(
        stats_line(
            u.prompt_tokens,
            x["prompt_ms"],
            u.completion_tokens,
            x["generate_ms"],
            ev.reason,
            x.get("draft_tokens", 0),
            x.get("draft_accepted_tokens", 0),
        ),
        file=sys.stderr,
    )
    if label is not None:
        print(mask_line(label, x["mask_steps"], x["mask_ms"], x["decode_ms"]), file=sys.stderr)
    if ev.message:
        print(f"note: {ev.message}", file=sys.stderr)


def grammar_of(args: argparse.Namespace) -> tuple[str, Any] | None:
    """(label, Grammar) from -json / -schema / -grammar-file, at most one."""
    from ..grammar import Grammar

    chosen = [name for name in ("json", "schema", "grammar_file") if getattr(args, name)]
    if len(chosen) > 1:
        raise ValueError("use only one of -json, -schema, -grammar-file")
    if args.json:
        return "json", Grammar.json_object()
    if args.schema:
        return "json", Grammar.from_json_schema(json.loads(args.schema.read_text()))
    if args.grammar_file:
        return "grammar", Grammar.from_gbnf(args.grammar_file.read_text())
    return None


def run_run(args: argparse.Namespace) -> int:
    if args.model is not None and args.model_arg is not None:
        # `run -m MODEL PROMPT...`: the first word is the prompt's too.
        args.prompt_words = [args.model_arg, *args.prompt_words]
        args.model_arg = None
    # `run TEXT`: TEXT may be a model or a prompt; the chat decides once it knows the models.
    args.maybe_prompt = args.model is None and args.model_arg is not None and not args.prompt_words
    args.model = args.model or args.model_arg
    if args.prompt is None:
        from .interactive import run_chat

        return run_chat(args)
    if args.prompt_words:
        return fail(ValueError("give the prompt either with -p or after the model, not both"))
    for name, default in (("n", 256), ("temp", 0.8), ("top_k", 40), ("top_p", 0.95)):
        if getattr(args, name) is None:
            setattr(args, name, default)
    from ..runtime import Runtime, RuntimeConfig, load_model

    try:
        constrained = grammar_of(args)
        name, path, sha = resolve_model(args.model)
        config = RuntimeConfig(ctx=args.ctx, threads=args.threads, concurrency=1)
        loaded = load_model(name, path, config, sha)
    except Exception as exc:
        return fail(pull_hint(exc, args.model))
    try:
        runtime = Runtime(config)
        runtime.add(loaded, default=True)
        asyncio.run(_generate(args, runtime, constrained))
    except Exception as exc:
        return fail(exc)
    finally:
        loaded.close()
    return 0


class _Printed:
    """The pipeline's steps (see chat/pipeline.py) as the text to print: reasoning and
    content as they come, a newline at the end; `finish` is the end's event."""

    def __init__(self) -> None:
        self.finish: FinishEvent | None = None

    def start(self, gen: Any) -> Sequence[str]:
        return ()

    def delta(self, step: Any) -> Sequence[str]:
        return ["".join(p.text for p in step.pieces if p.kind in ("content", "reasoning"))]

    def done(self, step: Any) -> Sequence[str]:
        self.finish = step.choice.finish
        return [*self.delta(step), "\n"]

    def error(self, exc: Exception) -> NoReturn:
        raise exc


async def _generate(args: argparse.Namespace, runtime: Any, constrained: tuple[str, Any] | None) -> None:
    """One generation through the chat pipeline, printed as it streams. The options are
    the command's own: the model's defaults apply to none of them."""
    from ..chat.flow import ChatOptions
    from ..chat.pipeline import Frames, run
    from ..chat.prepare import ChatInput, Input, Job, Knobs, ModelRef, TextInput, prepare
    from ..types import DEFAULTABLE

    grammar = constrained[1] if constrained else None
    prompt: Input
    if args.chat:
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
            {"role": "user", "content": args.prompt}
        ]
        prompt = ChatInput(ChatOptions(messages=messages, grammar=grammar))
    else:
        prompt = TextInput(args.prompt, grammar, special=False)
    sampling = SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    knobs = Knobs(sampling.validate(), DEFAULTABLE, max_tokens=args.n)
    # Preparing compiles the constraint (and builds the tokenizer it needs) before the timed run.
    ready = await prepare(runtime, Job(ModelRef(), (prompt,), knobs))
    printed = _Printed()
    async for text in Frames(run(ready), printed):
        sys.stdout.write(text)
        sys.stdout.flush()
    if printed.finish is not None:
        label = (constrained[0] if constrained else "json") if ready.prompts[0].plan is not None else None
        print_stats(printed.finish, label)
