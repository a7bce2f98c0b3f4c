"""Agent frameworks on their everyday paths against the real default model in a real `llamay
serve`: openai-agents (Chat Completions and Responses), pydantic-ai and litellm (its OpenAI and
Ollama providers). Greedy sampling, and a forced tool call or a schema wherever the small model
must produce a shape: the grammar guarantees it, so what is checked is how each framework reads
llamay's replies. The table these back is docs/clients.md."""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel

from llamay.store import ModelStore
from tests.serverproc import ServerProc, start_server

# litellm fetches a model price list from the network on import, retrying for ~10 s; there is none.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm  # noqa: E402
from agents import (  # noqa: E402
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model as AgentsModel  # noqa: E402
from openai.types.responses import ResponseTextDeltaEvent  # noqa: E402
from pydantic_ai import Agent as PaiAgent  # noqa: E402
from pydantic_ai import RunContext  # noqa: E402
from pydantic_ai.capabilities import AbstractCapability  # noqa: E402
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

pytestmark = pytest.mark.slow

set_tracing_disabled(True)  # openai-agents would upload traces to OpenAI


def sync(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """An async test run on its own event loop (pytest's fixtures still fill its arguments)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


class City(BaseModel):
    name: str
    country: str


class Weather(BaseModel):
    city: str
    temperature_c: int


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@dataclass
class Served:
    server: ServerProc
    model: str  # the name the server answers to (a model served from a file is named by its hash)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path = ModelStore().resolve(None).path  # fetched once into the real home
    # Its own home: a server holds its home's context store, and other servers may hold the real one.
    with start_server(path, home=tmp_path_factory.mktemp("home"), timeout=600) as s:
        name = httpx.get(s.url + "/models", timeout=30).json()["data"][0]["id"]
        yield Served(s, name)


def async_client(served: Served) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=served.server.url, api_key="unused", max_retries=0, timeout=300)


# -- openai-agents ----------------------------------------------------------------------------


def agents_model(served: Served, api: str) -> AgentsModel:
    if api == "chat":
        return OpenAIChatCompletionsModel(model=served.model, openai_client=async_client(served))
    return OpenAIResponsesModel(model=served.model, openai_client=async_client(served))


@pytest.mark.parametrize("api", ["chat", "responses"])
@sync
async def test_openai_agents_calls_a_function_tool(served: Served, api: str) -> None:
    cities: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        cities.append(city)
        return f"It is 21 C and sunny in {city}."

    agent = Agent(
        name="weather",
        instructions="Use the tool to answer.",
        tools=[get_weather],
        model=agents_model(served, api),
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=60),
        tool_use_behavior="stop_on_first_tool",
    )
    result = await Runner.run(agent, "What is the weather in Paris?")
    assert len(cities) == 1 and cities[0].strip()
    assert result.final_output == f"It is 21 C and sunny in {cities[0]}."


@pytest.mark.parametrize("api", ["chat", "responses"])
@sync
async def test_openai_agents_structured_output(served: Served, api: str) -> None:
    agent = Agent(
        name="geo",
        instructions="Answer the question.",
        model=agents_model(served, api),
        output_type=City,
        model_settings=ModelSettings(temperature=0, max_tokens=60),
    )
    result = await Runner.run(agent, "Which city is the Eiffel Tower in?")
    assert isinstance(result.final_output, City)
    assert result.final_output.name.strip() and result.final_output.country.strip()


@pytest.mark.parametrize("api", ["chat", "responses"])
@sync
async def test_openai_agents_streams(served: Served, api: str) -> None:
    agent = Agent(
        name="greeter",
        instructions="Be brief.",
        model=agents_model(served, api),
        model_settings=ModelSettings(temperature=0, max_tokens=80),
    )
    run = Runner.run_streamed(agent, "Say hello.")
    deltas = [
        ev.data.delta
        async for ev in run.stream_events()
        if ev.type == "raw_response_event" and isinstance(ev.data, ResponseTextDeltaEvent)
    ]
    assert len(deltas) > 1
    assert "".join(deltas) == run.final_output and run.final_output.strip()


# -- pydantic-ai ----------------------------------------------------------------------------


def pai_model(served: Served) -> OpenAIChatModel:
    provider = OpenAIProvider(base_url=served.server.url, api_key="unused")
    return OpenAIChatModel(served.model, provider=provider)


@dataclass
class ToolThenOutput(AbstractCapability[Any]):
    """Forces get_weather on the first step and the output tool after it: pydantic-ai's way to
    vary tool_choice per step (a static "required" would never let the run end)."""

    def get_model_settings(self) -> Any:
        def per_step(ctx: RunContext[Any]) -> dict[str, Any]:
            return {"tool_choice": ["get_weather"] if ctx.run_step == 1 else ["final_result"]}

        return per_step


@sync
async def test_pydantic_ai_structured_output_through_its_output_tool(served: Served) -> None:
    agent = PaiAgent(pai_model(served), output_type=City, model_settings={"temperature": 0, "max_tokens": 80})
    result = await agent.run("Which city is the Eiffel Tower in?")
    assert isinstance(result.output, City) and result.output.name.strip()
    # The default output mode: a call of its final_result tool, with tool_choice "required".
    calls = [p for m in result.all_messages() if isinstance(m, ModelResponse) for p in m.parts]
    (call,) = calls
    assert isinstance(call, ToolCallPart) and call.tool_name == "final_result"


def weather_agent(served: Served, cities: list[str]) -> PaiAgent[None, Weather]:
    agent = PaiAgent(
        pai_model(served),
        output_type=Weather,
        model_settings={"temperature": 0, "max_tokens": 80},
        capabilities=[ToolThenOutput()],
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        cities.append(city)
        return f"21 C in {city}"

    return agent


@sync
async def test_pydantic_ai_calls_a_tool_then_answers_in_the_model(served: Served) -> None:
    cities: list[str] = []
    result = await weather_agent(served, cities).run("What is the weather in Paris?")
    assert len(cities) == 1 and cities[0].strip()
    assert isinstance(result.output, Weather)
    returns = [p for m in result.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returns[0].tool_name == "get_weather" and returns[0].content == f"21 C in {cities[0]}"


@sync
async def test_pydantic_ai_run_stream(served: Served) -> None:
    agent = PaiAgent(pai_model(served), model_settings={"temperature": 0, "max_tokens": 60})
    async with agent.run_stream("Say hello.") as run:
        deltas = [d async for d in run.stream_text(delta=True)]
    assert len(deltas) > 1 and "".join(deltas).strip()
    cities: list[str] = []
    async with weather_agent(served, cities).run_stream("What is the weather in Rome?") as run:
        outputs = [o async for o in run.stream_output()]
    assert len(cities) == 1 and isinstance(outputs[-1], Weather)


# -- litellm --------------------------------------------------------------------------------

MESSAGES = [{"role": "user", "content": "Say hello."}]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def openai_route(served: Served) -> dict[str, Any]:
    return {"model": f"openai/{served.model}", "api_base": served.server.url, "api_key": "unused"}


def ollama_route(served: Served) -> dict[str, Any]:
    return {"model": f"ollama_chat/{served.model}", "api_base": served.server.base}


@pytest.mark.parametrize("route", [openai_route, ollama_route], ids=["openai", "ollama_chat"])
def test_litellm_completion_and_stream(served: Served, route: Any) -> None:
    whole = litellm.completion(**route(served), messages=MESSAGES, temperature=0, max_tokens=40)
    text = whole.choices[0].message.content
    assert text and text.strip()
    assert whole.usage.prompt_tokens > 0 and whole.usage.completion_tokens > 0
    chunks = litellm.completion(**route(served), messages=MESSAGES, temperature=0, max_tokens=40, stream=True)
    parts = [c.choices[0].delta.content or "" for c in chunks]
    assert len(parts) > 1 and "".join(parts) == text  # greedy: the same reply either way


def test_litellm_forced_tool_call(served: Served) -> None:
    r = litellm.completion(
        **openai_route(served),
        messages=ASK_WEATHER,
        tools=[WEATHER_TOOL],
        tool_choice="required",
        temperature=0,
        max_tokens=60,
    )
    assert r.choices[0].finish_reason == "tool_calls"
    (call,) = r.choices[0].message.tool_calls
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)


def test_litellm_structured_output(served: Served) -> None:
    for route in (openai_route, ollama_route):
        r = litellm.completion(
            **route(served),
            messages=[{"role": "user", "content": "Which city is the Eiffel Tower in?"}],
            response_format=City,
            temperature=0,
            max_tokens=60,
        )
        City.model_validate_json(r.choices[0].message.content)


@sync
async def test_litellm_acompletion(served: Served) -> None:
    r = await litellm.acompletion(**openai_route(served), messages=MESSAGES, temperature=0, max_tokens=20)
    assert (r.choices[0].message.content or "").strip()
