"""Answers from your own documents, end to end on a tiny BERT embedding GGUF (its similarities
are random: these tests check keyword matches, byte-exact citations and access rules, not
semantic quality).

A folder with ``public/``, a root file and a ``finance/`` folder (``.llamay-access``: finance)
is indexed with ``llamay index build`` and served by a real ``llamay serve -index INDEX -embed
GGUF -keys KEYS`` on 127.0.0.1, with a keys file of two keys, one in group finance and one not.
What needs other server state (no index, a reranker) runs on the app in-process.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from starlette.testclient import TestClient

from llamay.api.app import create_app
from llamay.auth import KeyRing
from llamay.cli.main import main
from llamay.convert import convert_bert
from llamay.embed import Encoder, embed_texts_sync, load_encoders
from llamay.rag import ADMIN, EncoderEmbedder, build_index, open_index
from llamay.rag.store import IndexStore
from llamay.runtime import Runtime
from llamay.testing.tiny_bert import write_tiny_bert
from tests.serverproc import start_server

FIN_KEY, ENG_KEY = "key-finance-alice", "key-eng-bob"

FILES = {
    "public/guide.md": (
        "# Contexts\n\nHow do I fork a context? Forking copies no pages: the fork shares them.\n\n"
        "The best route from the city to the road map server is the quick one.\n\n"
        "Caf\u00e9 cr\u00e8me, na\u00efve r\u00e9sum\u00e9 and 日本語 text sit here too.\n"
    ),
    "public/page.html": "<html><body><h1>Search</h1><p>The model ranks each document by score.</p></body></html>",
    "notes.txt": "Hello world. A good day for the quick brown fox and the lazy dog.\n",
    "finance/.llamay-access": "finance\n",
    "finance/q3.txt": (
        "Quarterly revenue grew twelve percent.\n\n"
        "The merger with Globex closes in March; the merger terms stay confidential.\n"
    ),
}


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rag-encoders")
    embed = convert_bert(write_tiny_bert(root / "embed-hf"), root / "embed.gguf").path
    rank = convert_bert(write_tiny_bert(root / "rank-hf", classifier=True, seed=2), root / "rank.gguf").path
    return {"embed": embed, "rank": rank}


@pytest.fixture(scope="module")
def encoders(gguf: dict[str, Path]) -> Iterator[dict[str, Encoder]]:
    loaded = load_encoders(str(gguf["embed"]), str(gguf["rank"]), threads=1)
    yield loaded
    for e in loaded.values():
        e.close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rag") / "docs"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def index_path(corpus: Path, gguf: dict[str, Path]) -> Path:
    path = corpus.parent / "index.sqlite"
    assert (
        main(["index", "build", str(corpus), "-o", str(path), "-embed", str(gguf["embed"]), "-threads", "1"])
        == 0
    )
    return path


@pytest.fixture(scope="module")
def keys_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    keys.write_text(
        json.dumps(
            {
                "keys": [
                    {"key": FIN_KEY, "principal": "alice", "groups": ["finance"]},
                    {"key": ENG_KEY, "principal": "bob", "groups": ["eng"]},
                ]
            }
        )
    )
    return keys


@pytest.fixture(scope="module")
def server(
    tiny_model_path: Path,
    index_path: Path,
    gguf: dict[str, Path],
    keys_file: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The base URL of `llamay serve -index INDEX -embed GGUF -keys KEYS`."""
    args = ["-index", str(index_path), "-embed", str(gguf["embed"]), "-keys", str(keys_file), "-threads", "1"]
    with start_server(tiny_model_path, *args, home=tmp_path_factory.mktemp("home")) as proc:
        yield proc.base


@pytest.fixture()
def inproc(keys_file: Path) -> Iterator[tuple[Any, TestClient]]:
    """The llamay app in-process (no lifespan: nothing to load or close but what tests set)."""
    app = create_app(Runtime(), KeyRing.load(keys_file, env={}))
    # Not entered as a context manager: the lifespan would close the shared encoders.
    yield app, TestClient(app, base_url="http://127.0.0.1")


def retrieve(base: str, key: str | None, body: dict[str, Any], status: int = 200) -> Any:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    r = httpx.post(f"{base}/v1/retrieve", json=body, headers=headers, timeout=60)
    assert r.status_code == status, r.text
    return r.json()


def assert_exact_citations(corpus: Path, data: Sequence[dict[str, Any]]) -> None:
    for hit in data:
        raw = (corpus / hit["source"]).read_bytes()
        if hit["source"].endswith((".txt", ".md")):
            assert raw[hit["start"] : hit["end"]].decode("utf-8") == hit["text"]
        else:  # HTML: the region from the passage's first word to its last
            region = raw[hit["start"] : hit["end"]].decode("utf-8")
            assert region.startswith(hit["text"].split()[0]) and region.endswith(hit["text"].split()[-1])


def test_keyword_match_ranks_first_with_exact_citation(server: str, corpus: Path) -> None:
    body = retrieve(server, FIN_KEY, {"query": "merger terms", "top_k": 10})
    assert body["object"] == "list" and body["method"] == "hybrid"
    first = body["data"][0]
    assert first["source"] == "finance/q3.txt" and "merger terms stay confidential" in first["text"]
    assert_exact_citations(corpus, body["data"])
    scores = [d["score"] for d in body["data"]]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 2 / 61
    guide = retrieve(server, ENG_KEY, {"query": "na\u00efve r\u00e9sum\u00e9 日本語", "top_k": 1})["data"][0]
    assert guide["source"] == "public/guide.md"
    assert_exact_citations(corpus, [guide])


