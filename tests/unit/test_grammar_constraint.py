"""Constraint: the per-request matcher the engine drives, over tokenizers built without
model weights (llguidance's byte tokenizer, and a small multi-byte vocabulary)."""

from __future__ import annotations

import json
import threading

import llguidance
import numpy as np
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

BYTES = byte_tokenizer()
BYTES_CACHE = byte_compile_cache()


class _WordVocab:
    """Bytes 0..255, a few multi-byte tokens, a special token and EOS, like a real BPE."""

    WORDS = [b'{"', b'":', b"name", b' "', b"bob", b'"}', b"true", b", ", b"<|tool|>"]

    def __init__(self) -> None:
        self.tokens = [bytes([b]) for b in range(256)] + self.WORDS + [b"</s>"]
        self.eos_token_id = len(self.tokens) - 1
        self.bos_token_id = None
        self.special_token_ids = [256 + self.WORDS.index(b"<|tool|>"), self.eos_token_id]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


WORDS = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_WordVocab()))
WORD_ID = {w: 256 + i for i, w in enumerate(_WordVocab.WORDS)}
WORDS_CACHE = CompileCache(WORDS)


def allowed(constraint: Constraint, tokenizer: llguidance.LLTokenizer) -> set[int]:
    mask = allocate_mask(tokenizer)
    constraint.fill_mask(mask)
    bits = np.unpackbits(mask.view(np.uint8), bitorder="little")[: tokenizer.vocab_size]
    return {int(i) for i in np.flatnonzero(bits)}


def test_mask_shape_and_eos() -> None:
    mask = allocate_mask(BYTES)
    assert mask.dtype == np.int32 and mask.shape == ((BYTES.vocab_size + 31) // 32,)
    c = Constraint(Grammar.from_regex("[0-9]{1,2}"), BYTES_CACHE)
    assert allowed(c, BYTES) == set(b"0123456789")
    assert c.consume(ord("4"))
    assert c.is_accepting() and not c.is_stopped()
    assert allowed(c, BYTES) == set(b"0123456789") | {BYTES.eos_token}
    assert c.consume(ord("2"))
    assert c.is_stopped() and allowed(c, BYTES) == {BYTES.eos_token}
    assert c.consume(BYTES.eos_token) and c.error is None


def test_rejected_token_is_an_error_not_a_crash() -> None:
    c = Constraint(Grammar.from_regex("a+"), BYTES_CACHE)
    assert not c.consume(ord("b"))
    assert c.error and "b" in c.error
    assert c.is_stopped() and not c.is_accepting()
    assert not c.consume(ord("a"))  # stays failed
    assert c.forced_tokens() == []
    assert allowed(c, BYTES) == {BYTES.eos_token}  # the engine can still finish cleanly


def test_out_of_vocab_token() -> None:
    c = Constraint(Grammar.from_regex("a+"), BYTES_CACHE)
    assert not c.consume(BYTES.vocab_size + 5)
    assert c.error is not None and "outside the vocabulary" in c.error


def test_wrong_mask_is_refused() -> None:
    c = Constraint(Grammar.from_regex("a"), BYTES_CACHE)
    with pytest.raises(ValueError):
        c.fill_mask(np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError):
        c.fill_mask(np.zeros(100, dtype=np.int32))


def test_multibyte_tokens_and_forced_tokens() -> None:
    grammar = Grammar.from_json_schema(
        {"type": "object", "properties": {"name": {"const": "bob"}}, "required": ["name"]}
    )
    c = Constraint(grammar, WORDS_CACHE)
    first = allowed(c, WORDS)
    assert WORD_ID[b'{"'] in first and ord("{") in first and WORD_ID[b"true"] not in first
    assert c.forced_tokens() == []  # '{' alone is not forced: the token '{"' may follow
    for t in [
        WORD_ID[b'{"'],
        WORD_ID[b"name"],
        WORD_ID[b'":'],
        WORD_ID[b' "'],
        WORD_ID[b"bob"],
        WORD_ID[b'"}'],
    ]:
        assert c.consume(t), c.error
    assert c.is_accepting() and c.is_stopped()
    assert allowed(c, WORDS) == {WORDS.eos_token}


def test_sampling_loop_produces_valid_json() -> None:
    """Random sampling under the mask always yields schema-valid JSON."""
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["ok", "n"],
        "additionalProperties": False,
    }
    grammar = Grammar.from_json_schema(schema)
    rng = np.random.default_rng(0)
    for _ in range(20):
        c = Constraint(grammar, WORDS_CACHE)
        out: list[int] = []
        while not c.is_stopped() and len(out) < 200:
            choices = sorted(allowed(c, WORDS))
            # Prefer structure over whitespace so the walk ends quickly.
            weights = np.array([0.05 if t in (9, 10, 13, 32) else 1.0 for t in choices])
            token = int(rng.choice(choices, p=weights / weights.sum()))
            assert c.consume(token), c.error
            out.append(token)
            if token == WORDS.eos_token:
                break
        text = WORDS.decode_bytes([t for t in out if t != WORDS.eos_token])
        value = json.loads(text)
        assert set(value) == {"ok", "n"} and isinstance(value["ok"], bool) and 0 <= value["n"] <= 9


