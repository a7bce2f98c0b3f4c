"""What a snapshot restore may cost the server: the largest state a header's token count allows
is known before the state arrives (a forged header is refused having read none of it), and a
legitimate state goes from the upload to the KV cache through a file, not through memory.
Assertions are about bytes sent and bytes resident, never about elapsed time."""

from __future__ import annotations

import hashlib
import json
import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from llamay.backend.context import Context, ContextConfig
from llamay.backend.model import Model
from llamay.errors import InvalidRequest
from llamay.kv.seqstate import CELL_ENTRY_MAX, FILE_HEAD, MARGIN, PREAMBLE, StateFile, kv_shape, parse_state
from llamay.kv.snapshot import SIG_LEN, read_snapshot
from llamay.testing import write_tiny_llama
from llamay.testing.tiny_swa import write_tiny_gemma3
from tests.serverproc import ServerProc, start_server

LENGTHS = (1, 7, 100, 300)


def _fill(ctx: Context, seq: int, n: int) -> None:
    b = ctx.batch
    for start in range(0, n, ctx.n_batch):
        b.clear()
        for p in range(start, min(n, start + ctx.n_batch)):
            b.add(3 + p % 40, p, seq, p == n - 1)
        assert ctx.decode() == 0


@pytest.mark.parametrize("family", ["llama", "gemma3"])
@pytest.mark.parametrize("type_kv", ["f16", "f32", "q8_0"])
def test_the_state_bound_holds_real_states_tightly(family: str, type_kv: str, tmp_path: Path) -> None:
    """llama.cpp's own states of several lengths fit the bound computed from the model's
    metadata; without sliding-window layers the bound is theirs plus the cell-entry slack and
    the fixed margin, with them (whose state keeps only the window) at most twice theirs."""
    if family == "llama":
        path = write_tiny_llama(tmp_path / "m.gguf", n_embd=128, n_layer=3, n_head=4, n_head_kv=2)
    else:
        path = write_tiny_gemma3(tmp_path / "m.gguf")
    model = Model(path)
    try:
        shape = kv_shape(model.meta, model.info.arch, model.info.n_embd, type_kv)
        with Context(model, ContextConfig(n_ctx=512, n_batch=128, n_seq_max=4, type_kv=type_kv)) as ctx:
            for n in LENGTHS:
                _fill(ctx, 0, n)
                state = ctx.seq_state(0)
                bound = shape.max_state(n)
                assert len(state) <= bound, (n, len(state), bound)
                if family == "llama":  # every layer holds every cell: the bound is exact but for slack
                    assert bound - len(state) <= MARGIN + 2 * CELL_ENTRY_MAX * n + 64, (n, len(state), bound)
                else:  # sliding-window layers hold only the window: counted as if they held all
                    assert bound - MARGIN <= 2 * len(state) + 2 * CELL_ENTRY_MAX * n, (n, len(state), bound)
                assert ctx.seq_rm(0)
    finally:
        model.close()


def test_a_state_loaded_from_a_file_is_the_state_it_was(tiny_model_path: Path, tmp_path: Path) -> None:
    model = Model(tiny_model_path)
    try:
        with Context(model, ContextConfig(n_ctx=512, n_batch=128, n_seq_max=4)) as ctx:
            _fill(ctx, 0, 77)
            state = ctx.seq_state(0)
            path = tmp_path / "state"
            path.write_bytes(FILE_HEAD + state[PREAMBLE:])
            assert ctx.seq_rm(0)
            assert ctx.load_seq_state_file(0, str(path))
            assert ctx.seq_state(0) == state
            sf = StateFile(str(path), state[:PREAMBLE], len(state))
            assert parse_state(sf, 512) == parse_state(state, 512)
            # llama.cpp would read past the end of a shorter file (and abort): never handed one.
            for cut in (FILE_HEAD + state[PREAMBLE:-9], FILE_HEAD + state[PREAMBLE:] + b"\0"):
                path.write_bytes(cut)
                with pytest.raises(InvalidRequest, match="damaged"):
                    parse_state(sf, 512)
    finally:
        model.close()


# -- on a real server -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    with start_server(tiny_model_path, "-ctx", "4096", home=tmp_path_factory.mktemp("limits")) as s:
        yield s


def _forged_head(sha: str, tokens: list[int], state_len: int) -> bytes:
    doc = {
        "model": {"name": "x", "sha256": sha},
        "tokens": tokens,
        "owner": None,
        "marking": None,
        "created": 1.0,
        "state_len": state_len,
        "state_sha256": "0" * 64,
    }
    body = json.dumps(doc).encode()
    return struct.pack("<8sHI", b"LLAMAYCX", 1, len(body)) + body


def _reply(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _snapshot(s: ServerProc, prompt: str) -> bytes:
    made = httpx.post(s.base + "/v1/contexts", json={"prompt": prompt}, timeout=300)
    assert made.status_code == 200, made.text
    r = httpx.get(s.base + f"/v1/contexts/{made.json()['id']}/snapshot", timeout=300)
    assert r.status_code == 200, r.text
    return r.content


@pytest.mark.parametrize("chunked", [False, True])
def test_a_forged_header_is_refused_before_any_state_byte(server: ServerProc, chunked: bool) -> None:
    """Two tokens declaring 1 MiB of state (within what the model's whole context could
    hold): the 413 names both sizes and comes back while the client has sent the header
    and not one byte of the state."""
    sha = read_snapshot(_snapshot(server, "a real one " * 4))[0].model_sha256
    declared = 1024 * 1024
    head = _forged_head(sha, [5, 6], declared)
    size = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(head) + declared}"
    request = f"POST /v1/contexts/restore HTTP/1.1\r\nHost: x\r\n{size}\r\n\r\n".encode()
    body = f"{len(head):x}\r\n".encode() + head + b"\r\n" if chunked else head
    host, port = server.base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        sock.sendall(request + body)
        reply = _reply(sock)
    assert reply.startswith(b"HTTP/1.1 413"), reply
    text = json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["message"]
    assert str(declared) in text and "2 tokens" in text, text
    # Within a margin, the bound named is the real size of a 2-token state.
    bound = int(text.rsplit("at most ", 1)[1].split()[0])
    assert bound < declared // 8