def public_only_search(index_path: Path, tmp_path: Path, encoder: Encoder, query: str, top_k: int) -> Any:
    """The same search over a copy of the index that never held the restricted documents."""
    copy = tmp_path / "public-only.sqlite"
    shutil.copy(index_path, copy)
    store = IndexStore.open(copy)
    with store.transaction():
        for doc in store.documents().values():
            if not doc.label.public:
                store.delete_document(doc.id)
    store.close()
    index = open_index(copy)
    try:
        qvec = embed_texts_sync(encoder, [query], True)[0][0]
        hits = index.search(query, qvec, ADMIN, limit=top_k, depth=100)
        return [h.as_json() for h in hits]
    finally:
        index.close()


@pytest.mark.parametrize("query", ["merger terms", "quarterly revenue", "the quick fox", "fork a context"])
def test_restricted_passages_reach_only_their_group(
    server: str, index_path: Path, tmp_path: Path, encoders: dict[str, Encoder], corpus: Path, query: str
) -> None:
    alice = retrieve(server, FIN_KEY, {"query": query, "top_k": 100})["data"]
    bob = retrieve(server, ENG_KEY, {"query": query, "top_k": 100})["data"]
    assert any(d["source"] == "finance/q3.txt" for d in alice)
    assert not any(d["source"].startswith("finance/") for d in bob)
    assert bob == public_only_search(index_path, tmp_path, encoders["embed"], query, 100)
    assert_exact_citations(corpus, alice + bob)


def test_request_errors(server: str) -> None:
    retrieve(server, None, {"query": "x"}, 401)
    for body, param in [
        ({}, "query"),
        ({"query": "x", "top_k": 0}, "top_k"),
        ({"query": "x", "top_k": 101}, "top_k"),
    ]:
        assert retrieve(server, ENG_KEY, body, 400)["error"]["param"] == param
    assert retrieve(server, ENG_KEY, {"query": "   "}, 400)["error"]["param"] == "query"
    high = retrieve(server, ENG_KEY, {"query": "fork", "min_score": 0.02})["data"]
    assert high and all(d["score"] >= 0.02 for d in high)


def test_without_an_index_retrieve_is_a_404(inproc: tuple[Any, TestClient]) -> None:
    _, client = inproc
    r = client.post("/v1/retrieve", json={"query": "x"}, headers={"Authorization": f"Bearer {ENG_KEY}"})
    assert r.status_code == 404
    assert "no index is loaded; start the server with -index" in r.json()["error"]["message"]


def test_reranker_reorders_readable_passages(
    inproc: tuple[Any, TestClient], index_path: Path, encoders: dict[str, Encoder]
) -> None:
    app, client = inproc
    app.state.encoders = dict(encoders)
    app.state.index = open_index(index_path)
    try:
        got = {
            key: client.post(
                "/v1/retrieve",
                json={"query": "merger terms", "top_k": 10},
                headers={"Authorization": f"Bearer {key}"},
            ).json()
            for key in (FIN_KEY, ENG_KEY)
        }
    finally:
        app.state.index.close()
    for body in got.values():
        assert body["method"] == "hybrid+rerank"
        assert all(0 < d["score"] < 1 for d in body["data"])
        assert [d["score"] for d in body["data"]] == sorted((d["score"] for d in body["data"]), reverse=True)
    assert any(d["source"] == "finance/q3.txt" for d in got[FIN_KEY]["data"])
    assert not any(d["source"].startswith("finance/") for d in got[ENG_KEY]["data"])


class Counting:
    def __init__(self, inner: EncoderEmbedder) -> None:
        self.inner = inner
        self.texts: list[str] = []
        self.name, self.dim = inner.name, inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.texts += texts
        return self.inner.embed(texts)


def test_rebuild_after_an_edit_embeds_only_that_file(
    server: str, corpus: Path, index_path: Path, encoders: dict[str, Encoder]
) -> None:
    counting = Counting(EncoderEmbedder(encoders["embed"]))
    report = build_index(corpus, index_path, counting)
    assert counting.texts == [] and report.unchanged == 4
    (corpus / "notes.txt").write_text("Hello again. The zebra crossing moved north.\n", encoding="utf-8")
    report = build_index(corpus, index_path, counting)
    assert report.changed == ["notes.txt"] and report.unchanged == 3
    assert counting.texts == ["Hello again. The zebra crossing moved north."]
    # The running server sees the new build without a restart.
    first = retrieve(server, ENG_KEY, {"query": "zebra crossing", "top_k": 3})["data"][0]
    assert first["source"] == "notes.txt" and first["text"] == counting.texts[0]
    assert_exact_citations(corpus, [first])


def test_cli_retrieve(index_path: Path, gguf: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    args = ["retrieve", "merger terms", "-index", str(index_path), "-threads", "1", "-json", "-k", "10"]
    assert main([*args, "-groups", "eng"]) == 0
    outsider = json.loads(capsys.readouterr().out)
    assert outsider["data"] and not any(d["source"].startswith("finance/") for d in outsider["data"])
    assert main([*args, "-groups", "finance,eng"]) == 0
    assert json.loads(capsys.readouterr().out)["data"][0]["source"] == "finance/q3.txt"
    assert main(["retrieve", "merger", "-index", str(index_path), "-threads", "1"]) == 0
    assert capsys.readouterr().out.startswith("1. finance/q3.txt  bytes ")
    assert main(["retrieve", "x", "-index", str(index_path.parent / "missing.sqlite")]) == 1
    assert "no index at" in capsys.readouterr().err
