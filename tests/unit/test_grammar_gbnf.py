"""GBNF (llama.cpp dialect) grammars: the shared conformance cases and the translation's
edge cases. Token-level cases run through a Constraint over a small test vocabulary."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import llguidance
import pytest

from llamay.errors import GrammarError
from llamay.grammar import (
    CompileCache,
    Constraint,
    Grammar,
    allocate_mask,
    byte_compile_cache,
    byte_tokenizer,
)
from llamay.grammar.gbnf import gbnf_to_lark

CASES_FILE = Path("/work/shared/conformance/gbnf_cases.json")
CASES: list[dict[str, Any]] = json.loads(CASES_FILE.read_text()) if CASES_FILE.is_file() else []


class _SpecialVocab:
    """Ids 0..31 are special tokens `<[i]>`; 32..255 the bytes 32..255; 256..287 the
    bytes 0..31; 288 is EOS. Just enough vocabulary for `<[id]>` grammars."""

    def __init__(self) -> None:
        self.tokens = [b"<[%d]>" % i for i in range(32)]
        self.tokens += [bytes([b]) for b in range(32, 256)] + [bytes([b]) for b in range(32)] + [b"</s>"]
        self.eos_token_id = len(self.tokens) - 1
        self.bos_token_id = None
        self.special_token_ids = [*range(32), self.eos_token_id]

    def __call__(self, text: bytes) -> list[int]:
        return [byte_id(b) for b in text]


def byte_id(b: int) -> int:
    return b if b >= 32 else 256 + b


BYTES = byte_tokenizer()
TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_SpecialVocab()))
TOKENIZER_CACHE = CompileCache(TOKENIZER)


def to_tokens(text: str) -> list[int]:
    """'<[10]>hi' -> [10, ord('h'), ord('i')]."""
    out: list[int] = []
    for i, part in enumerate(re.split(r"<\[(\d+)\]>", text)):
        out += [int(part)] if i % 2 else [byte_id(b) for b in part.encode()]
    return out


def token_match(grammar: Grammar, text: str) -> bool:
    constraint = Constraint(grammar, TOKENIZER_CACHE)
    return all(constraint.consume(t) for t in to_tokens(text)) and constraint.is_accepting()


@pytest.mark.skipif(not CASES, reason="conformance data not present")
@pytest.mark.parametrize("case", CASES, ids=[c["description"] for c in CASES])
def test_conformance_case(case: dict[str, Any]) -> None:
    grammar = Grammar.from_gbnf(case["grammar"])
    assert grammar.uses_tokens == case["uses_special_tokens"]
    if grammar.uses_tokens:
        match = lambda s: token_match(grammar, s)  # noqa: E731
    else:
        match = lambda s: grammar.matches(s.encode())  # noqa: E731
    assert [s for s in case["passing"] if not match(s)] == []
    assert [s for s in case["failing"] if match(s)] == []


def test_all_fourteen_cases_present() -> None:
    if not CASES:
        pytest.skip("conformance data not present")
    assert len(CASES) == 14


@pytest.mark.parametrize(
    ("src", "yes", "no"),
    [
        # Adjacent repetitions: a greedy multi-character lexeme would lose "12".
        ("root ::= num num\nnum ::= [0-9]+", ["12", "123"], ["1", "1a2"]),
        ('root ::= ("a" | "ab") "b"', ["ab", "abb"], ["a", "abbb"]),
        ('root ::= [a-z]* "z"', ["z", "zz", "abz"], ["", "za"]),
        # Escapes, classes, any-char, comments, continuation lines.
        ('root ::= "\\x41\\u00e9\\n\\"\\\\" [\\]\\-]', ['Aé\n"\\]', 'Aé\n"\\-'], ["Aé"]),
        ("root ::= [^a-c] . # comment\n", ["db", "\n\n", "éé"], ["ab", "d"]),
        ('root ::= "a" |\n  "b" # alternatives continue after |\n', ["a", "b"], ["ab"]),
        ('root ::= (\n  "a"\n  "b"\n)+', ["ab", "abab"], ["a"]),
        ('root ::= "x"{2} "y"{1,} "z"{0,2}', ["xxy", "xxyyzz"], ["xy", "xxyzzz"]),
        ('root ::= "ab"*', ["", "abab"], ["aba"]),
        # Left recursion, which llama.cpp rejects, is fine for an Earley parser.
        ('root ::= root "a" | "b"', ["b", "baa"], ["a", "ab"]),
        ('root ::= r\nr ::= "" | "q"', ["", "q"], ["qq"]),
        ("root ::= Upper-Case\nUpper-Case ::= [A-Z]", ["Q"], ["q"]),
    ],
)
def test_semantics(src: str, yes: list[str], no: list[str]) -> None:
    grammar = Grammar.from_gbnf(src)
    assert [s for s in yes if not grammar.matches(s.encode())] == []
    assert [s for s in no if grammar.matches(s.encode())] == []


def test_prefixes() -> None:
    grammar = Grammar.from_gbnf('root ::= "{" [0-9]+ "}"')
    assert grammar.accepts_prefix(b"{1")
    assert not grammar.matches(b"{1")
    assert not grammar.accepts_prefix(b"}")


@pytest.mark.parametrize(
    ("src", "needle"),
    [
        ('rot ::= "a"', "no 'root' rule"),
        ("root ::= missing", "undefined rule 'missing'"),
        ('root ::= "\\q"', "unknown escape"),
        ('root ::= "a" "b" )', "expected a newline"),
        ('root ::= ("a"', "expected ')'"),
        ('root ::= "a"\nroot ::= "b"', "defined twice"),
        ("root ::= *", "without a preceding item"),
        ("root ::= []", "empty character class"),
        ("root ::= [z-a]", "reversed"),
        ('root ::= "a"{3,2}', "below its minimum"),
        ('root ::= "a"{5000}', "above 2000"),
        ("root ::= !<think>", "!<[id]>"),
        ('root ::= "\\uD800"', "not a Unicode scalar value"),
        ('root ::= "unterminated', "unexpected end"),
    ],
)
def test_errors(src: str, needle: str) -> None:
    with pytest.raises(GrammarError, match=re.escape(needle)) as info:
        Grammar.from_gbnf(src)
    assert info.value.param == "grammar"


def test_token_grammars_need_a_vocabulary() -> None:
    grammar = Grammar.from_gbnf("root ::= <[10]> [a-z]+ <[11]>")
    with pytest.raises(GrammarError, match="model tokens"):
        grammar.matches(b"x")
    assert token_match(grammar, "<[10]>abc<[11]>")
    assert not token_match(grammar, "<[10]>abc<[12]>")


JSON_GBNF = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"""


