"""`pull` from a fake Hugging Face hub on 127.0.0.1: resume, split sets, verification,
concurrency, and the progress events."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from llamay.errors import InvalidRequest, ModelNotFound, StoreError
from llamay.store import ModelStore
from tests.unit.test_store_fakes import Fake, fake_gguf, fake_server, leftovers, sha  # noqa: F401

REPO = "Owner/Tiny-GGUF"
FILE = "Tiny-Q4_K_M.gguf"
DATA = fake_gguf(10, 200_000)
SPLIT = [fake_gguf(20 + n, size) for n, size in enumerate((90_000, 70_000, 30_000))]
SPLIT_NAMES = [f"big/Big-Q8_0-0000{n}-of-00003.gguf" for n in (1, 2, 3)]
CDN = f"/cdn/{REPO}/{FILE}"


@pytest.fixture
def hub(fake: Fake) -> Fake:
    fake.add_hub_file(REPO, FILE, DATA)
    fake.add_hub_file(REPO, "README.md", b"# tiny")
    for name, data in zip(SPLIT_NAMES, SPLIT, strict=True):
        fake.add_hub_file(REPO, name, data)
    return fake


def store(home: Path, hub: Fake, retries: int = 3) -> ModelStore:
    return ModelStore(home, hf_endpoint=hub.url, retries=retries, retry_delay=0.01)


def test_pull_verifies_names_and_reports_progress(tmp_path: Path, hub: Fake) -> None:
    events: list[dict[str, Any]] = []
    pulled = store(tmp_path, hub).pull(f"hf:{REPO}/{FILE}", progress=events.append)
    assert pulled.name == "owner/tiny-gguf:q4_k_m" and pulled.sha256 == sha(DATA) and pulled.size == len(DATA)
    assert pulled.path.read_bytes() == DATA
    statuses = [e["status"] for e in events]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == [
        "verifying sha256 digest",
        "writing manifest",
        "success",
    ]
    pulling = [e for e in events if e["status"].startswith("pulling ") and "total" in e]
    assert {e["status"] for e in pulling} == {f"pulling {sha(DATA)[:12]}"}
    assert {e["digest"] for e in pulling} == {f"sha256:{sha(DATA)}"}
    assert all(e["total"] == len(DATA) for e in pulling) and pulling[-1]["completed"] == len(DATA)
    assert [e["completed"] for e in pulling] == sorted(e["completed"] for e in pulling)
    assert hub.gets == {CDN: 1}  # via the resolve/main redirect
    assert store(tmp_path, hub).resolve("owner/tiny-gguf:q4_k_m").path == pulled.path
    # Pulled again, under another name: nothing downloaded, one blob for both names.
    again = store(tmp_path, hub).pull(f"hf:{REPO}:Q4_K_M", "mine")
    assert again.name == "mine:latest" and again.path == pulled.path and hub.gets == {CDN: 1}
    assert len(list((tmp_path / "models/blobs").iterdir())) == 1


def test_dropped_connection_resumes_within_one_pull(tmp_path: Path, hub: Fake) -> None:
    hub.drops[CDN] = [50_000, 120_000]
    store(tmp_path, hub).pull(f"hf:{REPO}/{FILE}")
    assert hub.served[CDN] == len(DATA)  # every byte sent once
    assert [r for p, r in hub.ranges if p == CDN] == [None, "bytes=50000-", "bytes=170000-"]


def test_interrupted_pull_resumes_on_the_next_pull(tmp_path: Path, hub: Fake) -> None:
    hub.drops[CDN] = [80_000]
    with pytest.raises(StoreError, match="kept 80000 bytes"):
        store(tmp_path, hub, retries=0).pull(f"hf:{REPO}/{FILE}")
    assert not (tmp_path / "models/manifests/owner").exists()
    assert (tmp_path / "models/tmp" / f"sha256-{sha(DATA)}.partial").stat().st_size == 80_000
    events: list[dict[str, Any]] = []
    store(tmp_path, hub).pull(f"hf:{REPO}/{FILE}", progress=events.append)
    assert hub.served[CDN] == len(DATA) and hub.ranges[-1] == (CDN, "bytes=80000-")
    pulling = [e for e in events if "completed" in e]
    assert pulling[0]["completed"] == 0 and pulling[1]["completed"] >= 80_000
    assert leftovers(tmp_path) == [f"blobs/sha256-{sha(DATA)}", "manifests/owner/tiny-gguf/q4_k_m.json"]


def test_a_host_without_range_support_restarts_the_file(tmp_path: Path, hub: Fake) -> None:
    hub.no_ranges = True
    hub.drops[CDN] = [60_000]
    events: list[dict[str, Any]] = []
    store(tmp_path, hub).pull(f"hf:{REPO}/{FILE}", progress=events.append)
    assert hub.served[CDN] == 60_000 + len(DATA)
    assert [e["completed"] for e in events if "completed" in e][-1] == len(DATA)


def test_fresh_discards_the_partial_download(tmp_path: Path, hub: Fake) -> None:
    hub.drops[CDN] = [80_000]
    with pytest.raises(StoreError):
        store(tmp_path, hub, retries=0).pull(f"hf:{REPO}/{FILE}")
    store(tmp_path, hub).pull(f"hf:{REPO}/{FILE}", fresh=True)
    assert hub.served[CDN] == 80_000 + len(DATA) and hub.ranges[-1] == (CDN, None)


def test_split_set_is_one_model_with_one_progress_total(tmp_path: Path, hub: Fake) -> None:
    events: list[dict[str, Any]] = []
    pulled = store(tmp_path, hub).pull(f"hf:{REPO}/{SPLIT_NAMES[1]}", progress=events.append)
    assert pulled.name == "owner/tiny-gguf:q8_0" and pulled.parts == 3 and pulled.size == sum(map(len, SPLIT))
    totals = {e["total"] for e in events if "total" in e}
    assert totals == {sum(map(len, SPLIT))}
    assert [e["completed"] for e in events if "completed" in e][-1] == sum(map(len, SPLIT))
    assert {e["digest"] for e in events if "digest" in e} == {f"sha256:{sha(d)}" for d in SPLIT}
    path = store(tmp_path, hub).resolve("owner/tiny-gguf:q8_0").path
    # The first part, with the others beside it under the names llama.cpp derives from it.
    assert path == pulled.path and path.name == "Big-Q8_0-00001-of-00003.gguf"
    for name, data in zip(SPLIT_NAMES, SPLIT, strict=True):
        sibling = path.with_name(Path(name).name)
        assert sibling.read_bytes() == data
        assert os.path.samefile(sibling, tmp_path / "models/blobs" / f"sha256-{sha(data)}")
    # The same set by quantization label, and by its first part: nothing fetched again.
    assert store(tmp_path, hub).pull(f"hf:{REPO}:q8_0").path == path
    assert sum(hub.gets.values()) == 3


def test_corrupt_download_is_rejected_and_not_registered(tmp_path: Path, hub: Fake) -> None:
    hub.wrong_sha.add(FILE)
    with pytest.raises(StoreError, match=f"sha256 mismatch for {FILE}"):
        store(tmp_path, hub).pull(f"hf:{REPO}/{FILE}")
    assert leftovers(tmp_path) == []  # no manifest, no blob, no partial to resume from
    with pytest.raises(ModelNotFound):
        store(tmp_path, hub).resolve("owner/tiny-gguf:q4_k_m")


def test_truncated_file_is_rejected(tmp_path: Path, hub: Fake) -> None:
    hub.short[CDN] = 150_000  # the host has lost the end of the file
    with pytest.raises(StoreError, match="150000 bytes, expected 200000"):
        store(tmp_path, hub).pull(f"hf:{REPO}/{FILE}")
    assert not (tmp_path / "models/blobs").exists() or not any((tmp_path / "models/blobs").iterdir())
    assert not (tmp_path / "models/manifests/owner").exists()


def test_concurrent_pulls_in_one_process_share_one_download(tmp_path: Path, hub: Fake) -> None:
    hub.delay = 0.01
    results: list[str] = []
    errors: list[Exception] = []
    barrier = threading.Barrier(4)

    def worker(name: str) -> None:
        try:
            barrier.wait()
            results.append(store(tmp_path, hub).pull(f"hf:{REPO}/{FILE}", name).name)
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(f"copy{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and sorted(results) == [f"copy{n}:latest" for n in range(4)]
    assert hub.gets == {CDN: 1}


def test_concurrent_pulls_across_processes_share_one_download(tmp_path: Path, hub: Fake) -> None:
    hub.delay = 0.25  # ~1 s for the file: this process asks for it while the other one fetches
    code = (
        "import sys; from llamay.store import ModelStore; "
        "ModelStore(sys.argv[1], hf_endpoint=sys.argv[2]).pull(sys.argv[3], 'other')"
    )
    source = f"hf:{REPO}/{FILE}"
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), hub.url, source])
    try:
        deadline = time.monotonic() + 30
        while not hub.gets and time.monotonic() < deadline:
            time.sleep(0.02)
        events: list[dict[str, Any]] = []
        store(tmp_path, hub).pull(source, progress=events.append)
    finally:
        assert child.wait(60) == 0
    assert hub.gets == {CDN: 1}
    assert any(e["status"].startswith("waiting for another pull") for e in events)
    names = sorted(m.name for m in store(tmp_path, hub).list())
    assert names == ["other:latest", "owner/tiny-gguf:q4_k_m"]


def test_hub_errors_and_token(tmp_path: Path, hub: Fake, monkeypatch: pytest.MonkeyPatch) -> None:
    s = store(tmp_path, hub)
    with pytest.raises(ModelNotFound, match="no such repository"):
        s.pull("hf:nobody/nothing/x.gguf")
    with pytest.raises(ModelNotFound, match="absent.gguf not found"):
        s.pull(f"hf:{REPO}/absent.gguf")
    with pytest.raises(InvalidRequest, match="2 GGUF models"):
        s.pull(f"hf:{REPO}")
    with pytest.raises(ModelNotFound, match="0 GGUF models with Q2_K"):
        s.pull(f"hf:{REPO}:Q2_K")
    with pytest.raises(InvalidRequest, match="bad source"):
        s.pull("hf:justowner")
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    with pytest.raises(InvalidRequest, match="catalog model name"):
        s.pull(f"hf:{REPO}/{FILE}", "smollm2:135m")
    assert hub.auth[-1] == "Bearer hf_test"
    assert sum(hub.gets.values()) == 0


def test_a_bare_owner_repo_with_a_quant_is_the_hub(tmp_path: Path, hub: Fake) -> None:
    events: list[dict[str, Any]] = []
    pulled = store(tmp_path, hub).pull(f"{REPO}:Q8_0", progress=events.append)  # no "hf:"
    assert pulled.name == "owner/tiny-gguf:q8_0" and pulled.parts == 3
    files = [(e["file"], e["files"]) for e in events if "files" in e]
    assert files[0] == (1, 3) and files[-1] == (3, 3)  # which file of the split set is coming
    with pytest.raises(InvalidRequest, match="OWNER/REPO"):
        store(tmp_path, hub).pull("not a/valid repo")


def test_a_local_file_still_wins_over_a_bare_repo_name(
    tmp_path: Path, hub: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Owner").mkdir()
    (tmp_path / "Owner" / "local.gguf").write_bytes(DATA)
    pulled = store(tmp_path / "home", hub).pull("Owner/local.gguf")
    assert pulled.sha256 == sha(DATA) and hub.gets == {}
