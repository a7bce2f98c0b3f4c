"""`llamay serve -embed -rerank` as a real process: encoders beside the chat model."""

from __future__ import annotations

from pathlib import Path

import httpx
import openai

from llamay.convert import convert_bert
from llamay.testing.tiny_bert import write_tiny_bert
from tests.serverproc import start_server


def test_serve_with_embedder_and_reranker(tiny_model_path: Path, tmp_path: Path) -> None:
    embed = convert_bert(write_tiny_bert(tmp_path / "embed-hf"), tmp_path / "embed.gguf").path
    rank = convert_bert(
        write_tiny_bert(tmp_path / "rank-hf", classifier=True, seed=2), tmp_path / "rank.gguf"
    ).path
    with start_server(tiny_model_path, "-embed", str(embed), "-rerank", str(rank), home=tmp_path / "h") as s:
        client = openai.OpenAI(base_url=s.url, api_key="x", max_retries=0)
        out = client.embeddings.create(model="anything", input=["the cat", "a dog"])
        assert len(out.data) == 2 and len(out.data[0].embedding) > 8
        r = httpx.post(s.base + "/v1/rerank", json={"query": "cat", "documents": ["the cat", "a dog"]}).json()
        assert r["method"] == "cross-encoder" and len(r["results"]) == 2
        import ollama

        got = ollama.Client(host=s.base).embed(model="all-minilm", input=["the cat", "a dog"])
        assert len(got.embeddings) == 2
        assert abs(sum(x * x for x in got.embeddings[0]) - 1.0) < 1e-3
        # a client that checks the model list first finds the encoders there
        listed = {m.id: m for m in client.models.list().data}
        names = {"embed", "rank"}
        assert names <= set(listed) and len(listed) == 3
        assert client.models.retrieve("embed").model_dump()["llamay_kind"] == "embed"
        assert client.models.retrieve("rank").model_dump()["llamay_kind"] == "rank"
        oc = ollama.Client(host=s.base)
        assert names <= {m.model for m in oc.list().models}
        shown = oc.show("embed")
        assert shown.capabilities == ["embedding"] and shown.modelinfo["general.architecture"] == "bert"
        assert httpx.post(s.base + "/api/show", json={"model": "no-such"}).status_code == 404
        # the chat model still serves beside them
        chat = client.chat.completions.create(
            model="", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
        assert chat.usage.completion_tokens == 3


def test_serve_refuses_a_reranker_given_as_embedder(tiny_model_path: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    rank = convert_bert(write_tiny_bert(tmp_path / "rank-hf", classifier=True), tmp_path / "rank.gguf").path
    out = subprocess.run(
        [sys.executable, "-m", "llamay", "serve", "-m", str(tiny_model_path), "-embed", str(rank), "-addr", "127.0.0.1:1"],
        capture_output=True, text=True, timeout=120, env={**__import__("os").environ, "LLAMAY_HOME": str(tmp_path / "h")},
    )  # fmt: skip
    assert out.returncode == 1 and "llamay:" in out.stderr
