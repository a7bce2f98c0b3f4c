"""The part of Go's text/template that Ollama's `template` field uses for simple prompts:
`{{ .System }}`, `{{ .Prompt }}`, `{{ .Response }}`, `{{ if .X }}...{{ else }}...{{ end }}`,
comments and the `{{-` / `-}}` whitespace trims. Rendering stops at `{{ .Response }}`
(the model writes the rest), as Ollama's does for generation. Anything else (range over
.Messages, functions, pipelines) is refused with a 400 naming the action.

The template is request text: it is scanned once, left to right, with `str.find` (no
pattern that could backtrack); `{{ if }}` nesting is at most MAX_DEPTH deep and the
rendered prompt at most MAX_OUTPUT characters (a 400 past either)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ...errors import InvalidRequest

__all__ = ["render_template"]

MAX_DEPTH = 32
MAX_OUTPUT = 2_000_000
_FIELDS = ("System", "Prompt", "Response")


@dataclass
class _If:
    field: str
    then: list[object]
    other: list[object]


class _Stop(Exception):
    """Reached {{ .Response }}."""


def _actions(src: str) -> list[tuple[int, int, bool, str, bool]]:
    """(start, end, trim_left, body, trim_right) of each `{{ ... }}`: an action ends at the
    first `}}` after its `{{`. Linear: each `find` resumes where the last one stopped, and
    once no `}}` follows, no later `{{` can be an action either."""
    out: list[tuple[int, int, bool, str, bool]] = []
    pos = 0
    while True:
        start = src.find("{{", pos)
        if start < 0:
            break
        close = src.find("}}", start + 2)
        if close < 0:
            break
        inner = src[start + 2 : close]
        trim_left = len(inner) >= 2 and inner[0] == "-" and inner[1].isspace()
        if trim_left:
            inner = inner[2:]
        trim_right = len(inner) >= 2 and inner[-1] == "-" and inner[-2].isspace()
        if trim_right:
            inner = inner[:-2]
        out.append((start, close + 2, trim_left, inner.strip(), trim_right))
        pos = close + 2
    return out


def _tokens(src: str) -> list[tuple[str, str]]:
    """("text", s) and ("action", body) with the trims applied to the texts."""
    out: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for start, end, trim_left, body, trim_right in _actions(src):
        text = src[pos:start]
        if trim_next:
            text = text.lstrip()
        if trim_left:
            text = text.rstrip()
        out.append(("text", text))
        out.append(("action", body))
        pos, trim_next = end, trim_right
    tail = src[pos:]
    out.append(("text", tail.lstrip() if trim_next else tail))
    return out


def _bad(action: str) -> InvalidRequest:
    return InvalidRequest(
        f"'template' uses {{{{ {action} }}}}, which this server cannot render: it supports "
        "{{ .System }}, {{ .Prompt }}, {{ .Response }} and {{ if .X }}/{{ else }}/{{ end }}",
        param="template",
    )


def _parse(
    tokens: list[tuple[str, str]], i: int, closers: tuple[str, ...], depth: int = 0
) -> tuple[list[object], int, str]:
    if depth > MAX_DEPTH:
        raise InvalidRequest(f"'template' nests {{{{ if }}}} more than {MAX_DEPTH} deep", param="template")
    nodes: list[object] = []
    while i < len(tokens):
        kind, body = tokens[i]
        i += 1
        if kind == "text":
            nodes.append(body)
            continue
        if body.startswith("/*") and body.endswith("*/"):
            continue
        if body in closers:
            return nodes, i, body
        if body.startswith("if "):
            field = body[3:].strip()
            if field.lstrip(".") not in _FIELDS or not field.startswith("."):
                raise _bad(body)
            then, i, closer = _parse(tokens, i, ("else", "end"), depth + 1)
            other: list[object] = []
            if closer == "else":
                other, i, _ = _parse(tokens, i, ("end",), depth + 1)
            nodes.append(_If(field[1:], then, other))
        elif body.startswith(".") and body[1:] in _FIELDS:
            nodes.append(("field", body[1:]))
        else:
            raise _bad(body)
    if closers:
        raise InvalidRequest("'template' has an {{ if }} without its {{ end }}", param="template")
    return nodes, i, ""


def _render(nodes: list[object], values: dict[str, str], out: list[str], size: list[int]) -> None:
    for node in nodes:
        if isinstance(node, str):
            piece = node
        elif isinstance(node, _If):
            _render(node.then if values.get(node.field) else node.other, values, out, size)
            continue
        elif isinstance(node, tuple):
            if node[1] == "Response":
                raise _Stop()
            piece = values.get(node[1], "")
        else:
            continue
        # Each {{ .Prompt }} copies the prompt again: a short template could ask for
        # gigabytes, so the output is counted before it is built.
        size[0] += len(piece)
        if size[0] > MAX_OUTPUT:
            raise InvalidRequest(f"'template' renders to more than {MAX_OUTPUT} characters", param="template")
        out.append(piece)


def render_template(template: str, *, system: str, prompt: str) -> str:
    """`template` rendered with .System and .Prompt, up to {{ .Response }}. InvalidRequest
    for an action it cannot render, nesting past MAX_DEPTH or output past MAX_OUTPUT."""
    nodes, _, _ = _parse(_tokens(template), 0, ())
    out: list[str] = []
    with contextlib.suppress(_Stop):
        _render(nodes, {"System": system, "Prompt": prompt}, out, [0])
    return "".join(out)
