"""The Responses API's `file_search` tool on a real `llamay serve -index INDEX -embed GGUF
-keys KEYS`, through the official openai client with strict response validation.

A folder with a public guide and two restricted folders (finance/ for group finance, eng/
for group eng) is indexed into `docs.sqlite` (vector store id "docs") with a tiny random
BERT embedder: its similarities mean nothing, but the corpus is small enough that every
passage a key may read is among its results, so what each key gets is known exactly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from llamay.api.openai.responses_search import passages_text
from llamay.cli.main import main
from llamay.convert import convert_bert
from llamay.testing.tiny_bert import write_tiny_bert
from tests.serverproc import ServerProc, start_server

FIN_KEY, ENG_KEY = "key-fin-alice", "key-eng-bob"
FILES = {
    "public/guide.md": "# Guide\n\nThe merger desk answers questions about forks and contexts.\n",
    "finance/.llamay-access": "finance\n",
    "finance/q3.txt": "The merger with Globex closes in March; its terms stay confidential.\n",
    "eng/.llamay-access": "eng\n",
    "eng/design.txt": "The merger of the two build systems lands in the next release.\n",
}
QUESTION = "When does the merger with Globex close?"
TOOL: Any = {"type": "file_search", "vector_store_ids": ["docs"]}
RESULTS = ["file_search_call.results"]


@pytest.fixture(scope="module")
def index_and_embedder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("fs")
    embed = convert_bert(write_tiny_bert(root / "embed-hf"), root / "embed.gguf").path
    docs = root / "docs"
    for rel, text in FILES.items():
        (docs / rel).parent.mkdir(parents=True, exist_ok=True)
        (docs / rel).write_text(text, encoding="utf-8")
    index = root / "docs.sqlite"
    assert main(["index", "build", str(docs), "-o", str(index), "-embed", str(embed), "-threads", "1"]) == 0
    return index, embed


@pytest.fixture(scope="module")
def server(
    tiny_model_path: Path, index_and_embedder: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProc]:
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": FIN_KEY, "principal": "alice", "groups": ["finance"]},
                                         {"key": ENG_KEY, "principal": "bob", "groups": ["eng"]}]}))  # fmt: skip
    index, embed = index_and_embedder
    args = ["-ctx", "4096", "-index", str(index), "-embed", str(embed), "-keys", str(keys), "-threads", "1"]
    with start_server(tiny_model_path, *args, home=tmp_path_factory.mktemp("home")) as s:
        yield s


def client_for(s: ServerProc, key: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=s.url, api_key=key, max_retries=0, timeout=120, _strict_response_validation=True
    )


def ask(c: openai.OpenAI, include: list[Any] | None = None, **kw: Any) -> Any:
    args: dict[str, Any] = {"input": QUESTION, "tools": [TOOL], "max_output_tokens": 3, "temperature": 0}
    return c.responses.create(model="", **({"include": include} if include else {}), **{**args, **kw})


def test_results_only_when_included(server: ServerProc) -> None:
    c = client_for(server, FIN_KEY)
    r = ask(c, RESULTS)
    call = r.output[0]
    assert call.type == "file_search_call" and call.status == "completed" and call.queries == [QUESTION]
    assert r.output[1].type == "message"
    assert call.results is not None
    files = {res.file_id for res in call.results}
    assert files == {"public/guide.md", "finance/q3.txt"}
    for res in call.results:
        assert res.filename == Path(res.file_id).name and res.score is not None and res.score > 0
        assert res.attributes is not None
        start, end = int(res.attributes["start"]), int(res.attributes["end"])
        assert FILES[res.file_id].encode()[start:end].decode().strip() == (res.text or "").strip()
    assert c.responses.retrieve(r.id) == r
    bare = ask(c)
    assert bare.output[0].type == "file_search_call" and bare.output[0].results is None
    assert bare.output[0].queries == [QUESTION]
    # The tool is echoed as given (with the defaults filled in).
    assert bare.tools[0].type == "file_search" and bare.tools[0].vector_store_ids == ["docs"]
    # The prompt holds the passages whether or not the response shows them.
    assert bare.usage and r.usage and bare.usage.input_tokens == r.usage.input_tokens
    # tool_choice "none": no search runs.
    off = ask(c, RESULTS, tool_choice="none")
    assert [o.type for o in off.output] == ["message"]
    assert off.usage and off.usage.input_tokens < r.usage.input_tokens


def test_each_key_finds_only_what_it_may_read(server: ServerProc) -> None:
    got = {}
    for key in (FIN_KEY, ENG_KEY):
        c = client_for(server, key)
        r = ask(c, RESULTS)
        results = r.output[0].results
        got[key] = {res.file_id for res in results}
        # The prompt is the question with exactly these passages: the same number of tokens
        # as the same text sent without the tool.
        shown = [res.model_dump() for res in results]
        plain = c.responses.create(model="", input=QUESTION + "\n\n" + passages_text(shown),
                                   max_output_tokens=1, temperature=0)  # fmt: skip
        assert plain.usage and r.usage and plain.usage.input_tokens == r.usage.input_tokens
    assert got[FIN_KEY] == {"public/guide.md", "finance/q3.txt"}
    assert got[ENG_KEY] == {"public/guide.md", "eng/design.txt"}
    # /v1/retrieve names the index by the same id.
    body = httpx.post(server.url + "/retrieve", json={"query": "merger"}, timeout=60,
                      headers={"Authorization": f"Bearer {ENG_KEY}"}).json()  # fmt: skip
    assert body["index"] == "docs"


def test_stream_events_in_order(server: ServerProc) -> None:
    c = client_for(server, FIN_KEY)
    events = list(ask(c, RESULTS, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    types = [e.type for e in events]
    assert types[:7] == [
        "response.created", "response.in_progress", "response.output_item.added",
        "response.file_search_call.in_progress", "response.file_search_call.searching",
        "response.file_search_call.completed", "response.output_item.done",
    ]  # fmt: skip
    assert types[7] == "response.output_item.added" and types[-1] == "response.incomplete"
    added, done = events[2], events[6]
    assert added.type == "response.output_item.added" and added.item.type == "file_search_call"
    assert added.item.status == "in_progress" and added.item.results is None
    assert done.type == "response.output_item.done" and done.item.type == "file_search_call"
    assert done.item.results
    assert {res.file_id for res in done.item.results} == {"public/guide.md", "finance/q3.txt"}
    final = events[-1].response  # type: ignore[union-attr]
    assert final.output[0] == done.item and final == c.responses.retrieve(final.id)


def test_previous_response_and_call_items_as_input(server: ServerProc) -> None:
    c = client_for(server, FIN_KEY)
    first = ask(c, max_output_tokens=4)
    second = ask(c, input="And its terms?", previous_response_id=first.id)
    assert second.output[0].type == "file_search_call" and second.output[0].queries == ["And its terms?"]
    # The first turn's passages are in the prompt again, as in the context it left: only the
    # new turn is computed.
    assert second.usage and second.usage.input_tokens_details.cached_tokens > 0
    listed = c.responses.input_items.list(second.id, order="asc").data
    assert [i.type for i in listed] == ["message", "file_search_call", "message", "message"]
    # A conversation given whole, file_search_call item and all, is accepted; without the
    # tool, the item's passages reach the prompt as they do with it.
    with_results = ask(c, RESULTS)
    call = with_results.output[0].model_dump(exclude_none=False)
    given = [{"role": "user", "content": QUESTION}, call, {"role": "assistant", "content": "March."},
             {"role": "user", "content": "Thanks."}]  # fmt: skip
    r = c.responses.create(model="", input=given, max_output_tokens=1, temperature=0)
    assert r.status in ("completed", "incomplete")
    items = c.responses.input_items.list(r.id, order="asc").data
    assert items[1].type == "file_search_call" and items[1].results == with_results.output[0].results
    # item_references to the first turn's items bring the passages its search found, though
    # its item shows none: the same prompt as the conversation given whole with them.
    asked = c.responses.input_items.list(first.id).data[0]
    refs = [{"type": "item_reference", "id": asked.id}, {"type": "item_reference", "id": first.output[0].id},
            {"role": "user", "content": "Thanks."}]  # fmt: skip
    whole = [{"role": "user", "content": QUESTION}, call, {"role": "user", "content": "Thanks."}]
    bare = [*whole[:1], {**call, "results": None}, *whole[2:]]
    tokens = [
        c.responses.create(model="", input=given, max_output_tokens=1, temperature=0).usage.input_tokens  # type: ignore[union-attr]
        for given in (refs, whole, bare)
    ]
    assert tokens[0] == tokens[1] > tokens[2]


def test_unknown_store_and_refusals(server: ServerProc) -> None:
    url, auth = server.url + "/responses", {"Authorization": f"Bearer {FIN_KEY}"}
    cases: list[tuple[Any, int, str]] = [
        ({**TOOL, "vector_store_ids": ["docs", "vs_other"]}, 404, "tools[0].vector_store_ids[1]"),
        ({**TOOL, "filters": {"type": "eq", "key": "k", "value": "v"}}, 400, "tools[0].filters"),
        ({**TOOL, "ranking_options": {"hybrid_search": {"embedding_weight": 1, "text_weight": 1}}}, 400,
         "tools[0].ranking_options.hybrid_search"),
    ]  # fmt: skip
    for tool, status, param in cases:
        r = httpx.post(url, json={"input": QUESTION, "tools": [tool]}, headers=auth, timeout=60)
        assert r.status_code == status, r.text
        assert r.json()["error"]["param"] == param and r.json()["error"]["message"]


def test_no_index_is_a_clear_400(tiny_model_path: Path, tmp_path: Path) -> None:
    with start_server(tiny_model_path, home=tmp_path / "home") as s:
        c = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0, timeout=60)
        with pytest.raises(openai.BadRequestError) as err:
            ask(c, RESULTS)
        body: Any = err.value.body
        assert body["param"] == "tools[0]" and "-index" in body["message"]
