"""Which GBNF character runs can safely become single (greedy) llguidance lexemes.

A GBNF grammar translated one code point per lexeme is exact but slow: computing a mask
steps the Earley parser for every byte of every vocabulary token. A repetition of one
character class (`[0-9]+`, the `[^"\\\\]` alternative inside a string's `(...)*`) is far
cheaper as one lexeme, but llguidance's lexer is greedy: it keeps extending a lexeme while
the next character fits. That loses parses exactly when, at some point of the run, a
character of the class could also be taken by something else. So a run of class C at
occurrence O is promoted only if, in the original grammar,

1. nothing that may follow the run (its FOLLOW set, context-insensitive, hence an
   over-approximation) can start with a character of C, and
2. no other terminal that may be expected at the same input position as O (the
   co-expectation relation below) can match a character of C.

Then every parse consumes the maximal run, which is what the greedy lexer does, and the
language is unchanged. Co-expectation is over-approximated soundly: terminals first in
the grammar are co-expected; if T1 and T2 are co-expected and can match the same
character, everything in FOLLOW(T1) and FOLLOW(T2) is co-expected afterwards.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

from .gbnf_ast import Alt, Chars, Node, Ref, Rep, Seq, Tok, children

__all__ = ["promote_runs", "MAX_TERMINALS"]

MAX_TERMINALS = 1500  # beyond this the quadratic analysis is skipped (exact, just slower)
MAX_UNROLL = 64  # finite repetitions up to this count are unrolled
MAX_NODES = 20_000  # unrolling stops growing the tree past this size


def promote_runs(rules: dict[str, Node]) -> dict[str, Node]:
    """Mark safe runs (`Chars.run`) in `rules`, after inlining rules used only as the body
    of a repetition so their class alternatives become visible. Mutates and returns
    `rules`; the language is unchanged.

    The analysis runs on a shadow copy in which finite repetitions are unrolled (see
    `_unroll`); `origin` maps shadow nodes back. A run is promoted only if every shadow
    copy of it is safe."""
    _inline_repeated_rules(rules)
    origin: dict[int, Node] = {}
    shadow = {name: _clone(body, origin, lambda n: n) for name, body in rules.items()}
    budget = [MAX_NODES - sum(1 for _ in _walk_all(shadow))]
    for name in shadow:
        shadow[name] = _unroll(shadow[name], budget, origin)
    analysis = _Analysis(shadow)
    if len(analysis.terms) > MAX_TERMINALS:
        return rules
    verdicts: dict[int, tuple[Chars, int, bool]] = {}  # id(original chars) -> (chars, lo, safe)

    def judge(chars: Node, rep: Rep, lo: int) -> None:
        original = origin.get(id(chars))
        if isinstance(chars, Chars) and isinstance(original, Chars):
            safe = analysis.safe_run(chars, rep)
            previous = verdicts.get(id(original), (original, lo, True))[2]
            verdicts[id(original)] = (original, lo, previous and safe)

    for node in _walk_all(shadow):
        original_rep = origin.get(id(node))
        # Only unbounded repetitions: bounded ones were unrolled (or are too big).
        if isinstance(node, Rep) and isinstance(original_rep, Rep) and original_rep.hi is None:
            if isinstance(node.item, Chars):
                judge(node.item, node, node.lo)
            elif isinstance(node.item, Alt):
                for option in node.item.options:
                    judge(option, node, 1)
    for chars, lo, safe in verdicts.values():
        if safe:
            chars.run = (lo, None)
    return rules


def _clone(node: Node, origin: dict[int, Node], source: Callable[[Node], Node | None]) -> Node:
    """Deep copy, recording origin[id(copy)] = source(original) for every node."""
    new: Node
    if isinstance(node, Chars):
        new = Chars(node.ranges, node.regex, node.literal)
    elif isinstance(node, Tok):
        new = Tok(node.lark)
    elif isinstance(node, Ref):
        new = Ref(node.name)
    elif isinstance(node, Seq):
        new = Seq([_clone(i, origin, source) for i in node.items])
    elif isinstance(node, Alt):
        new = Alt([_clone(o, origin, source) for o in node.options])
    else:
        new = Rep(_clone(node.item, origin, source), node.lo, node.hi)
    mapped = source(node)
    if mapped is not None:
        origin[id(new)] = mapped
    return new


def _walk_all(rules: dict[str, Node]) -> Iterator[Node]:
    stack = list(rules.values())
    while stack:
        node = stack.pop()
        yield node
        stack.extend(children(node))


def _inline_repeated_rules(rules: dict[str, Node]) -> None:
    # `string ::= "\"" char* "\""` with `char ::= [^"\\] | escape`: copy char's body into
    # the repetition (one level; a copy is the same language).
    for node in list(_walk_all(rules)):
        if isinstance(node, Rep) and isinstance(node.item, Ref):
            body = rules[node.item.name]
            if isinstance(body, Chars) or (
                isinstance(body, Alt) and any(isinstance(o, Chars) for o in body.options)
            ):
                node.item = copy.deepcopy(body)


def _unroll(node: Node, budget: list[int], origin: dict[int, Node]) -> Node:
    """Rewrite `X{lo,hi}` (finite hi) as lo copies of X then nested optional copies, as
    llama.cpp does. Same language, but each copy is its own occurrence, so FOLLOW no
    longer mixes "another X" with "what comes after": `"u" [0-9a-f]{4}` inside a string
    would otherwise make the hex class look co-expected with the string's characters.
    (Only in the analysis shadow: nesting this deep is too much for the Lark parser.)"""
    if isinstance(node, Seq):
        node.items = [_unroll(i, budget, origin) for i in node.items]
    elif isinstance(node, Alt):
        node.options = [_unroll(o, budget, origin) for o in node.options]
    elif isinstance(node, Rep):
        node.item = _unroll(node.item, budget, origin)
        size = sum(1 for _ in _walk_all({"": node.item}))
        if node.hi is not None and node.hi <= MAX_UNROLL and size * node.hi <= budget[0]:
            budget[0] -= size * node.hi
            copies = [_clone(node.item, origin, lambda n: origin.get(id(n))) for _ in range(node.hi)]
            tail: Node | None = None
            for extra in reversed(copies[node.lo :]):
                tail = Rep(extra if tail is None else Seq([extra, tail]), 0, 1)
            items = copies[: node.lo] + ([tail] if tail is not None else [])
            return items[0] if len(items) == 1 else Seq(items)
    return node


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _overlap(a: Chars | Tok, b: Chars | Tok) -> bool:
    if isinstance(a, Tok) or isinstance(b, Tok):
        return isinstance(a, Tok) and isinstance(b, Tok)  # tokens: assume any may clash
    i = j = 0
    while i < len(a.ranges) and j < len(b.ranges):
        (alo, ahi), (blo, bhi) = a.ranges[i], b.ranges[j]
        if alo <= bhi and blo <= ahi:
            return True
        if ahi < bhi:
            i += 1
        else:
            j += 1
    return False


class _Analysis:
    """nullable / FIRST / FOLLOW / co-expectation over terminal occurrences (bitmasks)."""

    def __init__(self, rules: dict[str, Node]) -> None:
        self.rules = rules
        self.terms: list[Chars | Tok] = [n for n in _walk_all(rules) if isinstance(n, Chars | Tok)]
        self.index = {id(t): i for i, t in enumerate(self.terms)}
        if len(self.terms) > MAX_TERMINALS:
            return
        self.rule_nullable = dict.fromkeys(rules, False)
        self.rule_first = dict.fromkeys(rules, 0)
        changed = True
        while changed:
            changed = False
            for name, body in rules.items():
                nullable, first = self.nullable(body), self.first(body)
                if (nullable, first) != (self.rule_nullable[name], self.rule_first[name]):
                    self.rule_nullable[name], self.rule_first[name] = nullable, first
                    changed = True
        # Rule-level values are final now: node-level ones can be memoised.
        self._memo: dict[int, tuple[bool, int]] = {}
        for node in _walk_all(rules):
            self._memo[id(node)] = (self.nullable(node), self.first(node))
        self.follow: dict[int, int] = {}
        self._compute_follow()
        self.term_follow = [self.follow.get(id(t), 0) for t in self.terms]
        # Unrolled copies repeat the same few classes: compare each distinct pair once.
        kinds: dict[object, int] = {}  # class key -> mask of occurrences with that class
        for i, t in enumerate(self.terms):
            key = "tok" if isinstance(t, Tok) else t.ranges
            kinds[key] = kinds.get(key, 0) | 1 << i
        samples = {key: self.terms[next(_bits(mask))] for key, mask in kinds.items()}
        by_kind = {
            key: sum(mask for other, mask in kinds.items() if _overlap(samples[key], samples[other]))
            for key in kinds
        }
        self.overlaps = [by_kind["tok" if isinstance(t, Tok) else t.ranges] for t in self.terms]
        self.co = self._co_expected(self.rule_first["root"])

    def nullable(self, node: Node) -> bool:
        memo = getattr(self, "_memo", {}).get(id(node))
        if memo is not None:
            return memo[0]
        if isinstance(node, Chars | Tok):
            return False
        if isinstance(node, Ref):
            return self.rule_nullable[node.name]
        if isinstance(node, Seq):
            return all(self.nullable(i) for i in node.items)
        if isinstance(node, Alt):
            return any(self.nullable(o) for o in node.options)
        return node.lo == 0 or node.hi == 0 or self.nullable(node.item)

    def first(self, node: Node) -> int:
        memo = getattr(self, "_memo", {}).get(id(node))
        if memo is not None:
            return memo[1]
        if isinstance(node, Chars | Tok):
            return 1 << self.index[id(node)]
        if isinstance(node, Ref):
            return self.rule_first[node.name]
        if isinstance(node, Seq):
            return self.first_of_seq(node.items)
        if isinstance(node, Alt):
            mask = 0
            for option in node.options:
                mask |= self.first(option)
            return mask
        return 0 if node.hi == 0 else self.first(node.item)

    def first_of_seq(self, items: list[Node]) -> int:
        mask = 0
        for item in items:
            mask |= self.first(item)
            if not self.nullable(item):
                break
        return mask

    def _compute_follow(self) -> None:
        follow = self.follow
        changed = True

        def add(node: Node, mask: int) -> None:
            nonlocal changed
            if mask & ~follow.get(id(node), 0):
                follow[id(node)] = follow.get(id(node), 0) | mask
                changed = True

        while changed:
            changed = False
            for node in _walk_all(self.rules):
                mine = follow.get(id(node), 0)
                if isinstance(node, Ref):
                    add(self.rules[node.name], mine)
                elif isinstance(node, Seq):
                    for i, item in enumerate(node.items):
                        rest = node.items[i + 1 :]
                        tail = mine if all(self.nullable(r) for r in rest) else 0
                        add(item, self.first_of_seq(rest) | tail)
                elif isinstance(node, Alt):
                    for option in node.options:
                        add(option, mine)
                elif isinstance(node, Rep):
                    again = self.first(node.item) if node.hi is None or node.hi >= 2 else 0
                    add(node.item, mine | again)

    def _co_expected(self, start: int) -> list[int]:
        co = [0] * len(self.terms)
        for i in _bits(start):
            co[i] |= start
        pending = set(_bits(start))
        done: set[tuple[int, int]] = set()
        while pending:
            t1 = pending.pop()
            for t2 in _bits(co[t1] & self.overlaps[t1]):
                if (t1, t2) in done:
                    continue
                done.add((t1, t2))
                f1, f2 = self.term_follow[t1], self.term_follow[t2]
                for a, other in ((f1, f2), (f2, f1)):
                    for t in _bits(a):
                        if other & ~co[t]:
                            co[t] |= other
                            pending.add(t)
        return co

    def safe_run(self, chars: Chars, rep: Rep) -> bool:
        """Conditions 1 and 2 of the module docstring for a run of `chars` in `rep`."""
        me = self.index[id(chars)]
        others = 0
        if isinstance(rep.item, Alt):
            others = self.first(rep.item) & ~(1 << me)  # the loop's other alternatives
        after = self.follow.get(id(rep), 0) | others
        clash = (after | (self.co[me] & ~(1 << me))) & self.overlaps[me]
        return clash == 0
