"""`llamay.LLM` on the real default model: in process, and against a real `llamay serve`."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Literal, TypedDict

import pytest
from pydantic import BaseModel, Field

import llamay
from llamay.engine.client import iter_events
from llamay.engine.request import GenerateRequest
from llamay.store import llamay_home
from llamay.types import SamplingParams, StopSpec, TokenEvent
from tests.serverproc import start_server

pytestmark = pytest.mark.slow

GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def llm() -> Iterator[llamay.LLM]:
    # The real home: the default model is fetched once and reused, as a user would have it.
    with llamay.LLM() as m:
        yield m


def test_says_hello(llm: llamay.LLM) -> None:
    assert llm.model == "smollm2:135m"
    r = llm.chat("Say hello.", max_tokens=200, **GREEDY)
    assert r.finish_reason == "stop" and "hello" in r.text.lower()
    assert r.usage.completion_tokens > 3 and r.timings.generate_ms > 0


@dataclasses.dataclass
class Person:
    name: str
    age: int


class City(TypedDict):
    city: str
    country: str


class Sentiment(enum.Enum):
    POSITIVE = "positive"
    NEGATIVE = "negative"


class Invoice(BaseModel):
    number: Annotated[str, Field(max_length=12)]
    total: float
    currency: Literal["EUR", "USD", "GBP"]


def test_typed_outputs_of_every_kind(llm: llamay.LLM) -> None:
    person = llm.chat(
        "Extract the person: Maria Lopez is 34 years old and lives in Madrid.", output=Person, **GREEDY
    )
    assert person.parsed == Person("Maria Lopez", 34)
    city = llm.chat("Paris is the capital of France.", output=City, **GREEDY)
    # A 135M model: its casing of the country is a near-tie that attention's rounding decides.
    assert set(city.parsed) == {"city", "country"} and city.parsed["city"] == "Paris"
    assert city.parsed["country"].lower() == "france"
    spam = llm.chat(
        "Is this message spam? 'WIN A FREE IPHONE NOW, click here'",
        output=Literal["spam", "not spam"],
        **GREEDY,
    )
    assert spam.parsed == "spam"
    primes = llm.chat(
        "List the first five prime numbers.", output=Annotated[list[int], Field(max_length=5)], **GREEDY
    )
    assert (
        isinstance(primes.parsed, list)
        and len(primes.parsed) <= 5
        and all(isinstance(n, int) for n in primes.parsed)
    )
    mood = llm.chat("Review: 'I loved this film.' What is the sentiment?", output=Sentiment, **GREEDY)
    assert isinstance(mood.parsed, Sentiment)
    invoice = llm.chat("Invoice 4471 from Acme Ltd, total 1,284.50 EUR.", output=Invoice, **GREEDY)
    assert isinstance(invoice.parsed, Invoice) and invoice.finish_reason == "stop"
    assert list(json.loads(invoice.text)) == ["number", "total", "currency"]  # field order


@llamay.tool
def get_weather(city: str, unit: Literal["c", "f"] = "c") -> dict[str, object]:
    """Current weather for a city."""
    return {"temp": 31, "unit": unit}


def test_the_tool_loop_calls_and_answers_with_the_result(llm: llamay.LLM) -> None:
    r = llm.chat(
        "What is the weather in Pune?", tools=[get_weather], run_tools=True, max_tokens=120, **GREEDY
    )
    (call,) = r.tool_calls
    assert call.name == "get_weather" and call.arguments["city"] == "Pune" and call.ran
    assert call.result == {"temp": 31, "unit": "c"}
    assert r.finish_reason == "stop" and r.text
    # The answer was generated after the tool's result: the history holds it, and asking
    # again from that history (tools still offered) gives the same answer. (Whether this
    # 135M model quotes the 31 depends on the CPU's float rounding, so it is not asserted.)
    *history, answer = r.messages
    (result,) = [m for m in history if m["role"] == "tool"]
    assert json.loads(result["content"]) == {"temp": 31, "unit": "c"}
    assert answer == {"role": "assistant", "content": r.text}
    again = llm.chat(history, tools=[get_weather], max_tokens=120, **GREEDY)
    assert not again.tool_calls and again.text == r.text


def test_stream_async_and_threads_share_one_engine(llm: llamay.LLM) -> None:
    whole = llm.chat("Name three colours.", max_tokens=40, **GREEDY)
    assert "".join(c.text for c in llm.stream("Name three colours.", max_tokens=40, **GREEDY)) == whole.text

    questions = [f"What is {i} plus {i}? Answer with a number." for i in range(1, 9)]
    alone = [llm.chat(q, max_tokens=24, **GREEDY).text for q in questions]

    async def gathered() -> list[str]:
        return [
            r.text for r in await asyncio.gather(*(llm.achat(q, max_tokens=24, **GREEDY) for q in questions))
        ]

    assert asyncio.run(gathered()) == alone
    before = llm.stats()
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda q: llm.chat(q, max_tokens=24, **GREEDY).text, questions))
    after = llm.stats()
    assert together == alone
    assert (
        after["decode_steps"] - before["decode_steps"]
        < after["generated_tokens"] - before["generated_tokens"]
    )


def test_score_matches_the_greedy_generation(llm: llamay.LLM) -> None:
    prompt = "The capital of France is"
    lm = llm._backend.lm  # type: ignore[attr-defined]
    tokens = lm.model.tokenize(prompt, add_special=True, parse_special=False)
    sampling = SamplingParams(temperature=0.0, logprobs=True, top_logprobs=2)
    events = [
        e
        for e in iter_events(
            lm.engine, GenerateRequest(tokens, sampling, StopSpec(max_tokens=3), cache=False)
        )
        if isinstance(e, TokenEvent)
    ]
    text = lm.model.detokenize([e.token for e in events])
    assert lm.model.tokenize(text, add_special=False, parse_special=False) == [e.token for e in events]
    greedy, other = llm.score(prompt, [text, " a banana"])
    assert greedy.greedy and not other.greedy
    assert greedy.logprobs == pytest.approx([e.logprob for e in events], abs=1e-4)
    assert greedy.total > other.total


def test_remote_mode_matches_in_process(llm: llamay.LLM) -> None:
    with start_server("", home=llamay_home(), timeout=600) as s, llamay.LLM(url=s.base) as remote:
        assert remote.model == llm.model
        ask = "Name three colours."
        assert remote.chat(ask, max_tokens=40, **GREEDY).text == llm.chat(ask, max_tokens=40, **GREEDY).text
        person = "Extract the person: Maria Lopez is 34 years old and lives in Madrid."
        assert remote.chat(person, output=Person, **GREEDY).parsed == Person("Maria Lopez", 34)
        prompt, conts = "Is this spam? 'WIN A FREE IPHONE NOW' Answer:", [" yes", " no"]
        for a, b in zip(remote.score(prompt, conts), llm.score(prompt, conts), strict=True):
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6) and a.greedy == b.greedy
        weather = "What is the weather in Pune?"
        r = remote.chat(weather, tools=[get_weather], run_tools=True, max_tokens=120, **GREEDY)
        here = llm.chat(weather, tools=[get_weather], run_tools=True, max_tokens=120, **GREEDY)
        assert [(c.name, c.arguments, c.result) for c in r.tool_calls] == [
            (c.name, c.arguments, c.result) for c in here.tool_calls
        ]
        assert r.tool_calls and r.text == here.text
        with remote.context(system="You answer in one short sentence.") as ctx:
            first = ctx.chat("What is the capital of France?", max_tokens=30, **GREEDY)
            second = ctx.chat("And of Spain?", max_tokens=30, **GREEDY)
            assert second.usage.cached >= first.usage.prompt_tokens - 2
