import numpy as np
import pytest

from llamay.engine.repetition import NgramPenalty, RepetitionParams, structural_tokens
from llamay.errors import InvalidRequest

PIECES = [b"a", b"b", b"c", b"d", b'",', b" ", b"x"]
STRUCT = structural_tokens(PIECES)


def test_structural_tokens() -> None:
    assert STRUCT.tolist() == [False, False, False, False, True, True, False]


def test_echo_continuation_is_penalised_and_grows_with_length() -> None:
    pen = NgramPenalty(RepetitionParams(multiplier=1.0, base=2.0, allowed_length=2), STRUCT)
    # "a b c d a b" -> continuing with "c" would repeat "a b c": penalise c by 1 * 2**0
    assert pen.penalties([0, 1, 2, 3, 0, 1]) == {2: 1.0}
    # "a b c d a b c" -> "d" repeats a run of 3: 2**1
    assert pen.penalties([0, 1, 2, 3, 0, 1, 2]) == {3: 2.0}


def test_short_echoes_and_structural_tokens_are_free() -> None:
    pen = NgramPenalty(RepetitionParams(allowed_length=2), STRUCT)
    assert pen.penalties([0, 1, 3, 1]) == {}  # a run of 1 is allowed
    assert pen.penalties([0, 1, 4, 0, 1]) == {}  # the continuation is punctuation


def test_penalize_never_writes_its_input() -> None:
    logits = np.zeros(7, dtype=np.float32)
    logits.setflags(write=False)
    out = NgramPenalty(RepetitionParams(multiplier=1.0, base=2.0), STRUCT).penalize(
        logits, [0, 1, 2, 3, 0, 1]
    )
    assert out[2] == -1.0 and logits[2] == 0.0


def test_window_limits_the_search() -> None:
    pen = NgramPenalty(RepetitionParams(window=8), STRUCT)
    history = [0, 1, 2] + [6] * 10 + [0, 1]
    assert pen.penalties(history) == {}


def test_params_validated() -> None:
    with pytest.raises(InvalidRequest):
        RepetitionParams(base=0.5).validate()


def test_copying_from_the_prompt_is_not_an_echo() -> None:
    pen = NgramPenalty(RepetitionParams(multiplier=1.0, base=2.0), STRUCT, source=[6, 0, 1, 3, 6])
    # "a b c d a b" + c would echo "a b c", but is it copying? the prompt has "x a b d", not "a b c"
    assert pen.penalties([0, 1, 2, 3, 0, 1]) == {2: 1.0}
    # with "d a b c" in the prompt, continuing "d a b" with "c" copies the prompt: allowed
    pen = NgramPenalty(RepetitionParams(multiplier=1.0, base=2.0), STRUCT, source=[3, 0, 1, 2])
    assert pen.penalties([0, 1, 2, 3, 0, 1]) == {}
