"""`llamay show NAME`: a stored model as a person reads it (as `ollama show` prints it):
architecture, parameters, context length, quantisation, capabilities, sampling defaults,
system prompt and template; `-json` gives the raw record, `-template` the template alone."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from ..errors import LlamayError
from ..store import ModelStore
from .common import fail, human_bytes, pull_hint

__all__ = ["show", "summary"]

# A template at most this long, on one line, is printed in place; longer ones are named.
_SHORT_TEMPLATE = 120


def _header(path: Any) -> tuple[dict[str, Any], int]:
    """(GGUF metadata, parameter count); empty for a file that cannot be read."""
    from ..store.gguf_header import read_header

    try:
        h = read_header(path)
    except (OSError, ValueError):
        return {}, 0
    return h.metadata, h.n_params


def _rows(title: str, rows: list[tuple[str, str]]) -> list[str]:
    if not rows:
        return []
    width = max(len(k) for k, _ in rows)
    return [f"  {title}", *(f"    {k:<{width}}  {v}" if v else f"    {k}" for k, v in rows), ""]


def _template_line(template: str | None, own: bool) -> str:
    if not template:
        return "none (chat turns fall back to a plain layout)"
    where = "set by create" if own else "from the GGUF"
    if "\n" not in template and len(template) <= _SHORT_TEMPLATE:
        return f"{template}  ({where})"
    return f"present, {len(template):,} characters, {where} (-template prints it)"


def summary(details: Any, meta: Mapping[str, Any], n_params: int) -> str:
    """The readable form of `details` (a store ModelDetails) and its GGUF header."""
    from ..api.ollama.describe import capabilities, human_params, quant_name
    from ..chat.reasoning import detect_reasoning

    arch = str(meta.get("general.architecture") or "unknown")
    count = meta.get("general.parameter_count")
    count = count if isinstance(count, int) and count > 0 else n_params
    model: list[tuple[str, str]] = [("architecture", arch)]
    if count:
        model.append(("parameters", human_params(count)))
    for key, label in (("context_length", "context length"), ("embedding_length", "embedding length")):
        value = meta.get(f"{arch}.{key}")
        if isinstance(value, int):
            model.append((label, str(value)))
    model.append(("quantization", quant_name(meta.get("general.file_type"))))
    template = details.template or meta.get("tokenizer.chat_template")
    template = template if isinstance(template, str) else None
    thinks = detect_reasoning(template, lambda _: None) is not None if template else False
    lines = [f"  {details.name}  sha256:{details.sha256[:12]}  {human_bytes(details.size)}", ""]
    lines += _rows("Model", model)
    lines += _rows("Capabilities", [(c, "") for c in capabilities(meta, thinking=thinks)])
    params = [
        (k, json.dumps(v) + ("" if k in details.params else "  (GGUF default)"))
        for k, v in sorted(details.effective.items())
    ]
    lines += _rows("Parameters", params)
    if details.system is not None:
        lines += ["  System", *(f"    {line}" for line in details.system.splitlines()), ""]
    lines += _rows("Template", [(_template_line(template, details.template is not None), "")])
    lines += _rows("Files", [("path", str(details.path)), ("parts", str(details.parts)),
                             ("source", json.dumps(details.source))])  # fmt: skip
    return "\n".join(lines).rstrip("\n")


def show(args: argparse.Namespace) -> int:
    try:
        details = ModelStore().show(args.name)
    except LlamayError as exc:
        return fail(pull_hint(exc, args.name))
    if args.json:
        print(json.dumps(dataclasses.asdict(details), indent=2, default=str))
        return 0
    meta, n_params = _header(details.path)
    if args.template:
        template = details.template or meta.get("tokenizer.chat_template")
        print(template if isinstance(template, str) else "")
        return 0
    print(summary(details, meta, n_params))
    return 0