def test_forced_tokens() -> None:
    c = Constraint(Grammar.from_regex("hello [0-9]"), BYTES_CACHE)
    forced = c.forced_tokens()
    assert BYTES.decode_bytes(forced) == b"hello "
    assert all(c.consume(t) for t in forced)
    assert c.forced_tokens() == []


def test_rollback() -> None:
    c = Constraint(Grammar.from_regex("ab"), BYTES_CACHE)
    assert c.consume(ord("a")) and c.consume(ord("b"))
    assert c.rollback(1)
    assert allowed(c, BYTES) == {ord("b")}


def test_compile_cache_is_shared_and_thread_safe() -> None:
    grammar = Grammar.from_json_schema({"type": "array", "items": {"type": "string", "pattern": "^x+$"}})
    results = []

    def work() -> None:
        results.append(WORDS_CACHE.get(grammar))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 8 and all(r is results[0] for r in results)
    assert WORDS_CACHE.get(Grammar.from_json_schema(grammar_schema := {"type": "array"})) is not results[0]
    assert grammar_schema == {"type": "array"}  # the caller's schema is not mutated
    # Same spec from a separately built Grammar: same cache entry.
    again = Grammar.from_json_schema({"type": "array", "items": {"type": "string", "pattern": "^x+$"}})
    assert WORDS_CACHE.get(again) is results[0]
    # Each tokenizer's owner holds its own cache.
    assert BYTES_CACHE.get(grammar) is not results[0]
    assert CompileCache(WORDS).get(grammar) is not results[0]


def test_compile_cache_drops_least_recently_used() -> None:
    cache = CompileCache(BYTES, size=2)
    a, b, c = (Grammar.from_regex(src) for src in ("a", "b", "c"))
    first, second = cache.get(a), cache.get(b)
    assert cache.get(a) is first and len(cache) == 2  # a is now the most recently used
    cache.get(c)  # drops b
    assert len(cache) == 2 and cache.get(a) is first
    assert cache.get(b) is not second and len(cache) == 2  # compiled again
    assert Constraint(a, cache).consume(ord("a"))


def test_constraints_are_independent() -> None:
    grammar = Grammar.from_regex("[ab]")
    one, two = Constraint(grammar, BYTES_CACHE), Constraint(grammar, BYTES_CACHE)
    assert one.consume(ord("a"))
    assert allowed(two, BYTES) == {ord("a"), ord("b")}


def test_special_tokens_in_lark() -> None:
    grammar = Grammar.from_lark('start: <|tool|> %json {"type": "integer"}')
    assert grammar.uses_tokens
    c = Constraint(grammar, WORDS_CACHE)
    assert allowed(c, WORDS) == {WORD_ID[b"<|tool|>"]}
    assert c.consume(WORD_ID[b"<|tool|>"]) and c.consume(ord("7")) and c.is_accepting()
    with pytest.raises(GrammarError, match="does not compile for this model"):
        Constraint(Grammar.from_lark("start: <|missing|>"), WORDS_CACHE)
