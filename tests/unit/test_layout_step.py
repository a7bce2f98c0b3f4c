"""The engine step keeps constrained JSON in the canonical indented layout (layout.py)
whatever the model ranks first, over llguidance's byte tokenizer."""

from __future__ import annotations

import json

import llguidance
import pytest

from llamay.engine import sampling_step
from llamay.engine.request import ConstraintPlan
from llamay.engine.sampling_step import sample_step
from llamay.grammar import CompileCache, Constraint, Grammar
from llamay.types import StopSpec
from tests.unit.test_sampling_outcome import MODEL, favour, make

TWO = {
    "type": "object",
    "properties": {"a": {"type": "string"}, "b": {"type": "array", "items": {"type": "integer"}}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def written(prefix: str, *prefer: str, steps: int = 1) -> str:
    """The text after `prefix` (taken as the model's top choice byte by byte) when the model
    then ranks `prefer` first at each of `steps` steps."""
    s, _ = make(StopSpec(max_tokens=4096), ConstraintPlan(Grammar.from_json_schema(TWO, layout="indented")))
    for ch in prefix:
        out = sample_step(s, favour(ch), MODEL, n_ctx=8192)
        assert out.token is not None and out.token.text == ch, (prefix, ch)
    text = ""
    for _ in range(steps):
        out = sample_step(s, favour(*prefer), MODEL, n_ctx=8192)
        assert out.token is not None
        text += out.token.text
    return text


def test_whitespace_after_a_value_is_refused_where_the_object_cannot_close() -> None:
    # "a" is written, "b" is still required: a newline could only lead to the closing brace.
    assert written('{\n  "a": "x"', "\n", ",") == ","


def test_whitespace_after_the_last_value_starts_the_closer() -> None:
    assert written('{\n  "a": "x",\n  "b": [\n    1', "\n", ",", steps=2) == "\n "


def test_a_gap_the_model_writes_its_own_way_is_written_in_the_layout() -> None:
    # A space after the comma: the layout's newline and indent, forced over the next steps
    # whatever the model ranks first there.
    assert written('{\n  "a": "x",', " ", "x", steps=3) == "\n  "
    assert written('{\n  "a": "x"', " ", ",", steps=2) == ",\n"


def test_when_retries_run_out_every_allowed_token_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampling_step, "LAYOUT_TRIES", 0)
    assert written('{\n  "a": "x",\n  "b": [', " ", "\t", "]", "\n") == "]"
    assert written('{\n  "a": "x",\n  "b": [', " ", "\t", "\n", "]") == "\n"


def test_a_whole_answer_from_a_model_that_likes_spaces_is_json_dumps_indent_2() -> None:
    s, _ = make(StopSpec(max_tokens=400), ConstraintPlan(Grammar.from_json_schema(TWO, layout="indented")))
    prefer = [" ", "\t", "\n", "\r", *'{"a:x,b[1]}']
    text = ""
    while True:
        out = sample_step(s, favour(*prefer), MODEL, n_ctx=8192)
        if out.token is not None:
            text += out.token.text
        if out.finish is not None:
            break
    assert text == json.dumps(json.loads(text), indent=2)


class _JoinedVocab:
    """Bytes, and tokens that join a quote or comma to what a person would space apart."""

    WORDS = [b'"]', b", ", b' "', b"\n"]

    def __init__(self) -> None:
        self.tokens = [bytes([b]) for b in range(256)] + self.WORDS + [b"</s>"]
        self.eos_token_id = len(self.tokens) - 1
        self.bos_token_id = None
        self.special_token_ids = [self.eos_token_id]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


JOINED = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_JoinedVocab()))
WORD = {w: 256 + i for i, w in enumerate(_JoinedVocab.WORDS)}
LIST = {
    "type": "object",
    "properties": {"xs": {"type": "array", "items": {"type": "string"}}},
    "required": ["xs"],
}


def constraint_after(prefix: str) -> Constraint:
    c = Constraint(Grammar.from_json_schema(LIST, layout="indented"), CompileCache(JOINED))
    for b in prefix.encode():
        assert c.consume(b), prefix
    return c


def test_a_joined_token_is_respaced_into_tokens_the_grammar_takes() -> None:
    c = constraint_after('{\n  "xs": [\n    "a')
    assert not c.keeps_layout(WORD[b'"]'])
    assert JOINED.decode_bytes(c.respaced(WORD[b'"]']) or []) == b'"\n  ]'
    c = constraint_after('{\n  "xs": [\n    "a"')
    assert JOINED.decode_bytes(c.respaced(WORD[b", "]) or []) == b",\n    "
    assert c.respaced(ord(",")) is None  # already in the layout
    # what the grammar refuses is not offered: the object cannot close inside the list
    assert c.respaced(ord("}")) is None
