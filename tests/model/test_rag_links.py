"""A symbolic link in a public folder does not publish what it points to: a link to the
keys file and one to a restricted file are not indexed, and through a real server a key
outside the group finds neither while the group's own key still finds its passage."""

from __future__ import annotations

import concurrent.futures as cf
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamay.cli.main import main
from llamay.convert import convert_bert
from llamay.testing.tiny_bert import write_tiny_bert
from tests.serverproc import start_server

FIN_KEY, ENG_KEY = "key-finance-alice", "key-eng-bob"


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("rag-links")
    embed = convert_bert(write_tiny_bert(root / "embed-hf"), root / "embed.gguf").path
    keys = root / "keys.json"
    keys.write_text(json.dumps({"keys": [
        {"key": FIN_KEY, "principal": "alice", "groups": ["finance"]},
        {"key": ENG_KEY, "principal": "bob", "groups": ["eng"]},
    ]}))  # fmt: skip
    docs = root / "docs"
    (docs / "public").mkdir(parents=True)
    (docs / "finance").mkdir()
    (docs / "finance/.llamay-access").write_text("finance\n")
    (docs / "finance/q3.txt").write_text(
        "The merger with Globex closes in March; the terms stay confidential.\n"
    )
    (docs / "public/guide.md").write_text("# Guide\n\nForking a context copies no pages.\n")
    (docs / "public/keys.txt").symlink_to(keys)
    (docs / "public/q3.txt").symlink_to(docs / "finance/q3.txt")
    (docs / "public/all").symlink_to(docs / "finance", target_is_directory=True)
    index = root / "index.sqlite"
    assert main(["index", "build", str(docs), "-o", str(index), "-embed", str(embed), "-threads", "1"]) == 0
    args = ["-index", str(index), "-embed", str(embed), "-keys", str(keys), "-threads", "1"]
    with start_server(tiny_model_path, *args, home=root / "home") as proc:
        yield proc.base


def retrieve(base: str, key: str, query: str) -> list[dict[str, Any]]:
    r = httpx.post(f"{base}/v1/retrieve", json={"query": query, "top_k": 20},
                   headers={"Authorization": f"Bearer {key}"}, timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text
    data: list[dict[str, Any]] = r.json()["data"]
    return data


def test_links_publish_nothing(server: str) -> None:
    queries = ["merger Globex confidential terms", "key-finance-alice principal keys", "alice finance"]
    with cf.ThreadPoolExecutor(2) as pool:
        victim = pool.submit(retrieve, server, FIN_KEY, "merger Globex confidential terms")
        seen = [hit for q in queries for hit in retrieve(server, ENG_KEY, q)]
        own = victim.result()
    assert seen and {h["source"] for h in seen} == {"public/guide.md"}, seen
    assert not any("Globex" in h["text"] or "key-" in h["text"] for h in seen)
    assert [h["source"] for h in own if "Globex" in h["text"]] == ["finance/q3.txt"]
