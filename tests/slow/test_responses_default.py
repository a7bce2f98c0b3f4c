"""The Responses API on the real default model behind a real `llamay serve`: an answer, the
same answer streamed, and a second turn that continues from the server-held first one."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from llamay.store import llamay_home
from tests.serverproc import ServerProc, start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProc]:
    # The real home: the default model is fetched once and reused, as a user would have it.
    with start_server("", home=llamay_home(), timeout=600) as s:
        yield s


def test_responses_answer_stream_and_continue(server: ServerProc) -> None:
    client = openai.OpenAI(
        base_url=server.url, api_key="unused", max_retries=0, timeout=300, _strict_response_validation=True
    )
    ask = "What is the capital of France? Answer in one short sentence."
    first = client.responses.create(model="", input=ask, instructions="You are concise.", temperature=0,
                                    max_output_tokens=60)  # fmt: skip
    assert first.status == "completed" and "paris" in first.output_text.lower()
    assert first.model == "smollm2:135m" and first.usage and first.usage.output_tokens > 0
    with client.responses.stream(model="", input=ask, instructions="You are concise.", temperature=0,
                                 max_output_tokens=60) as stream:  # fmt: skip
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        streamed = stream.get_final_response()
    assert "".join(deltas) == streamed.output_text == first.output_text
    assert client.responses.retrieve(streamed.id).output_text == streamed.output_text
    second = client.responses.create(model="", input="And of Italy?", previous_response_id=first.id,
                                     instructions="You are concise.", temperature=0, max_output_tokens=60)  # fmt: skip
    assert second.status == "completed" and "rome" in second.output_text.lower()
    # Only the new turn was computed: the first turn's prompt came from its context.
    assert second.usage and second.usage.input_tokens_details.cached_tokens == first.usage.input_tokens
    items = client.responses.input_items.list(second.id, order="asc").data
    assert [i.type for i in items] == ["message", "message", "message"]