def test_llama_cpp_json_grammar() -> None:
    src = JSON_GBNF
    grammar = Grammar.from_gbnf(src)
    assert grammar.matches(b'{"a": [1, 2.5e3, "x\\n", {"b": null}], "c": true}')
    assert grammar.matches(b"{}")
    assert not grammar.matches(b'{"a": 01x}')
    assert not grammar.matches(b"[1]")


# Grammars that tempt an unsafe lexeme promotion, and whether the run may be promoted.
DIFFERENTIAL = [
    ('root ::= [a-z]+ "!"', True),
    ('root ::= "\\"" ([^"\\\\] | "\\\\" ["\\\\nt] | "\\\\u" [0-9a-f]{4})* "\\""', True),
    ('root ::= [a-z]* "a"', False),  # the follower shares the class
    ("root ::= x x\nx ::= [0-9]+", False),  # a run follows itself
    ('root ::= [a-z]+ "!" | "x" [a-z] "?"', False),  # co-expected literal in the class
    ('root ::= ([a-c] | "b" "x")*', False),  # another alternative starts inside the class
    ('root ::= "\\"" ([^"] | "\\"\\"")* "\\""', True),  # CSV quoting: '""' is not in [^"]
    ('root ::= ([a-z]+ " ")* [a-z]+', False),
    ("root ::= [ab]* [b] [ab]*", False),
    ('root ::= item ("," item)*\nitem ::= [^,]*', True),
    ('root ::= a | b\na ::= [0-9]+ "x"\nb ::= [0-9]+ "y"', False),
    ("root ::= [a-z]+ ([0-9]+ [a-z]+)*", True),
    ('root ::= "<" [^>]* ">" .*', True),
    ('root ::= (. | "ab")* "!"', False),
]


def _walk(grammar: Grammar, rng: random.Random, alphabet: bytes) -> bytes:
    """A random byte string: a prefix the grammar allows, then maybe one random byte."""
    constraint, mask = Constraint(grammar, byte_compile_cache()), allocate_mask(BYTES)
    out = bytearray()
    for _ in range(rng.randrange(1, 24)):
        constraint.fill_mask(mask)
        options = [b for b in alphabet if mask[b // 32] >> (b % 32) & 1]
        if not options or (constraint.is_accepting() and rng.random() < 0.2):
            break
        out.append(rng.choice(options))
        assert constraint.consume(out[-1])
    if rng.random() < 0.3:
        out.append(rng.choice(alphabet))
    return bytes(out)


@pytest.mark.parametrize(("src", "promoted"), DIFFERENTIAL)
def test_lexeme_promotion_keeps_the_language(src: str, promoted: bool) -> None:
    fast = Grammar.from_gbnf(src)
    exact = Grammar.from_lark(gbnf_to_lark(src, optimize=False).lark)
    assert ("{1,}/" in fast.lark) == promoted, fast.lark
    rng = random.Random(src)
    alphabet = b'abcxyz019!?",\\<>nut \xc3\xa9'
    for _ in range(100):
        text = _walk(exact, rng, alphabet)
        for cut in {len(text), rng.randrange(len(text) + 1)}:
            piece = text[:cut]
            assert fast.matches(piece) == exact.matches(piece), piece
            assert fast.accepts_prefix(piece) == exact.accepts_prefix(piece), piece


def test_json_gbnf_strings_are_single_lexemes() -> None:
    grammar = Grammar.from_gbnf(JSON_GBNF)
    assert "/[^\\x{0}-\\x{1F}\\x{22}\\x{5C}\\x{7F}]{1,}/" in grammar.lark
