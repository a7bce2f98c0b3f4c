"""Short strings that match a grammar's string patterns, for the shortest-ending search
(closing.py): a pattern such as `1.1` or `^v[0-9]+$` admits no closing quote until some text
matches it, and the search's token-by-token preferences never write that text by chance.

`shortest_match` builds a short string from a regular expression's parse tree (literals
as written, the first character a class allows, the fewest repetitions, the shortest
branch, no text for anchors); it is a candidate only: the matcher decides. `pattern_examples`
collects them for every `"pattern"` in a grammar's Lark text (where llguidance's JSON
schemas carry them), JSON-escaped as they appear inside a string.
"""

from __future__ import annotations

import json
import re
from typing import Any

try:  # Python 3.11+: the parser behind `re`
    import re._parser as sre  # type: ignore[import-not-found]
    from re import _constants as sc  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover
    import sre_constants as sc  # type: ignore[no-redef]
    import sre_parse as sre  # type: ignore[no-redef]

__all__ = ["pattern_examples", "shortest_match"]

MAX_PATTERNS = 64
MAX_EXAMPLE = 64  # characters: a longer one is no short ending
MAX_PATTERN = 2000
# A JSON string literal after "pattern": its alternatives cannot overlap, so matching is linear.
_PATTERN = re.compile(r'"pattern"\s*:\s*("(?:[^"\\]|\\.)*")')
# Characters tried, in order, where a class or a negation needs one.
_CANDIDATES = "a0A_-. b1zZ9x"


def pattern_examples(lark: str) -> tuple[bytes, ...]:
    """For each distinct pattern in `lark` (at most MAX_PATTERNS), a short matching string as
    JSON-escaped bytes, shortest first; patterns that give none are left out."""
    found: set[bytes] = set()
    for i, m in enumerate(_PATTERN.finditer(lark)):
        if i >= MAX_PATTERNS:
            break
        try:
            pattern = json.loads(m.group(1))
        except ValueError:
            continue
        text = shortest_match(pattern) if isinstance(pattern, str) else None
        if text is not None:
            found.add(json.dumps(text)[1:-1].encode())
    return tuple(sorted(found, key=lambda b: (len(b), b)))


def shortest_match(pattern: str) -> str | None:
    """A short string `pattern` should match (searched, as JSON Schema does), or None when
    the pattern cannot be read or the string would be long. Lookarounds are skipped, so the
    string may not match: it is a candidate for the grammar's matcher to judge."""
    if len(pattern) > MAX_PATTERN:
        return None
    try:
        tree = sre.parse(pattern)
        text = _build(list(tree), {})
    except (re.error, ValueError, RecursionError, OverflowError, TypeError):
        return None
    # Not checked with `re` here (a hostile pattern could make it backtrack for ever): the
    # grammar's matcher takes or refuses the text.
    return None if text is None or len(text) > MAX_EXAMPLE else text


def _build(items: list[Any], groups: dict[int, str]) -> str | None:
    out = []
    for op, av in items:
        part = _one(op, av, groups)
        if part is None:
            return None
        out.append(part)
        if sum(map(len, out)) > MAX_EXAMPLE:
            return None
    return "".join(out)


def _one(op: Any, av: Any, groups: dict[int, str]) -> str | None:
    if op is sc.LITERAL:
        return chr(av)
    if op is sc.NOT_LITERAL:
        return next(c for c in _CANDIDATES if ord(c) != av)
    if op is sc.ANY:
        return "a"
    if op is sc.IN:
        return _in(av)
    if op in (sc.MAX_REPEAT, sc.MIN_REPEAT, getattr(sc, "POSSESSIVE_REPEAT", None)):
        low, _high, sub = av
        if low > MAX_EXAMPLE:
            return None
        one = _build(list(sub), groups)
        return None if one is None else one * low
    if op is sc.SUBPATTERN:
        group, _add, _del, sub = av
        text = _build(list(sub), groups)
        if text is not None and group is not None:
            groups[group] = text
        return text
    if op is sc.BRANCH:
        options = [_build(list(alt), dict(groups)) for alt in av[1]]
        known = [o for o in options if o is not None]
        return min(known, key=len) if known else None
    if op is sc.GROUPREF:
        return groups.get(av)
    if op in (sc.AT, sc.ASSERT, sc.ASSERT_NOT):
        return ""
    if op is sc.CATEGORY:
        return _category(av)
    return None


def _category(cat: Any) -> str | None:
    name = str(cat).upper()
    for key, char in (
        ("NOT_DIGIT", "a"),
        ("NOT_WORD", "-"),
        ("NOT_SPACE", "a"),
        ("DIGIT", "0"),
        ("WORD", "a"),
        ("SPACE", " "),
    ):
        if key in name:
            return char
    return None


def _in(items: list[Any]) -> str | None:
    negate = bool(items) and items[0][0] is sc.NEGATE
    allowed = [c for c in _CANDIDATES if _class_has(items[1:] if negate else items, c) != negate]
    if allowed:
        return allowed[0]
    if negate:
        return None
    for op, av in items:  # a class of characters outside the candidates: its first one
        if op is sc.LITERAL:
            return chr(av)
        if op is sc.RANGE:
            return chr(av[0])
    return None


def _class_has(items: list[Any], c: str) -> bool:
    o = ord(c)
    for op, av in items:
        if op is sc.LITERAL and av == o:
            return True
        if op is sc.RANGE and av[0] <= o <= av[1]:
            return True
        if op is sc.CATEGORY:
            name = str(av).upper()
            if "DIGIT" in name and (c.isdigit() != ("NOT_" in name)):
                return True
            if "WORD" in name and ((c.isalnum() or c == "_") != ("NOT_" in name)):
                return True
            if "SPACE" in name and (c.isspace() != ("NOT_" in name)):
                return True
    return False