def test_an_upload_larger_than_its_header_allows_is_refused_before_its_body(server: ServerProc) -> None:
    """A truthful header (a real snapshot's) with a Content-Length far beyond what its
    tokens can take: refused when the header has arrived, the rest never sent."""
    snap = _snapshot(server, "content length " * 5)
    hlen = struct.unpack_from("<I", snap, 10)[0]
    head = snap[: 14 + hlen]
    host, port = server.base.removeprefix("http://").split(":")
    declared = 1024 * 1024
    with socket.create_connection((host, int(port)), timeout=120) as sock:
        sock.sendall(
            f"POST /v1/contexts/restore HTTP/1.1\r\nHost: x\r\nContent-Length: {declared}\r\n\r\n".encode()
        )
        sock.sendall(head)
        reply = _reply(sock)
    assert reply.startswith(b"HTTP/1.1 413"), reply
    assert str(declared).encode() in reply and b"tokens of this model is at most" in reply, reply


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    return out


def test_a_large_restore_does_not_hold_the_state_in_memory(tmp_path: Path) -> None:
    """A ~60 MiB state restored into a server whose cache holds one small context: its peak
    resident memory during the restore grows by far less than the state (the old path held it
    twice), and the restored context's KV is the original's."""
    wide = write_tiny_llama(
        tmp_path / "wide.gguf", n_embd=512, n_layer=12, n_head=8, n_head_kv=8, n_ctx_train=4096
    )
    args = ("-ctx", "2048", "-kv", "f32")
    prompt = " ".join(f"w{i % 97}" for i in range(450))  # some 1,300 tokens
    with start_server(wide, *args, home=tmp_path / "a") as a:
        big = _snapshot(a, prompt)
        small = _snapshot(a, "warm up " * 4)
    _, state = read_snapshot(big)
    assert len(state) > 48 * 1024 * 1024
    with start_server(wide, *args, home=tmp_path / "b") as b:
        warm = httpx.post(b.base + "/v1/contexts/restore", content=small, timeout=120)
        assert warm.status_code == 200, warm.text  # the cache holds KV now: its layout is known
        pid = b.proc.pid
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = _status(pid)
        r = httpx.post(b.base + "/v1/contexts/restore", content=big, timeout=300)
        assert r.status_code == 200, r.text
        peak = _status(pid)["VmHWM"]
        back = httpx.get(b.base + f"/v1/contexts/{r.json()['id']}/snapshot", timeout=300).content
    growth = peak - before["VmRSS"]
    assert growth < len(state) // 4, (growth, len(state))
    assert _kv(read_snapshot(back)[1]) == _kv(state)


def _kv(state: bytes) -> tuple[bytes, list[int], str]:
    """What a state holds apart from sequence ids: its magic, its cells' positions, and the
    digest of every layer's rows (from the layer header on)."""
    cells = struct.unpack_from("<I", state, 12)[0]
    entries = np.frombuffer(state, np.int32, 3 * cells, 16).reshape(cells, 3)
    end = 16 + 12 * cells
    return state[:4], entries[:, 0].tolist(), hashlib.sha256(state[end:]).hexdigest()


def _spooled(home: Path) -> list[Path]:
    return sorted(home.rglob(".restore-*"))


def _until(server: ServerProc, done: Callable[[], bool]) -> bool:
    """Whether `done` becomes true while the server answers up to 400 health checks (each
    one a round trip through its event loop: no sleeping, no clock)."""
    for _ in range(400):
        if done():
            return True
        httpx.get(server.base + "/health", timeout=60)
    return done()


def test_an_upload_is_spooled_privately_and_removed_however_it_ends(
    tiny_model_path: Path, tmp_path: Path
) -> None:
    home = tmp_path / "h"
    with start_server(tiny_model_path, "-ctx", "4096", home=home) as s:
        snap = _snapshot(s, "spooled to disk " * 6)
        hlen = struct.unpack_from("<I", snap, 10)[0]
        half = 14 + hlen + (len(snap) - 14 - hlen) // 2
        host, port = s.base.removeprefix("http://").split(":")
        sock = socket.create_connection((host, int(port)), timeout=120)
        sock.sendall(
            f"POST /v1/contexts/restore HTTP/1.1\r\nHost: x\r\nContent-Length: {len(snap)}\r\n\r\n".encode()
        )
        sock.sendall(snap[:half])
        assert _until(s, lambda: len(_spooled(home)) == 1)
        (spool,) = _spooled(home)
        assert spool.stat().st_mode & 0o777 == 0o600 and spool.parent.stat().st_mode & 0o777 == 0o700
        sock.close()  # the client goes away mid-upload
        assert _until(s, lambda: not _spooled(home))
        bad = bytearray(snap)
        bad[-SIG_LEN - 1] ^= 1  # the last state byte: a checksum mismatch, found at the end
        r = httpx.post(s.base + "/v1/contexts/restore", content=bytes(bad), timeout=120)
        assert r.status_code == 400 and "checksum" in r.text, r.text
        r = httpx.post(s.base + "/v1/contexts/restore", content=snap, timeout=120)
        assert r.status_code == 200, r.text
        assert not _spooled(home)
