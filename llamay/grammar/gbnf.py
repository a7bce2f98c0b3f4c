"""llama.cpp GBNF -> llguidance Lark, keeping GBNF's exact (character-level) semantics.

GBNF is a context-free grammar over Unicode code points. llguidance's Lark dialect runs
an Earley parser over *lexemes* matched greedily, so turning a GBNF rule into a
multi-character lexeme changes the language: `root ::= num num`, `num ::= [0-9]+` accepts
"12" in GBNF but not once `num` is a greedy lexeme, and `("a" | "ab") "b"` loses "ab".
(llguidance's own gbnf_to_lark makes exactly that trade.) Here every lexeme is a single
code point (a literal character, a character class, or `.`), which no other lexeme can
extend, so the Earley parser sees GBNF's grammar unchanged.

Syntax follows llama.cpp's parser (src/llama-grammar.cpp): `name ::= alternatives`,
`#` comments, newlines end a rule except inside parentheses or after `|`, escapes
\\x.. \\u.... \\U........ \\t \\r \\n \\\\ \\" \\[ \\] \\-, repetition `* + ? {m} {m,} {m,n}`,
and tokens `<[id]>`, `!<[id]>`, `<name>` (`!<name>` needs the vocabulary to resolve and
is refused). Left recursion, which llama.cpp rejects, is accepted: Earley handles it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..errors import GrammarError

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


def gbnf_to_lark(src: str) -> GbnfResult:
    """Translate GBNF with root rule `root`; raise GrammarError on any syntax error."""
    return _Parser(src).parse()


def _literal(ch: str) -> str:
    # JSON string syntax is a subset llguidance's Lark accepts for literals.
    return json.dumps(ch, ensure_ascii=False)


def _class_char(cp: int) -> str:
    ch = chr(cp)
    return ch if ch.isascii() and ch.isalnum() else f"\\x{{{cp:X}}}"


class _Parser:
    def __init__(self, src: str) -> None:
        self.s = src
        self.i = 0
        self.bodies: dict[str, str] = {}  # GBNF rule name -> Lark body
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

    def parse(self) -> GbnfResult:
        self.space(True)
        while self.i < len(self.s):
            self.rule()
        for ref, offset in self.referenced.items():
            if ref not in self.bodies:
                self.i = offset
                raise self.error(f"undefined rule '{ref}'")
        if "root" not in self.bodies:
            raise GrammarError("invalid GBNF grammar: no 'root' rule", param=PARAM)
        names = _lark_names(self.bodies)
        lines = ["start: " + names["root"]]
        for gbnf_name, body in self.bodies.items():
            lines.append(f"{names[gbnf_name]}: " + re.sub(r"\x00([^\x00]+)\x00", lambda m: names[m[1]], body))
        return GbnfResult("\n".join(lines) + "\n", self.uses_tokens)

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

    def alternates(self, nested: bool) -> str:
        seqs = [self.sequence(nested)]
        while self.peek() == "|":
            self.i += 1
            self.space(True)
            seqs.append(self.sequence(nested))
        return " | ".join(seqs)

    def sequence(self, nested: bool) -> str:
        items: list[str] = []
        while c := self.peek():
            if c == '"':
                self.i += 1
                chars = []
                while self.peek() != '"':
                    chars.append(_literal(chr(self.char())))
                self.i += 1
                items.append("(" + " ".join(chars) + ")" if len(chars) != 1 else chars[0])
            elif c == "[":
                items.append(self.char_class())
            elif c in "<!":
                items.append(self.token())
            elif _NAME.match(c):
                offset = self.i
                ref = self.name()
                self.referenced.setdefault(ref, offset)
                items.append(f"\x00{ref}\x00")  # resolved to a Lark name at the end
            elif c == "(":
                self.i += 1
                self.space(True)
                inner = self.alternates(nested=True)
                if self.peek() != ")":
                    raise self.error("expected ')'")
                self.i += 1
                items.append(f"({inner})")
            elif c == ".":
                self.i += 1
                items.append("/(?s:.)/")
            elif c in "*+?{":
                if not items:
                    raise self.error(f"'{c}' without a preceding item")
                items[-1] = f"({items[-1]}{self.repetition(nested)})"
                continue  # repetition() already skipped trailing space
            else:
                break
            self.space(nested)
        return " ".join(items) if items else "()"

    def repetition(self, nested: bool) -> str:
        c = self.peek()
        self.i += 1
        self.space(nested)
        if c != "{":
            return c
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
        return f"{{{lo},{'' if hi is None else hi}}}"

    def char_class(self) -> str:
        self.i += 1
        negated = self.peek() == "^"
        if negated:
            self.i += 1
        parts = []
        while self.peek() != "]":
            lo = self.char()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi = self.char()
                if hi < lo:
                    raise self.error("character range is reversed")
                parts.append(f"{_class_char(lo)}-{_class_char(hi)}")
            else:
                parts.append(_class_char(lo))
        self.i += 1
        if not parts:
            raise self.error("empty character class")
        return f"/[{'^' if negated else ''}{''.join(parts)}]/"

    def token(self) -> str:
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
            return f"<[{'^' if negated else ''}{int(m[1])}]>"
        if negated:
            raise self.error("a negated token must be given by id, as !<[id]>")
        if not inner or any(ch in inner for ch in "<\n"):
            raise self.error("invalid token name")
        self.i = end + 1
        return f"<{inner}>"


def _lark_names(bodies: dict[str, str]) -> dict[str, str]:
    """Distinct lowercase Lark rule names (uppercase would make a rule a lexeme)."""
    names: dict[str, str] = {}
    taken = {"start"}
    for gbnf_name in bodies:
        base = "r_" + re.sub(r"[^a-z0-9_]", "_", gbnf_name.lower())
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        names[gbnf_name] = name
    return names
