"""`llamay pull/list/show/cp/rm/create/ps/stop`: on the store directly when no server answers,
and over Ollama's routes against a fake server on 127.0.0.1 when one does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from llamay.cli.main import main
from llamay.store import ModelStore
from tests.unit.test_store_fakes import fake_gguf, sha

DATA = fake_gguf(7, 5000)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLAMAY_URL", "http://127.0.0.1:9")  # nothing listens: no server
    monkeypatch.delenv("LLAMAY_API_KEY", raising=False)
    for var in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "home"


def test_local_verbs(home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "Tiny-Model.gguf"
    model.write_bytes(DATA)
    assert main(["pull", str(model)]) == 0
    err = capsys.readouterr().err
    assert "pulling manifest" in err and "verifying sha256 digest" in err and err.rstrip().endswith("success")
    assert main(["cp", "tiny-model", "me/tiny:v1"]) == 0
    template = tmp_path / "chat.jinja"
    template.write_text("{{ messages }}")
    args = ["create", "tuned", "-from", "me/tiny:v1", "-param", "temperature=0.6", "--param", "top_k=20",
            "-param", 'stop="<|im_end|>"', "-param", "stop=</s>", "-system", "be brief", "-template", str(template)]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()
    assert main(["ls"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["NAME", "ID", "SIZE", "MODIFIED"]
    assert [line.split()[0] for line in out[1:]] == ["me/tiny:v1", "tiny-model:latest", "tuned:latest"]
    assert all(sha(DATA)[:12] in line for line in out[1:])
    assert main(["show", "tuned", "-json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["params"] == {"temperature": 0.6, "top_k": 20, "stop": ["<|im_end|>", "</s>"]}
    assert (shown["system"], shown["template"], shown["sha256"]) == ("be brief", "{{ messages }}", sha(DATA))
    assert main(["show", "tuned"]) == 0
    text = capsys.readouterr().out
    assert "temperature" in text and "be brief" in text and "{{ messages }}" in text
    assert main(["rm", "tiny-model", "me/tiny:v1"]) == 0
    assert ModelStore(home).params("tuned") == shown["params"]  # the blob stays: tuned uses it
    assert main(["rm", "tuned"]) == 0
    assert list((home / "models/blobs").iterdir()) == []


def test_local_errors_and_no_server(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rm", "absent"]) == 1
    assert "model 'absent' not found" in capsys.readouterr().err
    assert main(["create", "x", "-from", "absent.gguf", "-param", "temperature=hot"]) == 1
    assert "parameter 'temperature' needs a float" in capsys.readouterr().err
    assert main(["pull", "nonsense-source"]) == 1
    assert "cannot pull 'nonsense-source'" in capsys.readouterr().err
    assert main(["ps"]) == 0
    assert "no server is running at http://127.0.0.1:9" in capsys.readouterr().err
    assert main(["stop", "x"]) == 1


@dataclass
class Ollama:
    """A fake server speaking the Ollama routes the CLI uses; records each request."""

    calls: list[tuple[str, str, Any, str | None]] = field(default_factory=list)
    url: str = ""


@pytest.fixture
def ollama() -> Iterator[Ollama]:
    state = Ollama()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length)) if length else None

        def _reply(self, status: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            body = self._body()
            state.calls.append((self.command, self.path, body, self.headers.get("Authorization")))
            if self.path == "/api/version":
                return self._reply(200, b'{"version": "0.1.0"}')
            if self.path == "/api/ps":
                model = {"name": "tiny:latest", "model": "tiny:latest", "size": 5_000_000,
                         "digest": "ab" * 32, "expires_at": "2030-01-01T00:00:00Z"}  # fmt: skip
                return self._reply(200, json.dumps({"models": [model]}).encode())
            if self.path == "/api/pull":
                if body["model"] == "bad":
                    events = [{"status": "pulling manifest"}, {"error": "no such model"}]
                else:
                    events = [{"status": "pulling manifest"},
                              {"status": "pulling 0123456789ab", "digest": "sha256:01", "total": 10, "completed": 10},
                              {"status": "verifying sha256 digest"}, {"status": "success"}]  # fmt: skip
                return self._reply(
                    200, "".join(json.dumps(e) + "\n" for e in events).encode(), "application/x-ndjson"
                )
            if self.path == "/api/delete" and body["model"] == "absent":
                return self._reply(404, b'{"error": "model \'absent\' not found"}')
            return self._reply(200, b"{}")

        do_GET = do_POST = do_DELETE = _handle

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_verbs_go_to_a_running_server(
    home: Path, ollama: Ollama, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LLAMAY_URL", ollama.url)
    monkeypatch.setenv("LLAMAY_API_KEY", "k1")
    assert main(["ps"]) == 0
    out = capsys.readouterr().out
    assert "tiny:latest" in out and "abababababab" in out and "5.00 MB" in out
    assert main(["stop", "tiny"]) == 0
    assert main(["pull", "hf:o/r/f.gguf", "mine", "--fresh"]) == 0
    assert "success" in capsys.readouterr().err
    assert main(["pull", "bad"]) == 1
    assert "no such model" in capsys.readouterr().err
    assert main(["cp", "a", "b"]) == 0
    assert main(["rm", "a"]) == 0
    assert main(["rm", "absent"]) == 1
    err = capsys.readouterr().err
    assert "llamay: model 'absent' not found" in err and "404" not in err and "DELETE" not in err
    calls = [(m, p, b) for m, p, b, _ in ollama.calls if p != "/api/version"]
    assert calls == [
        ("GET", "/api/ps", None),
        ("POST", "/api/generate", {"model": "tiny", "keep_alive": 0, "stream": False}),
        ("POST", "/api/pull", {"model": "hf:o/r/f.gguf", "name": "mine", "fresh": True, "stream": True}),
        ("POST", "/api/pull", {"model": "bad", "fresh": False, "stream": True}),
        ("POST", "/api/copy", {"source": "a", "destination": "b"}),
        ("DELETE", "/api/delete", {"model": "a"}),
        ("DELETE", "/api/delete", {"model": "absent"}),
    ]
    assert {auth for *_, auth in ollama.calls} == {"Bearer k1"}
    assert not (home / "models").exists()  # the local store was never touched
