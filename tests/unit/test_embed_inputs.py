"""Input handling of the embeddings API without a model: parsing `input`, framing token
arrays, length checks and truncation (a stand-in encoder with a toy tokenizer)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from llamay.api.embeddings import MAX_INPUTS, parse_inputs
from llamay.embed.inputs import fit, frame, input_sequences, pair_sequence
from llamay.errors import ContextOverflow, InvalidRequest

BOS, EOS = 1, 2


class ToyModel:
    """Words -> ids 10, 11, ... (one token per word); BOS/EOS framing like BERT."""

    n_vocab = 1000

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        ids = [10 + (sum(map(ord, w)) % 900) for w in text.split()]
        return [BOS, *ids, EOS] if add_special else ids


def toy_encoder(max_tokens: int = 8) -> Any:
    return SimpleNamespace(
        name="toy",
        model=ToyModel(),
        max_tokens=max_tokens,
        bos_id=BOS,
        eos_id=EOS,
        add_bos=True,
        add_eos=True,
    )


def test_parse_inputs_shapes() -> None:
    assert parse_inputs("hi") == (["hi"], False)
    assert parse_inputs(["a", "b"]) == (["a", "b"], True)
    assert parse_inputs([5, 6, 7]) == ([[5, 6, 7]], False)
    assert parse_inputs([[5, 6], [7]]) == ([[5, 6], [7]], True)


@pytest.mark.parametrize(
    ("value", "param"),
    [(None, "input"), (3, "input"), ([], "input"), (["a", 3], "input[1]"), ([{"x": 1}], "input[0]")],
)
def test_parse_inputs_rejects(value: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        parse_inputs(value)
    assert err.value.param == param


def test_parse_inputs_caps_the_count() -> None:
    with pytest.raises(InvalidRequest, match=str(MAX_INPUTS)):
        parse_inputs(["x"] * (MAX_INPUTS + 1))


def test_frame_adds_missing_bos_and_eos_only() -> None:
    e = toy_encoder()
    assert frame(e, [7, 8]) == [BOS, 7, 8, EOS]
    assert frame(e, [BOS, 7, 8, EOS]) == [BOS, 7, 8, EOS]
    assert frame(e, [BOS, 7]) == [BOS, 7, EOS]


def test_fit_names_the_input_or_truncates_keeping_eos() -> None:
    e = toy_encoder(max_tokens=5)
    ids = [BOS, 10, 11, 12, 13, 14, EOS]
    with pytest.raises(ContextOverflow) as err:
        fit(e, ids, False, "input[3]")
    assert err.value.param == "input[3]" and err.value.status == 400
    assert "7 tokens" in err.value.message and "5" in err.value.message
    assert fit(e, ids, True, "input[3]") == [BOS, 10, 11, 12, EOS]
    assert fit(e, ids[:5], False, "x") == ids[:5]


def test_input_sequences_index_errors() -> None:
    e = toy_encoder(max_tokens=6)
    long = "a b c d e f g"
    with pytest.raises(ContextOverflow) as err:
        input_sequences(e, ["ok", long], False)
    assert err.value.param == "input[1]"
    with pytest.raises(ContextOverflow) as err:
        input_sequences(e, [long], False, indexed=False)
    assert err.value.param == "input"
    assert len(input_sequences(e, [long], True)[0]) == 6
    with pytest.raises(InvalidRequest, match="empty token array"):
        input_sequences(e, [[]], False)
    with pytest.raises(InvalidRequest, match="not a token id") as err:
        input_sequences(e, ["x", [5, 1000]], False)
    assert err.value.param == "input[1]"


def test_pair_sequence_frames_and_truncates_the_document() -> None:
    e = toy_encoder(max_tokens=8)
    q = e.model.tokenize("q1 q2", add_special=False)
    pair = pair_sequence(e, q, "d1 d2", False, "documents[0]")
    assert pair[0] == BOS and pair[3] == EOS and pair[-1] == EOS and len(pair) == 7
    with pytest.raises(ContextOverflow) as err:
        pair_sequence(e, q, "d1 d2 d3 d4", False, "documents[2]")
    assert err.value.param == "documents[2]"
    cut = pair_sequence(e, q, "d1 d2 d3 d4", True, "documents[2]")
    assert len(cut) == 8 and cut[-1] == EOS
    with pytest.raises(ContextOverflow) as err:
        pair_sequence(e, list(range(10, 16)), "d", True, "documents[0]")
    assert err.value.param == "query"
