"""`llamay.LLM` in process, on the real engine with a tiny generated model: chat, typed
outputs of every kind, streaming, async, threads sharing one engine, complete, score,
contexts and errors. Random weights say nothing sensible: the tests check invariants
(stream == chat, alone == batched, schema-valid values, log-probs that agree)."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Literal, NotRequired, TypedDict

import pytest
from pydantic import BaseModel, Field

import llamay
from llamay.engine.client import iter_events
from llamay.engine.request import GenerateRequest
from llamay.errors import ContextOverflow, InvalidRequest
from llamay.library.schema import output_spec
from llamay.types import SamplingParams, StopSpec, TokenEvent

GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def llm(tiny_model_path: Path) -> Iterator[llamay.LLM]:
    with llamay.LLM(str(tiny_model_path), ctx=4096) as m:
        yield m


def test_chat_answers_with_usage_timings_and_history(llm: llamay.LLM) -> None:
    r = llm.chat("Say hello.", max_tokens=12, **GREEDY)
    assert r.text and r.finish_reason == "length" and r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens > 5 and r.timings.total_ms > 0 and r.timings.generate_ms > 0
    assert r.messages == [{"role": "user", "content": "Say hello."}, {"role": "assistant", "content": r.text}]
    assert llm.chat("Say hello.", max_tokens=12, **GREEDY).text == r.text  # greedy is repeatable
    with_system = llm.chat("Say hello.", system="Be 7 words.", max_tokens=12, **GREEDY)
    assert with_system.messages[0] == {"role": "system", "content": "Be 7 words."}
    assert with_system.usage.prompt_tokens > r.usage.prompt_tokens


def test_a_message_list_is_the_conversation(llm: llamay.LLM) -> None:
    messages = [
        {"role": "user", "content": "Name 3 rivers."},
        {"role": "assistant", "content": "Nile, Amazon, Rhine."},
        {"role": "user", "content": "And 2 more?"},
    ]
    r = llm.chat(messages, max_tokens=6, **GREEDY)
    assert r.messages[:3] == messages and r.messages[3]["role"] == "assistant"


def test_stream_gives_the_same_text_as_chat(llm: llamay.LLM) -> None:
    whole = llm.chat("Explain tides in 2 sentences.", max_tokens=16, **GREEDY)
    stream = llm.stream("Explain tides in 2 sentences.", max_tokens=16, **GREEDY)
    pieces = [c.text for c in stream]
    assert len(pieces) > 1 and "".join(pieces) == whole.text
    assert stream.result is not None and stream.result.text == whole.text
    assert stream.result.usage.completion_tokens == 16


def _wait_aborted(llm: llamay.LLM, count: int) -> int:
    """The engine's count of aborted requests once it reaches `count` (it notices an abort
    within a step), or after a minute."""
    for _ in range(1200):
        if llm.stats()["aborted"] >= count:
            break
        asyncio.run(asyncio.sleep(0.05))
    return int(llm.stats()["aborted"])


def test_leaving_a_stream_early_aborts_its_generation(llm: llamay.LLM) -> None:
    before = llm.stats()["aborted"]
    stream = llm.stream("Tell me a 9 part story.", max_tokens=2000, **GREEDY)
    for _ in stream:  # the stream itself stays referenced: leaving the loop must be enough
        break
    assert _wait_aborted(llm, before + 1) == before + 1

    async def main() -> None:
        astream = llm.astream("Tell me a 9 part story.", max_tokens=2000, **GREEDY)
        async for _ in astream:
            break
        await astream.aclose()

    asyncio.run(main())
    assert _wait_aborted(llm, before + 2) == before + 2

    async def cancelled() -> None:
        task = asyncio.ensure_future(llm.achat("Tell me a 9 part story.", max_tokens=2000, **GREEDY))
        engine = llm._backend.lm.engine  # type: ignore[attr-defined]
        while engine.running == 0:  # cancel once the engine is generating it
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert _wait_aborted(llm, before + 3) == before + 3


# -- typed outputs ---------------------------------------------------------------------------
Short = Annotated[str, Field(max_length=12)]
Small = Annotated[int, Field(ge=0, le=999)]


class Invoice(BaseModel):
    number: Short
    total: Small
    currency: Literal["EUR", "USD", "GBP"]


@dataclasses.dataclass
class Point:
    y: Small
    x: Small
    label: Short = "p"


class Movie(TypedDict):
    title: Short
    year: Small
    rating: NotRequired[Literal[1, 2, 3]]


class Colour(enum.Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


KINDS: list[tuple[str, object]] = [
    ("pydantic", Invoice),
    ("dataclass", Point),
    ("typeddict", Movie),
    ("literal", Literal["spam", "ham"]),
    ("enum", Colour),
    ("list", Annotated[list[Small], Field(min_length=1, max_length=4)]),
    ("tuple", tuple[Short, Small]),
    ("int", Small),
]


@pytest.mark.parametrize(("kind", "target"), KINDS, ids=[k for k, _ in KINDS])
def test_typed_output_of_every_kind(llm: llamay.LLM, kind: str, target: object) -> None:
    r = llm.chat("Invoice 4471 from Acme Ltd, total 1,284 EUR.", output=target, seed=7, temperature=1.0)
    assert r.finish_reason == "stop"
    spec = output_spec(target)
    assert r.parsed == spec.parse(r.text)  # the text is JSON of the type, parsed into it
    value = json.loads(r.text)
    if kind == "pydantic":
        assert isinstance(r.parsed, Invoice)
    elif kind == "dataclass":
        assert isinstance(r.parsed, Point)
    elif kind == "enum":
        assert isinstance(r.parsed, Colour)
    elif kind == "literal":
        assert r.parsed in ("spam", "ham")
    if isinstance(value, dict):
        # Generation order is field order.
        fields = list(spec.schema.get("properties") or spec.schema["$defs"][spec.name]["properties"])
        assert list(value) == [f for f in fields if f in value]


def test_a_json_schema_dict_works_too(llm: llamay.LLM) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["ok", "n"],
    }
    r = llm.chat("Check 3 things.", output=schema, **GREEDY)
    assert set(r.parsed) == {"ok", "n"} and isinstance(r.parsed["ok"], bool)


def test_too_few_tokens_for_any_output_is_refused_and_the_fewest_parse(llm: llamay.LLM) -> None:
    # No answer is cut short any more: one that max_tokens cannot hold is refused before it
    # runs, naming the fewest tokens; with those, the answer is closed early and parses.
    with pytest.raises(llamay.LlamayError) as err:
        llm.chat("Invoice 12.", output=Invoice, max_tokens=3, **GREEDY)
    least = int(str(err.value).split("at least ")[1].rstrip(")"))
    r = llm.chat("Invoice 12.", output=Invoice, max_tokens=least, **GREEDY)
    assert isinstance(r.parsed, Invoice) and r.finish_reason == "stop"


# -- async, threads, batches -----------------------------------------------------------------
def test_async_methods_match_the_blocking_ones(llm: llamay.LLM) -> None:
    prompts = [f"Give me {i} apples." for i in range(4)]
    expected = [llm.chat(p, max_tokens=8, **GREEDY).text for p in prompts]

    async def main() -> tuple[list[str], str]:
        results = await asyncio.gather(*(llm.achat(p, max_tokens=8, **GREEDY) for p in prompts))
        stream = llm.astream(prompts[0], max_tokens=8, **GREEDY)
        text = "".join([c.text async for c in stream])
        assert stream.result is not None and stream.result.text == text
        return [r.text for r in results], text

    texts, streamed = asyncio.run(main())
    assert texts == expected and streamed == expected[0]


def test_eight_threads_share_one_engine(llm: llamay.LLM) -> None:
    prompts = [f"Question {i}: what is {i} times {i}?" for i in range(8)]
    alone = [llm.chat(p, max_tokens=12, **GREEDY).text for p in prompts]
    before = llm.stats()
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: llm.chat(p, max_tokens=12, **GREEDY).text, prompts))
    after = llm.stats()
    assert together == alone  # every thread got its own answer, the same as alone
    assert len(set(alone)) > 1
    steps = after["decode_steps"] - before["decode_steps"]
    tokens = after["generated_tokens"] - before["generated_tokens"]
    assert tokens == 8 * 12
    assert steps < tokens  # steps decoded several sequences at once: the engine batched them


def test_chat_many_equals_chat_one_by_one(llm: llamay.LLM) -> None:
    prompts: list[str | list[dict[str, str]]] = [f"Summarise report {i}." for i in range(5)]
    prompts.append([{"role": "user", "content": "Summarise report 9."}])
    alone = [llm.chat(p, max_tokens=10, **GREEDY).text for p in prompts]
    before = llm.stats()
    many = llm.chat_many(prompts, max_tokens=10, **GREEDY)
    after = llm.stats()
    assert [r.text for r in many] == alone
    assert after["decode_steps"] - before["decode_steps"] < 6 * 10
    typed = llm.chat_many(["Colour 1?", "Colour 2?"], output=Colour, **GREEDY)
    assert all(isinstance(r.parsed, Colour) for r in typed)
    with pytest.raises(InvalidRequest):
        llm.chat_many("not a list", max_tokens=2)  # type: ignore[arg-type]


# -- complete, score -------------------------------------------------------------------------
def test_complete_continues_raw_text(llm: llamay.LLM) -> None:
    r = llm.complete("Once upon a time", max_tokens=8, **GREEDY)
    assert r.usage.completion_tokens == 8 and r.messages == []
    model = llm._backend.lm.model  # type: ignore[attr-defined]
    assert r.usage.prompt_tokens == len(
        model.tokenize("Once upon a time", add_special=True, parse_special=False)
    )
    assert llm.complete("Once upon a time", output=Literal["yes", "no"], **GREEDY).parsed in ("yes", "no")


def _greedy_reference(llm: llamay.LLM, prompt: str, n: int) -> list[TokenEvent]:
    """The engine's own greedy generation after `prompt`, each token's log-probability and
    its best candidates: the reference the scores are checked against."""
    lm = llm._backend.lm  # type: ignore[attr-defined]
    tokens = lm.model.tokenize(prompt, add_special=True, parse_special=False)
    sampling = SamplingParams(temperature=0.0, logprobs=True, top_logprobs=8)
    req = GenerateRequest(tokens, sampling, StopSpec(max_tokens=n), cache=False)
    return [e for e in iter_events(lm.engine, req) if isinstance(e, TokenEvent)]


@pytest.mark.parametrize("prompt", ["The little dog ran to the house", "Is this spam? Answer:"])
def test_score_matches_log_probs_computed_token_by_token(llm: llamay.LLM, prompt: str) -> None:
    events = _greedy_reference(llm, prompt, 6)
    model = llm._backend.lm.model  # type: ignore[attr-defined]
    greedy_text = model.detokenize([e.token for e in events])
    assert model.tokenize(greedy_text, add_special=False, parse_special=False) == [e.token for e in events]
    # The same text with its last token swapped for another likely one (the first whose
    # text reads back as the same tokens).
    head = [e.token for e in events[:-1]]
    runner_up = next(
        t
        for t in events[-1].top[1:]
        if model.tokenize(model.detokenize([*head, t.token]), add_special=False, parse_special=False)
        == [*head, t.token]
    )
    other_text = model.detokenize([*head, runner_up.token])
    greedy, other = llm.score(prompt, [greedy_text, other_text])
    assert greedy.greedy and not other.greedy
    assert greedy.logprobs == pytest.approx([e.logprob for e in events], abs=1e-4)
    assert greedy.total == pytest.approx(sum(greedy.logprobs))
    assert other.logprobs[:-1] == pytest.approx(greedy.logprobs[:-1], abs=1e-9)  # scored together, the same
    assert other.logprobs[-1] == pytest.approx(runner_up.logprob, abs=1e-4)
    assert other.total < greedy.total
    assert "".join(greedy.tokens) == greedy_text
    alone = llm.score(prompt, other_text)[0]
    assert alone.logprobs == pytest.approx(other.logprobs, abs=1e-9)  # alone == batched


def test_score_refuses_empty_continuations(llm: llamay.LLM) -> None:
    with pytest.raises(InvalidRequest):
        llm.score("Is it?", [""])
    assert llm.score("Is it?", []) == []


# -- contexts --------------------------------------------------------------------------------
def test_a_context_turn_reads_only_what_is_new(llm: llamay.LLM) -> None:
    system = "You label support tickets as billing, bug or other. " * 3
    ctx = llm.context(system=system)
    assert ctx.id is not None  # a context in the engine, as a server holds one
    held = len(ctx.messages)
    first = ctx.chat("Ticket 1: I was charged twice.", max_tokens=6, **GREEDY)
    assert len(ctx.messages) == held + 2
    # The system prompt was computed when the context was made: the first turn reuses it.
    assert first.usage.cached >= 30
    second = ctx.chat("Ticket 2: the app crashes.", max_tokens=6, **GREEDY)
    assert second.usage.cached >= first.usage.prompt_tokens - 2  # the whole first turn's prompt
    # A context turn answers exactly as a plain chat on the same conversation.
    plain = llm.chat(second.messages[:-1], max_tokens=6, **GREEDY)
    assert plain.text == second.text
    side = ctx.chat("Ticket 3: other.", keep=False, max_tokens=6, **GREEDY)
    assert len(ctx.messages) == held + 4 and side.messages[-2]["content"] == "Ticket 3: other."
    fork = ctx.fork()
    fork.chat("Ticket 4.", max_tokens=4, **GREEDY)
    assert len(fork.messages) == len(ctx.messages) + 2
    with pytest.raises(InvalidRequest):
        ctx.chat("x", system="another")
    fork.close()
    ctx.close()
    assert ctx.id is None and fork.id is None


# -- errors ----------------------------------------------------------------------------------
def test_errors_are_llamay_errors(llm: llamay.LLM) -> None:
    with pytest.raises(ContextOverflow):
        llm.chat("word " * 5000, max_tokens=2)
    with pytest.raises(InvalidRequest) as err:
        llm.chat("hi", temperature=-1)
    assert err.value.param == "temperature"
    with pytest.raises(llamay.LlamayError):
        llm.chat("hi", colour="red")  # type: ignore[call-arg]


def test_reasoning_comes_apart_from_the_answer(tiny_think_model_path: Path) -> None:
    with llamay.LLM(str(tiny_think_model_path), ctx=2048) as think:
        r = think.chat("What is 2 plus 2?", max_tokens=24, **GREEDY)
        assert r.reasoning and "</think>" not in r.text and "<think>" not in r.reasoning
        chunks = list(think.stream("What is 2 plus 2?", max_tokens=24, **GREEDY))
        assert "".join(c.reasoning for c in chunks) == r.reasoning
        assert "".join(c.text for c in chunks) == r.text
        assert {c.kind for c in chunks} == {"reasoning", "content"}
        off = think.chat("What is 2 plus 2?", max_tokens=8, thinking=False, **GREEDY)
        assert off.reasoning == "" and off.text


def test_a_context_survives_a_template_that_rewrites_history(tiny_think_model_path: Path) -> None:
    # This template drops the reasoning of earlier turns, so the second turn's prompt no
    # longer starts with what the context holds after the first.
    with llamay.LLM(str(tiny_think_model_path), ctx=2048) as think:
        ctx = think.context(system="Answer briefly.")
        first_id = ctx.id
        a = ctx.chat("What is 2 plus 2?", max_tokens=24, **GREEDY)
        assert a.reasoning and ctx.id == first_id
        b = ctx.chat("And 3 plus 3?", max_tokens=24, **GREEDY)
        assert b.text == think.chat(b.messages[:-1], max_tokens=24, **GREEDY).text
        assert ctx.id not in (None, first_id)  # computed again, for the turns to come
        c = ctx.chat("And 4 plus 4?", max_tokens=24, **GREEDY)
        assert c.usage.cached > 0 and c.text == think.chat(c.messages[:-1], max_tokens=24, **GREEDY).text


def test_closing_leaves_nothing_behind(tiny_model_path: Path) -> None:
    with llamay.LLM(str(tiny_model_path), ctx=1024) as other:
        other.context(system="Left open, on purpose.")
        folder = other._backend._folder  # type: ignore[attr-defined]
        assert folder.exists()
    assert not folder.exists()  # contexts deleted, nothing saved, the folder removed
    with pytest.raises(InvalidRequest):
        other.chat("hi")
