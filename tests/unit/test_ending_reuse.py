"""A constraint keeps the last ending it found and checks it again after each token
(`Constraint.ending_after`) instead of searching anew, over a vocabulary whose tokens
join whitespace, quotes and letters the way real ones do."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import llguidance
import numpy as np
import pytest

from llamay.engine.request import ConstraintPlan
from llamay.engine.sampling_step import CLOSED_EARLY, Finish, sample_step
from llamay.grammar import CompileCache, Constraint, Grammar, allocate_mask
from llamay.grammar import constraint as constraint_module
from llamay.grammar.runtime import mask_tokens
from llamay.types import StopSpec
from tests.unit.test_layout_step import _JoinedVocab
from tests.unit.test_sampling_outcome import MODEL, favour, make


class _Vocab(_JoinedVocab):
    """Bytes, and tokens that join whitespace runs, quotes, punctuation and letters."""

    WORDS = [
        b"\n  ", b"\n    ", b"\n      ", b"  ", b"    ", b' "', b'",', b'":', b'": "', b"},",
        b"ab", b"cd", b"abc", b' "x', b"[\n", b"{\n", b"\n    }", b'""',
    ]  # fmt: skip


EOS = _Vocab().eos_token_id
TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Vocab()))
CACHE = CompileCache(TOKENIZER)
FACTS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cities": {
            "type": "array",
            "minItems": 2,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "maxLength": 12},
                    "zip": {"type": "string", "pattern": "^[0-9]{3}$"},  # where an old ending
                    "fact": {"type": "string"},  # no longer fits after a digit
                },
                "required": ["name", "zip", "fact"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["cities"],
    "additionalProperties": False,
}


def piece(tokens: list[int]) -> bytes:
    return TOKENIZER.decode_bytes(tokens)


def ends(grammar: Grammar, tokens: list[int]) -> bool:
    """Whether a fresh matcher takes all of `tokens` and then accepts (checked apart from
    the constraint under test)."""
    m = CACHE.get(grammar).matcher()
    return bool(m.try_consume_tokens(tokens) == len(tokens) and m.is_accepting())


@pytest.mark.parametrize("seed", range(6))
def test_every_ending_given_after_a_token_is_a_valid_ending_in_the_layout(seed: int) -> None:
    grammar = Grammar.from_json_schema(FACTS, layout="indented")
    c = Constraint(grammar, CACHE)
    rng = np.random.default_rng(seed)
    mask = allocate_mask(TOKENIZER)
    taken: list[int] = []
    assert c.ending(500) is not None
    for _ in range(160):
        c.fill_mask(mask)
        allowed = [int(t) for t in mask_tokens(mask, TOKENIZER.vocab_size) if c.keeps_layout(int(t))]
        allowed = [t for t in allowed if t < 128 or 256 <= t < EOS]  # ASCII, so text decodes
        if not allowed:
            break
        # Mostly letters and the joined tokens, so strings grow and structure still moves on.
        weights = np.array([8.0 if t >= 256 or chr(t).isalpha() else 1.0 for t in allowed])
        token = allowed[int(rng.choice(len(allowed), p=weights / weights.sum()))]
        after = c.ending_after(token, 500)
        assert after is not None
        whole = [*taken, token, *after]
        assert ends(grammar, whole), piece(whole)
        text = piece(whole).decode()
        jsonschema.validate(json.loads(text), FACTS)
        assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        assert c.consume(token)
        taken.append(token)
        assert c.ending(500) == after  # the one found is kept for the state it was found for


def test_a_long_string_is_closed_early_with_few_searches(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    search = constraint_module.shortest_completion

    def counted(*args: Any, **kwargs: Any) -> list[int] | None:
        calls.append(1)
        return search(*args, **kwargs)

    monkeypatch.setattr(constraint_module, "shortest_completion", counted)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    s, _ = make(StopSpec(max_tokens=40), ConstraintPlan(Grammar.from_json_schema(schema, layout="compact")))
    out = ""
    finish: Finish | None = None
    for _ in range(41):
        step = sample_step(s, favour(*'x{"a:'), MODEL, n_ctx=4096)
        out += step.token.text if step.token is not None else ""
        if step.finish is not None:
            finish = step.finish
            break
    assert finish == Finish("stop", CLOSED_EARLY) and json.loads(out)["a"].startswith("xxx")
    # Near the end every token is judged, but only where the ending changes is it searched
    # for: the opening bytes and the start of the string, never once per "x".
    assert out.count("x") > 20 and len(calls) <= 8
