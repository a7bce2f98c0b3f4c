"""The shortest valid ending of a constrained answer (grammar/closing.py) and the engine
step that steers to it when max_tokens runs low, over llguidance's byte tokenizer."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

from llamay.engine.request import ConstraintPlan
from llamay.engine.sampling_step import CLOSED_EARLY, Finish, sample_step
from llamay.grammar import Constraint, Grammar, byte_compile_cache, byte_tokenizer
from llamay.grammar.closing import JsonScan, shortest_completion
from llamay.types import StopSpec
from tests.unit.test_sampling_outcome import MODEL, favour, make

CACHE = byte_compile_cache()
TOK = byte_tokenizer()

SERVER = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "port": {"type": "integer", "minimum": 1},
        "owner": {
            "type": "object",
            "properties": {"nick": {"type": "string", "minLength": 2}, "zip": {"type": "string", "pattern": "^[0-9]{3}$"}},
            "required": ["nick", "zip"],
        },
        "note": {"type": "string"},
    },
    "required": ["name", "port", "owner"],
}  # fmt: skip


def text(tokens: list[int]) -> str:
    return TOK.decode_bytes(tokens).decode()


def after(grammar: Grammar, prefix: str) -> Constraint:
    c = Constraint(grammar, CACHE)
    for t in TOK.tokenize_str(prefix):
        assert c.consume(t), prefix
    return c


@pytest.mark.parametrize("layout", ["compact", "indented", "free"])
def test_from_the_start_the_shortest_answer_has_only_required_keys(layout: str) -> None:
    c = Constraint(Grammar.from_json_schema(SERVER, layout=layout), CACHE)  # type: ignore[arg-type]
    found = c.completion(500)
    assert found is not None
    value = json.loads(text(found))
    jsonschema.validate(value, SERVER)
    assert set(value) == {"name", "port", "owner"} and value["name"] == "" and value["port"] == 1
    assert len(value["owner"]["nick"]) == 2 and value["owner"]["zip"].isdigit()
    # the search advanced nothing: the same state still gives the same ending
    assert c.completion(500) == found and not c.is_accepting()


def test_an_open_string_array_and_object_are_closed_without_new_items() -> None:
    g = Grammar.from_json_schema(SERVER, layout="compact")
    prefix = '{"name":"web server number one","tags":["fast","sm'
    found = after(g, prefix).completion(500)
    assert found is not None
    whole = prefix + text(found)
    value = json.loads(whole)
    jsonschema.validate(value, SERVER)
    assert value["tags"] == ["fast", "sm"]  # the open item closed, no new one
    assert "note" not in value  # no optional key added
    # what is written: the shortest value for each required key, in the schema's order
    assert text(found) == '"],"port":1,"owner":{"nick":"' + value["owner"]["nick"] + '","zip":"000"}}'


def test_an_escape_inside_a_string_is_finished_before_the_quote() -> None:
    g = Grammar.from_json_schema({"type": "string"}, layout="compact")
    found = after(g, '"a\\').completion(10)
    assert found is not None
    assert isinstance(json.loads('"a\\' + text(found)), str)


def test_a_complete_answer_needs_nothing_and_a_short_limit_finds_none() -> None:
    g = Grammar.from_json_schema(SERVER, layout="compact")
    assert after(Grammar.from_json_schema({"type": "integer"}), "12").completion(5) == []
    c = Constraint(g, CACHE)
    shortest = c.completion(500)
    assert shortest is not None
    assert c.completion(len(shortest)) == shortest
    assert c.completion(len(shortest) - 1) is None
    assert CACHE.min_tokens(g, 500) == len(shortest)
    assert CACHE.min_tokens(g, 3) is None


def test_a_hypothetical_first_token_is_judged_without_taking_it() -> None:
    g = Grammar.from_json_schema({"type": "array", "items": {"type": "integer"}}, layout="compact")
    c = after(g, "[1")
    closing = c.completion(10, first=ord("]"))
    assert closing == []
    assert c.completion(10, first=ord("x")) is None  # not a valid next token
    assert c.completion(10) == [ord("]")]


def test_gbnf_and_regex_grammars_finish_too() -> None:
    gbnf = Grammar.from_gbnf('root ::= "say " word+ "!"\nword ::= [a-z]')
    found = after(gbnf, "say hel").completion(10)
    assert found is not None and text(found) == "!"
    regex = Grammar.from_regex("id-[0-9]{4}")
    found = Constraint(regex, CACHE).completion(20)
    assert found is not None and text(found) == "id-0000"


def test_json_scan_follows_strings_and_escapes() -> None:
    scan = JsonScan()
    scan.feed(b'{"a": "x\\"')
    assert scan.in_string and not scan.escaped
    scan.feed(b'y"')
    assert not scan.in_string
    copy = scan.copy()
    copy.feed(b'"\\')
    assert copy.in_string and copy.escaped and not scan.in_string


def test_an_error_state_has_no_ending() -> None:
    g = Grammar.from_json_schema({"type": "integer"})
    c = Constraint(g, CACHE)
    assert not c.consume(ord("x"))
    assert c.completion(10) is None
    m = CACHE.get(g).matcher()
    m.consume_token(ord("x"))
    assert shortest_completion(m, CACHE.closing, 10) is None


# -- the engine step ------------------------------------------------------------------------


def run(grammar: Grammar, max_tokens: int, prefer: str) -> tuple[str, Finish]:
    """Generate with a model that always prefers the characters of `prefer` (in order)."""
    s, _ = make(StopSpec(max_tokens=max_tokens), ConstraintPlan(grammar))
    out = ""
    for _ in range(max_tokens + 1):
        step = sample_step(s, favour(*prefer), MODEL, n_ctx=4096)
        if step.token is not None:
            out += step.token.text
        if step.finish is not None:
            return out, step.finish
    raise AssertionError("no finish within max_tokens")


def test_a_rambling_model_is_closed_early_with_a_valid_answer() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    }
    g = Grammar.from_json_schema(schema, layout="compact")
    shortest = CACHE.min_tokens(g, 100)
    assert shortest is not None
    for budget in (shortest, shortest + 1, shortest + 7, 40):
        out, fin = run(g, budget, 'x{"a')  # it would write "xxxx..." into the string forever
        value = json.loads(out)
        jsonschema.validate(value, schema)
        assert fin == Finish("stop", CLOSED_EARLY)
        assert len(TOK.tokenize_str(out)) == budget  # it used its whole budget, no more
        assert value["a"].startswith("x" * min(budget - shortest, 1))


def test_a_model_that_ends_by_itself_is_not_marked() -> None:
    g = Grammar.from_json_schema(
        {"type": "array", "items": {"type": "integer"}, "maxItems": 2}, layout="compact"
    )
    out, fin = run(g, 50, "[]")
    assert out == "[]"
    assert fin.message is None and fin.reason == "stop"


def test_free_text_is_never_steered() -> None:
    s, _ = make(StopSpec(max_tokens=3))
    reasons = [sample_step(s, favour("a"), MODEL, n_ctx=64).finish for _ in range(3)]
    assert reasons[-1] == Finish("length") and not s.closed_early
    assert np.array_equal(s.tokens[-3:], [ord("a")] * 3)
