"""The part of Go's text/template that Ollama's `template` field uses for simple prompts:
`{{ .System }}`, `{{ .Prompt }}`, `{{ .Response }}`, `{{ if .X }}...{{ else }}...{{ end }}`,
comments and the `{{-` / `-}}` whitespace trims. Rendering stops at `{{ .Response }}`
(the model writes the rest), as Ollama's does for generation. Anything else (range over
.Messages, functions, pipelines) is refused with a 400 naming the action."""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from ...errors import InvalidRequest

__all__ = ["render_template"]

_ACTION = re.compile(r"\{\{(-\s)?\s*(.*?)\s*(\s-)?\}\}", re.DOTALL)
_FIELDS = ("System", "Prompt", "Response")


@dataclass
class _If:
    field: str
    then: list[object]
    other: list[object]


class _Stop(Exception):
    """Reached {{ .Response }}."""


def _tokens(src: str) -> list[tuple[str, str]]:
    """("text", s) and ("action", body) with the trims applied to the texts."""
    out: list[tuple[str, str]] = []
    pos, trim_next = 0, False
    for m in _ACTION.finditer(src):
        text = src[pos : m.start()]
        if trim_next:
            text = text.lstrip()
        if m.group(1):
            text = text.rstrip()
        out.append(("text", text))
        out.append(("action", m.group(2)))
        pos, trim_next = m.end(), bool(m.group(3))
    tail = src[pos:]
    out.append(("text", tail.lstrip() if trim_next else tail))
    return out


def _bad(action: str) -> InvalidRequest:
    return InvalidRequest(
        f"'template' uses {{{{ {action} }}}}, which this server cannot render: it supports "
        "{{ .System }}, {{ .Prompt }}, {{ .Response }} and {{ if .X }}/{{ else }}/{{ end }}",
        param="template",
    )


def _parse(tokens: list[tuple[str, str]], i: int, closers: tuple[str, ...]) -> tuple[list[object], int, str]:
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
            then, i, closer = _parse(tokens, i, ("else", "end"))
            other: list[object] = []
            if closer == "else":
                other, i, _ = _parse(tokens, i, ("end",))
            nodes.append(_If(field[1:], then, other))
        elif body.startswith(".") and body[1:] in _FIELDS:
            nodes.append(("field", body[1:]))
        else:
            raise _bad(body)
    if closers:
        raise InvalidRequest("'template' has an {{ if }} without its {{ end }}", param="template")
    return nodes, i, ""


def _render(nodes: list[object], values: dict[str, str], out: list[str]) -> None:
    for node in nodes:
        if isinstance(node, str):
            out.append(node)
        elif isinstance(node, _If):
            _render(node.then if values.get(node.field) else node.other, values, out)
        elif isinstance(node, tuple):
            if node[1] == "Response":
                raise _Stop()
            out.append(values.get(node[1], ""))


def render_template(template: str, *, system: str, prompt: str) -> str:
    """`template` rendered with .System and .Prompt, up to {{ .Response }}."""
    nodes, _, _ = _parse(_tokens(template), 0, ())
    out: list[str] = []
    with contextlib.suppress(_Stop):
        _render(nodes, {"System": system, "Prompt": prompt}, out)
    return "".join(out)
