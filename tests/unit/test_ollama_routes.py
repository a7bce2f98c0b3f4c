"""The Ollama routes that only call the runtime and the store, against fakes of their
interfaces: NDJSON progress, errors in Ollama's shape, and 501 while a feature is missing."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import ollama
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from llamay.api.ollama.routes import ollama_routes
from llamay.api.state import server_state
from llamay.errors import Conflict, ModelNotFound, StoreError

Progress = Callable[[dict[str, Any]], None]


class FakeStore:
    def __init__(self) -> None:
        self.names = {"a:latest"}
        self.calls: list[tuple[Any, ...]] = []

    def list(self) -> list[Any]:
        return []

    def copy(self, source: str, destination: str) -> None:
        if source not in self.names:
            raise ModelNotFound(f"model '{source}' not found", param="model")
        self.names.add(destination)

    def remove(self, name: str) -> None:
        if name not in self.names:
            raise ModelNotFound(f"model '{name}' not found", param="model")
        self.names.discard(name)

    def pull(self, source: str, name: str | None = None, *, progress: Progress, fresh: bool = False) -> None:
        assert threading.current_thread() is not threading.main_thread()  # off the event loop
        self.calls.append(("pull", source, name) + (("fresh",) if fresh else ()))
        progress({"status": "pulling manifest"})
        for done in (0, 5, 10):
            progress({"status": "pulling abc", "digest": "sha256:abc", "total": 10, "completed": done})
        if source == "broken":
            raise StoreError("checksum mismatch for sha256:abc")
        progress({"status": "success"})

    def create(self, name: str, source: str, **kw: Any) -> None:
        self.calls.append(("create", name, source, kw["params"], kw["template"], kw["system"]))
        kw["progress"]({"status": "writing manifest"})


class FakeRuntime:
    def __init__(self, store: Any = None) -> None:
        self.store = store
        self.unloaded: list[str] = []

    def loaded(self) -> list[Any]:
        return []

    async def unload(self, name: str) -> bool:
        self.unloaded.append(name)
        return name == "a:latest"

    async def reset(self) -> list[str]:
        return ["a:latest"]

    async def use(self, name: str, keep_alive: float | None = None) -> Any:
        raise Conflict(f"not enough memory to load '{name}'")

    async def embed(self, name: str, texts: list[str], *, truncate: bool, keep_alive: float | None) -> Any:
        return [[3.0, 4.0]] * len(texts), 7 * len(texts)


def client(runtime: Any) -> TestClient:
    app = Starlette(routes=ollama_routes())
    app.state = server_state(runtime)
    return TestClient(app)


@pytest.fixture()
def store() -> FakeStore:
    return FakeStore()


def lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_pull_streams_progress_as_ndjson(store: FakeStore) -> None:
    r = client(FakeRuntime(store)).post("/api/pull", json={"model": "hf:org/repo/m.gguf"})
    assert r.headers["content-type"].startswith("application/x-ndjson")
    got = lines(r.text)
    assert got[0] == {"status": "pulling manifest"} and got[-1] == {"status": "success"}
    assert [x["completed"] for x in got if "completed" in x] == [0, 5, 10]
    assert [ollama.ProgressResponse(**x).status for x in got][-1] == "success"  # the client's own model
    assert store.calls == [("pull", "hf:org/repo/m.gguf", None)]


def test_pull_once_and_pull_errors(store: FakeStore) -> None:
    c = client(FakeRuntime(store))
    assert c.post("/api/pull", json={"model": "x", "name": "y", "stream": False}).json() == {
        "status": "success"
    }
    assert store.calls[-1] == ("pull", "x", "y")
    c.post("/api/pull", json={"model": "x", "stream": False, "fresh": True})
    assert store.calls[-1] == ("pull", "x", None, "fresh")
    assert lines(c.post("/api/pull", json={"model": "broken"}).text)[-1] == {
        "error": "checksum mismatch for sha256:abc"
    }
    r = c.post("/api/pull", json={"model": "broken", "stream": False})
    assert r.status_code == 502 and r.json() == {"error": "checksum mismatch for sha256:abc"}


def test_copy_and_delete(store: FakeStore) -> None:
    c = client(FakeRuntime(store))
    assert c.post("/api/copy", json={"source": "a:latest", "destination": "b"}).status_code == 200
    r = c.post("/api/copy", json={"source": "nope", "destination": "b"})
    assert r.status_code == 404 and r.json() == {"error": "model 'nope' not found"}
    assert c.request("DELETE", "/api/delete", json={"model": "b"}).status_code == 200
    assert c.request("DELETE", "/api/delete", json={"model": "b"}).status_code == 404
    assert c.post("/api/copy", json={"source": "a"}).json() == {"error": "'destination' is required"}


def test_create_from_a_model(store: FakeStore) -> None:
    c = client(FakeRuntime(store))
    body = {"model": "mario", "from": "a", "system": "You are Mario.", "parameters": {"temperature": 0.2}}
    got = lines(c.post("/api/create", json=body).text)
    assert got == [{"status": "writing manifest"}, {"status": "success"}]
    assert store.calls == [("create", "mario", "a", {"temperature": 0.2}, None, "You are Mario.")]
    for bad, param in (({"template": "{{ .System }} {{ .Prompt }}"}, "template"), ({"files": {"a": "b"}}, "files"),
                       ({"from": None}, "from")):  # fmt: skip
        r = c.post("/api/create", json={**body, **bad})
        assert r.status_code == 400 and param in r.json()["error"]


def test_missing_features_are_501_saying_what() -> None:
    c = client(FakeRuntime(store=None))
    r = c.post("/api/copy", json={"source": "a", "destination": "b"})
    assert r.status_code == 501 and "model store" in r.json()["error"]
    bare = client(object())
    r = bare.post("/api/reset")
    assert r.status_code == 501 and "runtime.reset" in r.json()["error"]
    r = bare.post("/api/embed", json={"model": "e", "input": "x"})
    assert r.status_code == 501 and "runtime.embed" in r.json()["error"]


def test_runtime_routes(store: FakeStore) -> None:
    c = client(FakeRuntime(store))
    assert c.post("/api/reset").json() == {"status": "success", "unloaded": ["a:latest"]}
    assert c.post("/api/unload", json={"model": "a:latest"}).json() == {"status": "success", "unloaded": True}
    assert c.post("/api/unload", json={"model": "b"}).json()["unloaded"] is False
    assert c.post("/api/embeddings", json={"model": "e", "prompt": "x"}).json() == {"embedding": [3.0, 4.0]}
    r = c.post("/api/push", json={"model": "a"})
    assert r.status_code == 501 and "push" in r.json()["error"]
    r = c.post("/api/load", json={"model": "big"})
    assert r.status_code == 409 and r.json() == {"error": "not enough memory to load 'big'"}
    e = c.post("/api/embed", json={"model": "e", "input": ["x", "y"], "dimensions": 1}).json()
    assert e["embeddings"] == [[1.0], [1.0]] and e["prompt_eval_count"] == 14 and e["model"] == "e"
    full = ollama.EmbedResponse(**c.post("/api/embed", json={"model": "e", "input": "x"}).json())
    assert full.embeddings == [[0.6, 0.8]]
    assert c.post("/api/embed", json={"model": "e", "input": [1]}).status_code == 400
    assert c.get("/api/tags").json() == {"models": []} and c.get("/api/ps").json() == {"models": []}
    assert c.post("/api/show", json={"model": "zzz"}).status_code == 404
