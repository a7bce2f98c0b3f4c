"""State kept for tenants stays theirs, on real engines and servers: a fleet replica writes
signed, private checkpoints and restores an unsigned one as no tenant's; `llamay ctx move`
does not hand the source's key to the target; a `public` folder inside a restricted one of a
retrieval index publishes nothing."""

from __future__ import annotations

import asyncio
import json
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from llamay.auth import CURRENT_NAMESPACE
from llamay.chat.contexts import ContextService
from llamay.cli.main import main
from llamay.config import RuntimeConfig, ServerConfig
from llamay.convert import convert_bert
from llamay.fleet import replica as replica_module
from llamay.fleet.checkpoint import saved
from llamay.fleet.replica import LlamayReplica
from llamay.fleet.spec import FleetSpec
from llamay.fleet.trust import UNSIGNED_NAMESPACE
from llamay.kv.snapshot import read_signed, write_snapshot
from llamay.testing.tiny_bert import write_tiny_bert
from tests.serverproc import start_server


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


class Replica(LlamayReplica):
    """Without Ray Serve's asynchronous shutdown hook (Ray awaits it; the garbage collector
    would only make a coroutine of it)."""

    def __del__(self) -> None:
        pass


# -- fleet checkpoints -----------------------------------------------------------------------


def test_a_replica_signs_its_checkpoints_and_trusts_no_unsigned_header(
    tiny_model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica (its whole app on a real engine, without Ray) checkpoints ann's context:
    0600 in 0700 folders, signed with the fleet's key. Restored, the signed checkpoint keeps
    ann and her namespace; the same header unsigned, or signed with another key, becomes no
    one's in a namespace no request attaches to."""
    monkeypatch.setattr(replica_module, "_replica_id", lambda: ("r1", "node"))
    server = ServerConfig(runtime=RuntimeConfig(ctx=2048, threads=1))
    spec = FleetSpec(
        model=("tiny-llama", str(tiny_model_path), None), server=server, state_dir=str(tmp_path / "st")
    )

    async def run() -> None:
        rep = Replica(spec)
        try:
            await rep._ensure_started()
            lm = await rep.runtime.use("tiny-llama")
            token = CURRENT_NAMESPACE.set("u:ann")
            try:
                tokens = lm.model.tokenize("ann's private notes " * 8, add_special=True, parse_special=False)
                await ContextService(rep.runtime).create(lm, tokens, owner="ann")
            finally:
                CURRENT_NAMESPACE.reset(token)
            await rep._checkpoint_pass()
            assert rep.ckpt is not None
            ((_, path),) = saved(rep.ckpt.folder)
            assert (
                mode(path) == 0o600
                and mode(rep.ckpt.folder) == 0o700
                and mode(rep.ckpt.folder.parent) == 0o700
            )
            assert mode(rep.home) == 0o700
            data = path.read_bytes()
            header, state, signed = read_signed(data, spec.signing_key())
            assert signed and header.owner == "ann" and header.namespace == "u:ann"

            async def imported(blob: bytes) -> tuple[str | None, str]:
                _, cid = await rep.import_context(None, blob)  # type: ignore[arg-type]
                _, rec = await ContextService(rep.runtime).find(cid)
                return rec.owner, rec.namespace

            assert await imported(data) == ("ann", "u:ann")
            forged = replace(header, owner="bob", namespace="g:team-a")
            assert await imported(write_snapshot(forged, state)) == (None, UNSIGNED_NAMESPACE)
            assert await imported(write_snapshot(forged, state, b"x" * 32)) == (None, UNSIGNED_NAMESPACE)
        finally:
            await rep.lifespan.stop()

    asyncio.run(run())


# -- ctx move --------------------------------------------------------------------------------


def test_ctx_move_keeps_the_source_key_from_the_target(tiny_model_path: Path, tmp_path: Path) -> None:
    """The target accepts ann's key too, so a move that sent it there would succeed: without
    -to-key the target gets no key (401) and the context stays at the source."""
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"keys": [{"key": "ann-key", "principal": "ann", "role": "user"}]}))
    ann = {"Authorization": "Bearer ann-key"}

    def move(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "llamay", "ctx", "move", cid, "-from", a.base, "-to", b.base,
                               "-key", "ann-key", *extra], capture_output=True, text=True, timeout=120)  # fmt: skip

    with (
        start_server(tiny_model_path, "-keys", str(keys), home=tmp_path / "a") as a,
        start_server(tiny_model_path, "-keys", str(keys), home=tmp_path / "b") as b,
    ):
        cid = httpx.post(a.base + "/v1/contexts", headers=ann, json={"prompt": "notes " * 10}).json()["id"]
        refused = move()
        assert refused.returncode == 1 and "401" in refused.stderr, refused.stderr
        assert httpx.get(a.base + f"/v1/contexts/{cid}", headers=ann).status_code == 200
        assert httpx.get(b.base + "/v1/contexts", headers=ann).json()["data"] == []
        moved = move("-to-key", "ann-key")
        assert moved.returncode == 0, moved.stderr
        assert httpx.get(b.base + f"/v1/contexts/{moved.stdout.strip()}", headers=ann).status_code == 200


# -- retrieval -------------------------------------------------------------------------------

FIN_KEY, ENG_KEY = "key-finance-alice", "key-eng-bob"


@pytest.fixture(scope="module")
def rag_server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("rag-public")
    embed = convert_bert(write_tiny_bert(root / "embed-hf"), root / "embed.gguf").path
    keys = root / "keys.json"
    keys.write_text(json.dumps({"keys": [
        {"key": FIN_KEY, "principal": "alice", "groups": ["finance"]},
        {"key": ENG_KEY, "principal": "bob", "groups": ["eng"]},
    ]}))  # fmt: skip
    docs = root / "docs"
    (docs / "public").mkdir(parents=True)
    (docs / "finance/public").mkdir(parents=True)
    (docs / "finance/.llamay-access").write_text("finance\n")
    (docs / "finance/public/q3.txt").write_text(
        "The merger with Globex closes in March; the terms stay confidential.\n"
    )
    (docs / "public/guide.md").write_text("# Guide\n\nForking a context copies no pages.\n")
    index = root / "index.sqlite"
    assert main(["index", "build", str(docs), "-o", str(index), "-embed", str(embed), "-threads", "1"]) == 0
    args = ["-index", str(index), "-embed", str(embed), "-keys", str(keys), "-threads", "1"]
    with start_server(tiny_model_path, *args, home=root / "home") as proc:
        yield proc.base


def retrieve(base: str, key: str, query: str) -> list[dict[str, Any]]:
    r = httpx.post(f"{base}/v1/retrieve", json={"query": query, "top_k": 20},
                   headers={"Authorization": f"Bearer {key}"}, timeout=60)  # fmt: skip
    assert r.status_code == 200, r.text
    data: list[dict[str, Any]] = r.json()["data"]
    return data


def test_a_public_folder_inside_a_restricted_one_publishes_nothing(rag_server: str) -> None:
    seen = retrieve(rag_server, ENG_KEY, "merger Globex confidential terms")
    assert seen and {h["source"] for h in seen} == {"public/guide.md"}, seen
    own = retrieve(rag_server, FIN_KEY, "merger Globex confidential terms")
    assert "finance/public/q3.txt" in {h["source"] for h in own}
