"""Fakes for the store tests: one real HTTP server on 127.0.0.1 playing a Hugging Face hub,
a PEP 691 package index and a plain file host, with Range support and fault injection.

No tests here; the store and pull test modules import these.

    /api/models/{owner}/{repo}/tree/main[/{dir}][?recursive=true]   hub listing (lfs.oid)
    /{owner}/{repo}/resolve/main/{path}   302 -> /cdn/{owner}/{repo}/{path}, X-Linked-* headers
    /cdn/..., /files/...                  file bytes: Range, If-Range, ETag, HEAD
    /simple/{project}/                    PEP 691 JSON page (wheels under /files/)
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import socket
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fake_gguf(seed: int, size: int) -> bytes:
    """`size` deterministic, incompressible bytes that start with the GGUF magic."""
    return (b"GGUF" + random.Random(seed).randbytes(size))[:size]


def make_wheel(package: str, members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr(f"{package.replace('-', '_')}-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\n")
    return buf.getvalue()


@dataclass
class Fake:
    """The server's content, faults and request log. Paths are URL paths."""

    files: dict[str, bytes] = field(default_factory=dict)  # /cdn/... and /files/... -> bytes
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)  # repo id -> path -> bytes
    projects: dict[str, list[str]] = field(default_factory=dict)  # project -> wheel file names
    wrong_sha: set[str] = field(default_factory=set)  # hub paths listed with another sha256
    short: dict[str, int] = field(default_factory=dict)  # URL path -> bytes actually served
    drops: dict[str, list[int]] = field(default_factory=dict)  # URL path -> cut after n bytes, per GET
    bad_index_hash: set[str] = field(default_factory=set)  # wheels listed with a wrong sha256
    delay: float = 0.0  # seconds between 64 kB blocks
    no_ranges: bool = False  # answer Range requests with the whole file (200)
    gets: Counter[str] = field(default_factory=Counter)  # file GETs per URL path
    served: Counter[str] = field(default_factory=Counter)  # body bytes sent per URL path
    ranges: list[tuple[str, str | None]] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)  # Authorization of hub API calls
    requests: list[str] = field(default_factory=list)
    url: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_hub_file(self, repo: str, path: str, data: bytes) -> None:
        self.repos.setdefault(repo, {})[path] = data
        self.files[f"/cdn/{repo}/{path}"] = data

    def add_wheel(self, package: str, version: str, members: dict[str, bytes]) -> str:
        from llamay.store.catalog import wheel_filename

        filename = wheel_filename(package, version)
        self.files[f"/files/{filename}"] = make_wheel(package, members)
        project = package.replace("_", "-").lower()
        self.projects.setdefault(project, []).append(filename)
        return filename

    @property
    def index_url(self) -> str:
        return f"{self.url}/simple"

    def file_gets(self, prefix: str = "/") -> int:
        return sum(n for p, n in self.gets.items() if p.startswith(prefix))


def _handler(fake: Fake) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:
            self._route(head=True)

        def do_GET(self) -> None:
            self._route(head=False)

        def _route(self, *, head: bool) -> None:
            parts = urlsplit(self.path)
            path = unquote(parts.path)
            with fake.lock:
                fake.requests.append(self.path)
            if path.startswith("/api/models/"):
                return self._tree(path.removeprefix("/api/models/"), parse_qs(parts.query))
            if "/resolve/main/" in path:
                repo, _, file_path = path.strip("/").partition("/resolve/main/")
                data = fake.repos.get(repo, {}).get(file_path)
                if data is None:
                    return self._send(404, b"not found", "text/plain")
                self.send_response(302)
                self.send_header("Location", f"/cdn/{repo}/{quote(file_path)}")
                self.send_header("X-Linked-Etag", f'"{sha(data)}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            if path.startswith("/simple/"):
                return self._index(path.strip("/").split("/")[1])
            if path in fake.files:
                return self._file(path, head)
            return self._send(404, b"not found", "text/plain")

        def _tree(self, rest: str, query: dict[str, list[str]]) -> None:
            with fake.lock:
                fake.auth.append(self.headers.get("Authorization"))
            owner, repo, _tree, _rev, *folder = rest.split("/")
            files = fake.repos.get(f"{owner}/{repo}")
            if files is None:
                return self._send(404, b'{"error": "Repository not found"}', "application/json")
            prefix = "/".join(folder)
            recursive = query.get("recursive") == ["true"]
            entries = []
            for path, data in sorted(files.items()):
                parent = path.rpartition("/")[0]
                if parent != prefix and not (recursive and path.startswith(prefix)):
                    continue
                digest = sha(b"other" + data) if path in fake.wrong_sha else sha(data)
                size = len(data)
                entries.append({"type": "file", "oid": sha(b"git" + data)[:40], "size": size, "path": path,
                                "lfs": {"oid": digest, "size": size, "pointerSize": 134}})  # fmt: skip
            return self._send(200, json.dumps(entries).encode(), "application/json")

        def _index(self, project: str) -> None:
            names = fake.projects.get(project)
            if names is None:
                return self._send(404, b"not found", "text/plain")
            files = []
            for name in names:
                data = fake.files[f"/files/{name}"]
                digest = "0" * 64 if name in fake.bad_index_hash else sha(data)
                files.append({"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": digest},
                              "size": len(data)})  # fmt: skip
            body = json.dumps({"meta": {"api-version": "1.1"}, "files": files}).encode()
            return self._send(200, body, JSON_TYPE)

        def _file(self, path: str, head: bool) -> None:
            data = fake.files[path]
            if path in fake.short:
                data = data[: fake.short[path]]
            etag = f'"{sha(data)}"'
            start, status = 0, 200
            wanted = self.headers.get("Range")
            if not head:
                with fake.lock:
                    fake.gets[path] += 1
                    fake.ranges.append((path, wanted))
            if_range = self.headers.get("If-Range")
            if wanted and not fake.no_ranges and (if_range is None or if_range == etag):
                start = int(wanted.removeprefix("bytes=").partition("-")[0])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = 206
            body = data[start:]
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", etag)
            self.send_header("Accept-Ranges", "bytes")
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            if head:
                return
            with fake.lock:
                cut = fake.drops[path].pop(0) if fake.drops.get(path) else None
            limit = len(body) if cut is None else min(cut, len(body))
            sent = 0
            while sent < limit:
                block = body[sent : min(limit, sent + 65536)]
                self.wfile.write(block)
                sent += len(block)
                with fake.lock:
                    fake.served[path] += len(block)
                if fake.delay:
                    time.sleep(fake.delay)
            if cut is not None:
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


class Server:
    def __init__(self, fake: Fake) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
        self.httpd.daemon_threads = True
        # A short poll interval keeps shutdown() (which waits for one poll) fast.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        fake.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture(name="fake")
def fake_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fake]:
    """An empty Fake, served; proxies and tokens from the environment are cleared."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy",
                "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "LLAMAY_HF_ENDPOINT", "LLAMAY_PYPI_INDEX"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    state = Fake()
    server = Server(state)
    yield state
    server.stop()


def leftovers(home: Path) -> list[str]:
    """Every file in the store except lock files (which are empty and harmless by design)."""
    models = home / "models"
    return sorted(
        str(p.relative_to(models)) for p in models.rglob("*") if p.is_file() and p.parent.name != "locks"
    )
