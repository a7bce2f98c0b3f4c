"""URL pulls stay inside the store: a file name that unquoting turns into a path is refused,
a manifest naming a part outside its folder is refused, and a body sent without a size
stops at the store's cap instead of filling the disk."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llamay.errors import InvalidRequest, StoreError
from llamay.store import Catalog, ModelStore, net
from llamay.store.layout import Layout
from llamay.store.manifest import Manifest, Part
from llamay.store.names import ModelName

SENT = 1_000_000


class Endless(BaseHTTPRequestHandler):
    """Answers every GET with a GGUF-looking body and no Content-Length (ended by closing)."""

    protocol_version = "HTTP/1.0"

    def log_message(self, *args: object) -> None:
        pass

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        block = b"GGUF" + b"\0" * 65532
        try:
            for _ in range(SENT // len(block) + 1):
                self.wfile.write(block)
        except OSError:
            pass  # the client stopped reading: what the test wants


@pytest.fixture()
def endless() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_unsized_body_stops_at_the_cap(
    tmp_path: Path, endless: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(net, "MAX_UNSIZED", 200_000)
    store = ModelStore(tmp_path / "home", catalog=Catalog([]), retries=0, retry_delay=0.01)
    with pytest.raises(StoreError, match="without a size"):
        store.pull(f"{endless}/files/big.gguf")
    held = sum(f.stat().st_size for f in (tmp_path / "home").rglob("*") if f.is_file())
    assert held <= 200_000 + 65536


@pytest.mark.parametrize(
    "path",
    ["..%2F..%2Fevil.gguf", "..%2Fevil-00001-of-00002.gguf", "%2E%2E", "%2Fetc%2Fx.gguf", "a%5C..%5Cb.gguf"],
)
def test_an_unquoted_path_is_not_a_file_name(tmp_path: Path, endless: str, path: str) -> None:
    store = ModelStore(tmp_path / "home", catalog=Catalog([]), retries=0)
    with pytest.raises(InvalidRequest, match="not a plain file name"):
        store.pull(f"{endless}/files/{path}")
    assert not (tmp_path / "evil.gguf").exists() and not (tmp_path / "evil-00001-of-00002.gguf").exists()


def test_a_manifest_part_outside_its_folder_is_refused(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "home")
    layout.make_dirs()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    parts = []
    for i, name in enumerate(["../../../victim.txt", "m-00002-of-00002.gguf"]):
        digest = f"{i:064x}"
        layout.blob(digest).parent.mkdir(parents=True, exist_ok=True)
        layout.blob(digest).write_bytes(b"GGUF")
        parts.append(Part(digest, 4, name))
    manifest = Manifest(ModelName("library", "m", "latest"), tuple(parts))
    with pytest.raises(StoreError, match="not a plain file name"):
        layout.model_path(manifest, link=True)
    assert victim.read_text() == "keep me"
