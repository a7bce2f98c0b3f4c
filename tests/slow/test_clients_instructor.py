"""instructor against the real default model in a real `llamay serve`: TOOLS and JSON_SCHEMA
modes into a Pydantic model, the async client, and a streamed Partial. Greedy sampling; the
grammar guarantees the shape, so what is checked is how instructor reads llamay's replies."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import instructor
import pytest
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel, Field

from llamay.store import ModelStore
from tests.serverproc import ServerProc, start_server

pytestmark = pytest.mark.slow

ASK = [{"role": "user", "content": "Extract: Ada Lovelace was 36 years old."}]


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int = Field(ge=0, le=150)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProc, str]]:
    path = ModelStore().resolve(None).path
    with start_server(path, home=tmp_path_factory.mktemp("home"), timeout=600) as s:
        yield s, httpx.get(s.url + "/models", timeout=30).json()["data"][0]["id"]


@pytest.mark.parametrize("mode", [instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA])
def test_extraction_into_a_pydantic_model(served: tuple[ServerProc, str], mode: instructor.Mode) -> None:
    server, model = served
    client = instructor.from_openai(OpenAI(base_url=server.url, api_key="unused", max_retries=0), mode=mode)
    got = client.chat.completions.create(
        model=model, messages=ASK, response_model=Person, temperature=0, max_tokens=60, max_retries=0
    )  # type: ignore[call-overload]
    assert isinstance(got, Person) and got.name.strip()


def test_async_client(served: tuple[ServerProc, str]) -> None:
    server, model = served
    client = instructor.from_openai(AsyncOpenAI(base_url=server.url, api_key="unused", max_retries=0))

    async def ask() -> Person:
        return await client.chat.completions.create(  # type: ignore[no-any-return]
            model=model, messages=ASK, response_model=Person, temperature=0, max_tokens=60, max_retries=0
        )  # type: ignore[call-overload]

    got = asyncio.run(ask())
    assert isinstance(got, Person) and 0 <= got.age <= 150


def test_a_streamed_partial_ends_complete(served: tuple[ServerProc, str]) -> None:
    server, model = served
    client = instructor.from_openai(OpenAI(base_url=server.url, api_key="unused", max_retries=0))
    parts = list(
        client.chat.completions.create_partial(
            model=model, messages=ASK, response_model=Person, temperature=0, max_tokens=60, max_retries=0
        )  # type: ignore[call-overload]
    )
    assert len(parts) > 1
    last = parts[-1]
    assert last.name and last.age is not None
    Person.model_validate(last.model_dump())  # the last partial is the whole object
