import numpy as np
import pytest

from llamay.engine.repetition import NgramPenalty, RepetitionParams, structural_tokens
from llamay.engine.siblings import SIBLING_PENALTY
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


def test_the_prompt_licenses_as_many_copies_as_it_holds() -> None:
    params = RepetitionParams(multiplier=1.0, base=2.0)
    # the prompt holds "d a b c" once: the output "a b c d a b c" has copied it once
    # ("d a b c" does not occur in it yet), so writing it is free ...
    pen = NgramPenalty(params, STRUCT, source=[3, 0, 1, 2])
    assert pen.penalties([0, 1, 2, 3, 0, 1]) == {}
    # ... but once "d a b c" is in the output, a second copy is an echo
    assert pen.penalties([3, 0, 1, 2, 6, 3, 0, 1]) == {2: 2.0}
    # a prompt that holds it twice licenses two copies
    pen = NgramPenalty(params, STRUCT, source=[3, 0, 1, 2, 6, 3, 0, 1, 2])
    assert pen.penalties([3, 0, 1, 2, 6, 3, 0, 1]) == {}


# Tokens of a JSON-ish vocabulary for the sibling tests.
J = [b"[", b'"', b"An", b"ita", b'",', b'"]', b"At", b"or", b"{", b'"k', b'":', b" ", b"}", b"},", b"}]"]
JT = {p.decode(): i for i, p in enumerate(J)}
ALL = np.ones(len(J), dtype=bool)


def fresh() -> NgramPenalty:
    """A penalty whose JSON scan starts with the output (as an immediate constraint's)."""
    pen = NgramPenalty(RepetitionParams(), structural_tokens(J))
    pen.penalize(np.zeros(len(J), dtype=np.float32), [], J, ALL)
    return pen


def ids(*pieces: str) -> list[int]:
    return [JT[p] for p in pieces]


def test_an_echo_inside_an_array_spends_it_and_pushes_down_another_element() -> None:
    pen = fresh()
    history = ids("[", '"', "An", "ita", '",', '"', "An")
    logits = np.zeros(len(J), dtype=np.float32)
    logits[JT["ita"]] = 5.0  # the model's first choice repeats the first element
    out = pen.penalize(logits, history, J, ALL)
    assert out[JT["ita"]] < 5.0  # the n-gram penalty, as before
    assert pen.siblings is not None and pen.siblings.spent_depth() == 0
    history += ids("At", "or")
    out = pen.penalize(np.zeros(len(J), dtype=np.float32), history, J, ALL)
    assert out[JT['",']] == -SIBLING_PENALTY  # would start a third element
    assert out[JT['"]']] == 0.0 and out[JT["At"]] == 0.0  # closing, or going on, is free


def test_an_array_is_not_spent_by_what_the_model_did_not_prefer_or_by_keys() -> None:
    pen = fresh()
    history = ids("[", '"', "An", "ita", '",', '"', "An")
    logits = np.zeros(len(J), dtype=np.float32)
    logits[JT["At"]] = 5.0  # the echo is penalised, but the model wanted something else
    pen.penalize(logits, history, J, ALL)
    assert pen.siblings is not None and pen.siblings.spent_depth() is None
    # repeated keys of objects in an array are the format, not an echo
    pen = fresh()
    history = ids("[", "{", '"k', '":', " ", '"', "An", '"', "},", "{", '"k')
    pen.penalize(np.zeros(len(J), dtype=np.float32), history, J, ALL)
    assert pen.siblings is not None and pen.siblings.spent_depth() is None


def test_a_token_the_grammar_forces_never_spends_an_array() -> None:
    pen = fresh()
    history = ids("[", '"', "An", "ita", '",', '"', "An")
    only = np.zeros(len(J), dtype=bool)
    only[JT["ita"]] = True
    pen.penalize(np.zeros(len(J), dtype=np.float32), history, J, only)
    assert pen.siblings is not None and pen.siblings.spent_depth() is None


def test_a_spent_array_of_calls_pushes_down_the_next_call_only() -> None:
    pen = fresh()
    assert pen.siblings is not None
    history = ids(
        "[", "{", '"k', '":', " ", '"', "An", "ita", '"', "},", "{", '"k', '":', " ", '"', "At", '"'
    )
    pen.siblings.advance(history)
    pen.siblings.scan.stack[0][1] = True  # spent, as an echo would have left it
    out = pen.penalize(np.zeros(len(J), dtype=np.float32), history, J, ALL)
    assert out[JT["},"]] == -SIBLING_PENALTY and out[JT["}]"]] == 0.0 and out[JT["}"]] == 0.0
