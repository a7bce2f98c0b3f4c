"""Copy, remove (blob reference counting), create with parameters, GGUF sampling defaults,
and a split set pulled into the store loading in the real llama.cpp."""

from __future__ import annotations

import functools
from pathlib import Path

import gguf
import pytest

from llamay.errors import InvalidRequest, ModelNotFound
from llamay.store import ModelStore, gguf_sampling_defaults, parse_params, validate_params
from tests.unit.test_store_fakes import fake_gguf, sha

A, B = fake_gguf(50, 8000), fake_gguf(51, 9000)


def blobs(home: Path) -> set[str]:
    folder = home / "models/blobs"
    return {p.name.removeprefix("sha256-") for p in folder.iterdir()} if folder.exists() else set()


def write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_copy_and_remove_count_blob_references(tmp_path: Path) -> None:
    s = ModelStore(tmp_path / "home")
    s.pull(write(tmp_path / "a.gguf", A))
    s.pull(write(tmp_path / "b.gguf", B))
    copied = s.copy("a", "team/a-copy:v2")
    assert copied.name == "team/a-copy:v2" and copied.path == s.resolve("a").path
    assert blobs(s.home) == {sha(A), sha(B)}
    s.remove("a")
    assert blobs(s.home) == {sha(A), sha(B)}  # still used by team/a-copy:v2
    s.remove("team/a-copy:v2")
    assert blobs(s.home) == {sha(B)}
    assert [m.name for m in s.list()] == ["b:latest"]
    with pytest.raises(ModelNotFound):
        s.remove("a")
    with pytest.raises(ModelNotFound):
        s.copy("a", "x")
    with pytest.raises(InvalidRequest, match="invalid model name"):
        s.copy("b", "bad name")
    with pytest.raises(InvalidRequest, match="catalog model name"):
        s.copy("b", "smollm2:135m")


def test_split_folder_goes_with_its_last_name(tmp_path: Path) -> None:
    for n, data in enumerate((A, B), 1):
        write(tmp_path / f"s-0000{n}-of-00002.gguf", data)
    s = ModelStore(tmp_path / "home")
    path = s.pull(str(tmp_path / "s-00001-of-00002.gguf")).path
    s.copy("s", "t")
    s.remove("s")
    assert path.is_file() and s.resolve("t").path == path
    s.remove("t")
    assert not path.parent.exists() and blobs(s.home) == set()


def test_create_with_params_template_and_system(tmp_path: Path) -> None:
    s = ModelStore(tmp_path / "home")
    s.pull(write(tmp_path / "base.gguf", A))
    made = s.create("tuned", "base", params={"temperature": "0.6", "top_k": 20}, system="be brief")
    assert made.sha256 == sha(A) and blobs(s.home) == {sha(A)}  # same blob
    assert s.params("tuned") == {"temperature": 0.6, "top_k": 20}
    assert (s.system("tuned"), s.template("tuned")) == ("be brief", None)
    # Derived from a derived model: params overlay, template/system replace only when given.
    s.create("tuned2", "tuned", params={"top_k": 40}, template="{{ x }}")
    assert s.params("tuned2") == {"temperature": 0.6, "top_k": 40}
    assert (s.system("tuned2"), s.template("tuned2")) == ("be brief", "{{ x }}")
    # Straight from a pull source: pulled first, under the new name.
    s.create("direct", write(tmp_path / "other.gguf", B), params={"seed": 3})
    assert s.params("direct") == {"seed": 3} and s.resolve("direct").sha256 == sha(B)
    shown = s.show("tuned2")
    assert shown.params == shown.effective == {"temperature": 0.6, "top_k": 40} and shown.defaults == {}
    # Pulling the same bytes again under the name keeps what create set.
    s.pull(str(tmp_path / "base.gguf"), "tuned")
    assert s.params("tuned") == {"temperature": 0.6, "top_k": 20}
    with pytest.raises(InvalidRequest, match="unknown parameter 'temprature'"):
        s.create("x", "base", params={"temprature": 1})
    with pytest.raises(ModelNotFound):
        s.params("absent")


def test_parse_params() -> None:
    parsed = parse_params(["temperature=0.6", "TOP_K=20", 'stop="<|im_end|>"', "stop='</s>'", "use_mmap=no"])
    assert parsed == {"temperature": 0.6, "top_k": 20, "stop": ["<|im_end|>", "</s>"], "use_mmap": False}
    assert validate_params({"num_ctx": 4096.0, "stop": "x"}) == {"num_ctx": 4096, "stop": ["x"]}
    for bad in (["top_k=1.5"], ["temperature"], ["seed=true"], ["=1"], ["penalize_newline=maybe"]):
        with pytest.raises(InvalidRequest):
            parse_params(bad)


def test_gguf_sampling_defaults(tmp_path: Path) -> None:
    path = tmp_path / "sampled.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_sampling_top_k(20)
    writer.add_sampling_top_p(0.95)
    writer.add_float32("general.sampling.temp", 0.6)
    writer.add_uint32("general.sampling.penalty_last_n", 64)
    writer.add_float32("general.sampling.penalty_repeat", 1.1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    expected = {"top_k": 20, "top_p": 0.95, "temperature": 0.6, "repeat_last_n": 64, "repeat_penalty": 1.1}
    assert gguf_sampling_defaults(path) == expected
    assert gguf_sampling_defaults(tmp_path / "absent.gguf") == {}
    assert gguf_sampling_defaults(Path(write(tmp_path / "junk.gguf", b"GGUF junk"))) == {}
    s = ModelStore(tmp_path / "home")
    s.create("sampled", str(path), params={"temperature": 0.2})
    assert s.params("sampled") == {**expected, "temperature": 0.2}
    assert s.show("sampled").defaults == expected
    assert s.params(str(path)) == expected  # a plain file: its own defaults


def test_split_set_from_the_store_loads_in_llama_cpp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    llama_cpp = pytest.importorskip("llama_cpp")
    from llamay.testing import write_tiny_llama

    monkeypatch.setattr(gguf, "GGUFWriter", functools.partial(gguf.GGUFWriter, split_max_tensors=8))
    (tmp_path / "src").mkdir()
    write_tiny_llama(tmp_path / "src" / "tiny.gguf")
    monkeypatch.undo()
    parts = sorted((tmp_path / "src").iterdir())
    assert len(parts) > 1 and parts[0].name == f"tiny-00001-of-{len(parts):05d}.gguf"
    pulled = ModelStore(tmp_path / "home").pull(str(parts[0]), "split").path
    assert pulled.parent != parts[0].parent
    pulled.with_name(parts[1].name).unlink()  # llama.cpp needs every part there: resolve relinks
    resolved = ModelStore(tmp_path / "home").resolve("split").path
    assert resolved == pulled and resolved.with_name(parts[1].name).is_file()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = False
    model = llama_cpp.llama_model_load_from_file(str(resolved).encode(), params)
    assert model, "llama.cpp could not load the split set from the store"
    try:
        assert llama_cpp.llama_model_n_params(model) > 0
    finally:
        llama_cpp.llama_model_free(model)
