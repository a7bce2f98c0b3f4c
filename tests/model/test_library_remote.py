"""`llamay.LLM(url=...)` against a real `llamay serve` process on the tiny model: the same
methods give the same results as in process (greedy output and scores do not depend on
where the engine runs), and server errors arrive as the same LlamayError types."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

import httpx
import pytest
from pydantic import BaseModel, Field

import llamay
from llamay.errors import ContextOverflow, GrammarError, InvalidRequest, Unauthorized
from tests.serverproc import ServerProc, free_port, start_server

GREEDY = {"temperature": 0.0}


class Invoice(BaseModel):
    number: Annotated[str, Field(max_length=12)]
    total: Annotated[int, Field(ge=0, le=9999)]
    currency: Literal["EUR", "USD", "GBP"]


@llamay.tool
def local_time(zone: Literal["UTC", "IST"]) -> str:
    """The time in a zone."""
    return "12:00 " + zone


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, "-ctx", "4096", home=tmp_path_factory.mktemp("home")) as s:
        yield s


@pytest.fixture(scope="module")
def remote(server: ServerProc) -> Iterator[llamay.LLM]:
    with llamay.LLM(url=server.base) as m:
        yield m


@pytest.fixture(scope="module")
def local(tiny_model_path: Path) -> Iterator[llamay.LLM]:
    with llamay.LLM(str(tiny_model_path), ctx=4096) as m:
        yield m


def test_chat_and_stream_match_in_process(remote: llamay.LLM, local: llamay.LLM) -> None:
    assert remote.remote and remote.model == "tiny-llama"
    here = local.chat("Say hello.", system="Be brief.", max_tokens=12, **GREEDY)
    there = remote.chat("Say hello.", system="Be brief.", max_tokens=12, **GREEDY)
    assert there.text == here.text and there.finish_reason == here.finish_reason == "length"
    assert there.usage.prompt_tokens == here.usage.prompt_tokens and there.usage.completion_tokens == 12
    assert there.messages == here.messages and there.timings.total_ms > 0
    stream = remote.stream("Say hello.", system="Be brief.", max_tokens=12, **GREEDY)
    assert "".join(c.text for c in stream) == here.text
    assert stream.result is not None and stream.result.usage.completion_tokens == 12


def test_typed_output_matches_in_process(remote: llamay.LLM, local: llamay.LLM) -> None:
    there = remote.chat("Invoice 4471, total 1,284 EUR.", output=Invoice, **GREEDY)
    assert isinstance(there.parsed, Invoice)
    assert there.parsed == local.chat("Invoice 4471, total 1,284 EUR.", output=Invoice, **GREEDY).parsed
    colours = remote.chat_many(["Colour 1?", "Colour 2?"], output=Literal["red", "blue"], **GREEDY)
    assert [r.parsed for r in colours] == [
        r.parsed for r in local.chat_many(["Colour 1?", "Colour 2?"], output=Literal["red", "blue"], **GREEDY)
    ]


def test_score_and_complete_match_in_process(remote: llamay.LLM, local: llamay.LLM) -> None:
    prompt, conts = "Is this spam? 'WIN A FREE IPHONE NOW' Answer:", [" yes", " no", " maybe"]
    there, here = remote.score(prompt, conts), local.score(prompt, conts)
    for a, b in zip(there, here, strict=True):
        assert a.tokens == b.tokens and a.greedy == b.greedy
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-6)
    assert remote.complete("Once upon a time", max_tokens=8, **GREEDY).text == (
        local.complete("Once upon a time", max_tokens=8, **GREEDY).text
    )


def test_async_and_tools_remote(remote: llamay.LLM, local: llamay.LLM) -> None:
    async def main() -> list[str]:
        results = await asyncio.gather(
            *(remote.achat(f"Count to {i}.", max_tokens=6, **GREEDY) for i in range(3))
        )
        return [r.text for r in results]

    assert asyncio.run(main()) == [
        local.chat(f"Count to {i}.", max_tokens=6, **GREEDY).text for i in range(3)
    ]
    kw = {"tools": [local_time], "tool_choice": "local_time", "run_tools": True, "max_tool_rounds": 1}
    there = remote.chat("Time in Delhi?", max_tokens=200, seed=1, temperature=1.0, **kw)  # type: ignore[arg-type]
    here = local.chat("Time in Delhi?", max_tokens=200, seed=1, temperature=1.0, **kw)  # type: ignore[arg-type]
    assert [c.result for c in there.tool_calls] == [c.result for c in here.tool_calls]
    assert there.tool_calls[0].ran and there.text == here.text


def test_a_context_lives_on_the_server(server: ServerProc, remote: llamay.LLM, local: llamay.LLM) -> None:
    system = "You label support tickets as billing, bug or other. " * 3
    ctx = remote.context(system=system)
    assert ctx.id is not None
    assert httpx.get(f"{server.base}/v1/contexts/{ctx.id}").json()["tokens"] > 30
    first = ctx.chat("Ticket 1: charged twice.", max_tokens=6, **GREEDY)
    assert first.usage.cached >= 30  # the context's tokens were not read again
    second = ctx.chat("Ticket 2: app crashes.", max_tokens=6, **GREEDY)
    assert second.usage.cached >= first.usage.prompt_tokens - 2
    side = ctx.chat("Ticket 3.", keep=False, max_tokens=6, **GREEDY)
    assert len(ctx.messages) == 5 and side.usage.cached >= second.usage.prompt_tokens - 2
    # A turn on the server's context answers as a plain chat in process does.
    assert second.text == local.chat(second.messages[:-1], max_tokens=6, **GREEDY).text
    fork = ctx.fork()
    ids = {ctx.id, fork.id}
    assert fork.id not in (None, ctx.id) and fork.messages == ctx.messages
    fork.close()
    ctx.close()
    assert ctx.id is None and fork.id is None
    listed = {c["id"] for c in httpx.get(f"{server.base}/v1/contexts").json()["data"]}
    assert not ids & listed  # deleted on the server
    with llamay.LLM(url=server.base) as other:
        left = other.context(system="Left open.").id
        assert httpx.get(f"{server.base}/v1/contexts/{left}").status_code == 200
    assert httpx.get(f"{server.base}/v1/contexts/{left}").status_code == 404  # closing the LLM deleted it


def test_server_errors_are_llamay_errors(remote: llamay.LLM) -> None:
    with pytest.raises(ContextOverflow):
        remote.chat("word " * 5000, max_tokens=2)
    with pytest.raises(InvalidRequest) as err:
        remote.chat("hi", temperature=-1)  # refused here, before any request
    assert err.value.param == "temperature"
    with pytest.raises(GrammarError):
        remote.complete("x", output={"type": "string", "pattern": "(?=lookahead)"})


def test_an_unreachable_server_and_a_wrong_key(tiny_model_path: Path, tmp_path: Path) -> None:
    with pytest.raises(llamay.ServerUnreachable):
        llamay.LLM(url=f"http://127.0.0.1:{free_port()}")
    env = {"LLAMAY_API_KEY": "right-key"}
    with start_server(tiny_model_path, "-ctx", "512", home=tmp_path / "home", env=env) as s:
        with llamay.LLM(url=s.base, api_key="wrong") as wrong, pytest.raises(Unauthorized):
            wrong.chat("hi", max_tokens=2)
        with llamay.LLM(url=s.base, api_key="right-key") as right:
            assert right.chat("hi", max_tokens=2).usage.completion_tokens == 2
            assert right.stats()["requests"] >= 1  # admin figures with the admin key
