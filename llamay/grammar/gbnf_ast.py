"""The GBNF syntax tree and its rendering as llguidance Lark.

Nodes compare by identity: each `Chars`/`Tok` node is one terminal *occurrence*, which
is what the lexeme analysis in .gbnf_lexemes reasons about.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["Chars", "Tok", "Ref", "Seq", "Alt", "Rep", "Node", "MAX_CP", "children", "to_lark"]

MAX_CP = 0x10FFFF


@dataclass(eq=False)
class Chars:
    """One code point from `ranges` (inclusive, sorted, disjoint). `regex` renders it;
    `literal` is set when it came from a quoted string."""

    ranges: tuple[tuple[int, int], ...]
    regex: str
    literal: str | None = None
    # Set by the lexeme analysis: render `Rep(this, lo, hi)`/this as one greedy lexeme.
    run: tuple[int, int | None] | None = field(default=None)


@dataclass(eq=False)
class Tok:
    """A model token: `<[id]>`, `<[^id]>` or `<name>` (already in Lark syntax)."""

    lark: str


@dataclass(eq=False)
class Ref:
    name: str


@dataclass(eq=False)
class Seq:
    items: list[Node]


@dataclass(eq=False)
class Alt:
    options: list[Node]


@dataclass(eq=False)
class Rep:
    item: Node
    lo: int
    hi: int | None  # None: unbounded


Node = Chars | Tok | Ref | Seq | Alt | Rep


def children(node: Node) -> Iterator[Node]:
    if isinstance(node, Seq):
        yield from node.items
    elif isinstance(node, Alt):
        yield from node.options
    elif isinstance(node, Rep):
        yield node.item


def char_class(ranges: list[tuple[int, int]], negated: bool) -> Chars:
    """A `[...]` class; `ranges` as written (unsorted, possibly overlapping)."""
    merged: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
        else:
            merged.append((lo, hi))
    body = "".join(_class_item(lo, hi) for lo, hi in merged)
    if not negated:
        return Chars(tuple(merged), f"[{body}]")
    complement, start = [], 0
    for lo, hi in merged:
        if lo > start:
            complement.append((start, lo - 1))
        start = hi + 1
    if start <= MAX_CP:
        complement.append((start, MAX_CP))
    return Chars(tuple(complement), f"[^{body}]")


def any_char() -> Chars:
    return Chars(((0, MAX_CP),), "(?s:.)")


def literal_char(cp: int) -> Chars:
    return Chars(((cp, cp),), "[" + _class_item(cp, cp) + "]", literal=chr(cp))


def _class_item(lo: int, hi: int) -> str:
    def one(cp: int) -> str:
        ch = chr(cp)
        return ch if ch.isascii() and ch.isalnum() else f"\\x{{{cp:X}}}"

    return one(lo) if lo == hi else f"{one(lo)}-{one(hi)}"


def to_lark(rules: dict[str, Node]) -> str:
    """Lark source with rule `root` as the start rule."""
    names = _lark_names(rules)
    lines = ["start: " + names["root"]]
    lines += [f"{names[name]}: {_render(body, names, top=True)}" for name, body in rules.items()]
    return "\n".join(lines) + "\n"


def _render(node: Node, names: dict[str, str], top: bool = False) -> str:
    if isinstance(node, Chars):
        if node.run is not None:
            lo, hi = node.run
            return _run(node.regex, lo, hi)
        return json.dumps(node.literal, ensure_ascii=False) if node.literal else f"/{node.regex}/"
    if isinstance(node, Tok):
        return node.lark
    if isinstance(node, Ref):
        return names[node.name]
    if isinstance(node, Seq):
        if not node.items:
            return "()"
        inner = " ".join(_render(i, names) for i in node.items)
        return inner if top or len(node.items) == 1 else f"({inner})"
    if isinstance(node, Alt):
        inner = " | ".join(_render(o, names, top=True) for o in node.options)
        return inner if top else f"({inner})"
    if isinstance(node.item, Chars) and node.item.run is not None:
        return _render(node.item, names)  # the whole repetition is one lexeme
    item = _render(node.item, names)
    suffix = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((node.lo, node.hi))
    if suffix is None:
        suffix = f"{{{node.lo},{'' if node.hi is None else node.hi}}}"
    return f"({item}{suffix})"


def _run(regex: str, lo: int, hi: int | None) -> str:
    # A lexeme may not match the empty string, so an optional run is `(/x+/)?`.
    if lo == 0:
        return f"(/{regex}{{1,{'' if hi is None else hi}}}/)?"
    return f"/{regex}{{{lo},{'' if hi is None else hi}}}/"


def _lark_names(rules: dict[str, Node]) -> dict[str, str]:
    """Distinct lowercase Lark rule names (uppercase would make a rule a lexeme)."""
    names: dict[str, str] = {}
    taken = {"start"}
    for gbnf_name in rules:
        base = "r_" + re.sub(r"[^a-z0-9_]", "_", gbnf_name.lower())
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        names[gbnf_name] = name
    return names
