"""llama.cpp GBNF -> llguidance Lark, keeping GBNF's exact (character-level) semantics.

GBNF is a context-free grammar over Unicode code points. llguidance's Lark dialect runs
an Earley parser over *lexemes* matched greedily, so turning a GBNF rule into a
multi-character lexeme changes the language: `root ::= num num`, `num ::= [0-9]+` accepts
"12" in GBNF but not once `num` is a greedy lexeme, and `("a" | "ab") "b"` loses "ab".
(llguidance's own gbnf_to_lark makes exactly that trade.) Here every lexeme is a single
code point (a literal character, a character class, or `.`), which no other lexeme can
extend, so the Earley parser sees GBNF's grammar unchanged. The one exception, for speed
(a string body as one lexeme makes masks ~50x cheaper), is a repetition of one class that
.gbnf_lexemes proves never has to stop before its maximal run.

Syntax follows llama.cpp's parser (src/llama-grammar.cpp): `name ::= alternatives`,
`#` comments, newlines end a rule except inside parentheses or after `|`, escapes
\\x.. \\u.... \\U........ \\t \\r \\n \\\\ \\" \\[ \\] \\-, repetition `* + ? {m} {m,} {m,n}`,
and tokens `<[id]>`, `!<[id]>`, `<name>` (`!<name>` needs the vocabulary to resolve and
is refused). Left recursion, which llama.cpp rejects, is accepted: Earley handles it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import GrammarError
from .gbnf_ast import Alt, Node, Ref, Rep, Seq, Tok, any_char, char_class, literal_char, to_lark
from .gbnf_lexemes import promote_runs

__all__ = ["GbnfResult", "gbnf_to_lark", "PARAM"]

PARAM = "grammar"
MAX_REPETITION = 2000  # llama.cpp's bound on a repetition count
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_HEX_LEN = {"x": 2, "u": 4, "U": 8}
_NAME = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True)
class GbnfResult:
    """The Lark source, and whether the grammar references tokens (then it only means
    something against a model vocabulary, not over plain bytes)."""

    lark: str
    uses_tokens: bool


def gbnf_to_lark(src: str, *, optimize: bool = True) -> GbnfResult:
    """Translate GBNF with root rule `root`; raise GrammarError on any syntax error.

    With `optimize`, repetitions of a character class that provably never need to stop
    early (see .gbnf_lexemes) become single lexemes: same language, far cheaper masks.
    """
    parser = _Parser(src)
    rules = parser.parse()
    if optimize:
        rules = promote_runs(rules)
    return GbnfResult(to_lark(rules), parser.uses_tokens)


class _Parser:
    def __init__(self, src: str) -> None:
        self.s = src
        self.i = 0
        self.bodies: dict[str, Node] = {}
        self.referenced: dict[str, int] = {}  # GBNF rule name -> first reference offset
        self.uses_tokens = False

    # -- low-level ---------------------------------------------------------------------

    def error(self, message: str) -> GrammarError:
        line = self.s.count("\n", 0, self.i) + 1
        near = self.s[self.i : self.i + 20]
        return GrammarError(f"invalid GBNF grammar: {message} at line {line} near {near!r}", param=PARAM)

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def space(self, newline_ok: bool) -> None:
        while (c := self.peek()) and (c in " \t#" or (newline_ok and c in "\r\n")):
            if c == "#":
                while self.peek() and self.peek() not in "\r\n":
                    self.i += 1
            else:
                self.i += 1

    def name(self) -> str:
        m = _NAME.match(self.s, self.i)
        if not m:
            raise self.error("expected a rule name")
        self.i = m.end()
        return m.group()

    def integer(self) -> int:
        m = re.compile(r"[0-9]+").match(self.s, self.i)
        if not m:
            raise self.error("expected an integer")
        self.i = m.end()
        return int(m.group())

    def char(self) -> int:
        """One (possibly escaped) character of a literal or class, as a code point."""
        c = self.peek()
        if not c:
            raise self.error("unexpected end of grammar")
        if c != "\\":
            self.i += 1
            return ord(c)
        e = self.peek(1)
        if e in _HEX_LEN:
            digits = self.s[self.i + 2 : self.i + 2 + _HEX_LEN[e]]
            if len(digits) != _HEX_LEN[e] or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"expected {_HEX_LEN[e]} hex digits")
            self.i += 2 + _HEX_LEN[e]
            cp = int(digits, 16)
            if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                raise self.error(f"U+{cp:X} is not a Unicode scalar value")
            return cp
        if e in _ESCAPES:
            self.i += 2
            return ord(_ESCAPES[e])
        raise self.error("unknown escape")

    # -- grammar -----------------------------------------------------------------------

    def parse(self) -> dict[str, Node]:
        self.space(True)
        while self.i < len(self.s):
            self.rule()
        for ref, offset in self.referenced.items():
            if ref not in self.bodies:
                self.i = offset
                raise self.error(f"undefined rule '{ref}'")
        if "root" not in self.bodies:
            raise GrammarError("invalid GBNF grammar: no 'root' rule", param=PARAM)
        return self.bodies

    def rule(self) -> None:
        start = self.i
        name = self.name()
        self.space(False)
        if not self.s.startswith("::=", self.i):
            raise self.error("expected '::='")
        self.i += 3
        self.space(True)
        body = self.alternates(nested=False)
        if self.peek() == "\r":
            self.i += 2 if self.peek(1) == "\n" else 1
        elif self.peek() == "\n":
            self.i += 1
        elif self.peek():
            raise self.error("expected a newline or the end of the grammar")
        if name in self.bodies:
            self.i = start
            raise self.error(f"rule '{name}' is defined twice")
        self.bodies[name] = body
        self.space(True)

    def alternates(self, nested: bool) -> Node:
        seqs = [self.sequence(nested)]
        while self.peek() == "|":
            self.i += 1
            self.space(True)
            seqs.append(self.sequence(nested))
        return seqs[0] if len(seqs) == 1 else Alt(seqs)

    def sequence(self, nested: bool) -> Node:
        items: list[Node] = []
        while c := self.peek():
            if c == '"':
                self.i += 1
                chars: list[Node] = []
                while self.peek() != '"':
                    chars.append(literal_char(self.char()))
                self.i += 1
                items.append(chars[0] if len(chars) == 1 else Seq(chars))
            elif c == "[":
                items.append(self.char_class())
            elif c in "<!":
                items.append(self.token())
            elif _NAME.match(c):
                offset = self.i
                ref = self.name()
                self.referenced.setdefault(ref, offset)
                items.append(Ref(ref))
            elif c == "(":
                self.i += 1
                self.space(True)
                inner = self.alternates(nested=True)
                if self.peek() != ")":
                    raise self.error("expected ')'")
                self.i += 1
                items.append(inner)
            elif c == ".":
                self.i += 1
                items.append(any_char())
            elif c in "*+?{":
                if not items:
                    raise self.error(f"'{c}' without a preceding item")
                lo, hi = self.repetition(nested)
                items[-1] = Rep(items[-1], lo, hi)
                continue  # repetition() already skipped trailing space
            else:
                break
            self.space(nested)
        return items[0] if len(items) == 1 else Seq(items)

    def repetition(self, nested: bool) -> tuple[int, int | None]:
        c = self.peek()
        self.i += 1
        self.space(nested)
        if c != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        lo = self.integer()
        self.space(nested)
        hi: int | None = lo
        if self.peek() == ",":
            self.i += 1
            self.space(nested)
            hi = self.integer() if self.peek().isdigit() else None
            self.space(nested)
        if self.peek() != "}":
            raise self.error("expected '}'")
        self.i += 1
        self.space(nested)
        if lo > MAX_REPETITION or (hi is not None and hi > MAX_REPETITION):
            raise self.error(f"repetition counts above {MAX_REPETITION} are not supported")
        if hi is not None and hi < lo:
            raise self.error("repetition maximum below its minimum")
        return lo, hi

    def char_class(self) -> Node:
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        ranges = []
        while self.peek() != "]":
            lo = hi = self.char()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi = self.char()
                if hi < lo:
                    raise self.error("character range is reversed")
            ranges.append((lo, hi))
        self.i += 1
        if not ranges:
            raise self.error("empty character class")
        return char_class(ranges, negated)

    def token(self) -> Node:
        self.uses_tokens = True
        negated = self.peek() == "!"
        if negated:
            self.i += 1
        if self.peek() != "<":
            raise self.error("expected '<' after '!'")
        end = self.s.find(">", self.i)
        if end < 0:
            raise self.error("unterminated token")
        inner = self.s[self.i + 1 : end]
        m = re.fullmatch(r"\[([0-9]+)\]", inner)
        if m:
            self.i = end + 1
            return Tok(f"<[{'^' if negated else ''}{int(m[1])}]>")
        if negated:
            raise self.error("a negated token must be given by id, as !<[id]>")
        if not inner or any(ch in inner for ch in "<\n"):
            raise self.error("invalid token name")
        self.i = end + 1
        return Tok(f"<{inner}>")
