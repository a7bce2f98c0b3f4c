"""KvManager: where a sequence's KV comes from and goes to, over a fake unified KV cache."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from llamay.engine.request import SessionSpec
from llamay.errors import Conflict, NotFound
from llamay.kv.manager import KvManager, KvUsage
from llamay.kv.snapshot import read_snapshot

from .test_pool import FakeKv


class FakeCtx(FakeKv):
    """The fake KV cache with the sizes a llama context reports."""

    def __init__(self, n_seq_max: int, n_ctx: int = 400) -> None:
        super().__init__()
        self.n_seq_max = n_seq_max
        self.n_ctx = n_ctx
        self.flash_attn = False

    def seq_pos_max(self, seq: int) -> int:
        return max(self.tags.get(seq, ()), default=-1)


@dataclass
class Seq:
    """A finished request's sequence, as the engine holds it."""

    seq_id: int
    tokens: list[int]
    n_past: int
    n_prompt: int
    extra: list[int] = field(default_factory=list)


def manager(tmp_path: Path, n_seq: int = 4) -> tuple[KvManager, FakeCtx]:
    ctx = FakeCtx(n_seq)
    return KvManager.create(ctx, folder=tmp_path, model_name="m", model_sha256="ab" * 32, cache_ram=0), ctx


def run(kv: KvManager, ctx: FakeCtx, prompt: list[int], reply: list[int]) -> Seq:
    """A sequence that computed `prompt` and then generated `reply` (all but its last
    token are in the KV cache, as after a real request)."""
    seq = kv.acquire()
    assert seq is not None
    tokens = prompt + reply
    n_past = len(tokens) - 1 if reply else len(tokens)
    ctx.fill(seq, n_past)
    return Seq(seq, tokens, n_past, len(prompt))


def test_a_finished_request_is_cached_without_its_generated_positions(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    s = run(kv, ctx, [1, 2, 3, 4], [5, 6, 7])
    assert kv.settle(s, None, completed=True, cache=True) is None
    assert kv.pool.entries[s.seq_id].tokens == [1, 2, 3, 4]
    assert ctx.tags[s.seq_id] == {0, 1, 2, 3}  # generated KV is not shared: it differs from prompt KV
    new = kv.acquire()
    assert new is not None
    assert kv.attach(new, [1, 2, 3, 4, 9, 9], 4, context_id=None, share=True) == 4
    assert kv.attach(new, [1, 2, 3, 4, 9, 9], 4, context_id=None, share=False) == 0


def test_an_uncached_request_frees_its_sequence(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    s = run(kv, ctx, [1, 2, 3], [4])
    assert kv.settle(s, None, completed=True, cache=False) is None
    assert s.seq_id not in kv.pool.entries and s.seq_id not in ctx.tags
    assert s.seq_id in kv.pool.free


def test_an_unfinished_request_keeps_its_prompt_cached_unless_it_continued_a_context(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    left = run(kv, ctx, [1, 2, 3], [4])  # its client left: what it computed is kept
    assert kv.settle(left, None, completed=False, cache=True) is None
    assert kv.pool.entries[left.seq_id].tokens == [1, 2, 3]
    made = run(kv, ctx, [5, 6, 7], [])
    cid = kv.settle(made, SessionSpec(create=True, owner="ann"), completed=True, cache=True)
    assert cid is not None
    turn = run(kv, ctx, [5, 6, 7, 8, 9], [])  # a turn of that context, left unfinished
    assert kv.settle(turn, SessionSpec(context_id=cid, owner="ann"), completed=False, cache=True) is None
    assert turn.seq_id not in kv.pool.entries and turn.seq_id in kv.pool.free
    assert kv.get(cid).n_kv == 3  # the context is as it was


def test_a_session_creates_then_continues_a_context(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    made = run(kv, ctx, [1, 2, 3, 4], [])
    cid = kv.settle(made, SessionSpec(create=True, owner="ann"), completed=True, cache=True)
    assert cid is not None
    rec = kv.get(cid)
    assert rec.tokens == [1, 2, 3, 4] and rec.n_kv == 4 and rec.owner == "ann"
    assert kv.pool.entries[made.seq_id].pins == 1

    assert kv.begin(cid, lambda r: None) == [1, 2, 3, 4]
    with pytest.raises(Conflict):
        kv.begin(cid, lambda r: None)
    turn = kv.acquire()
    assert turn is not None
    prompt = [1, 2, 3, 4, 5, 6]
    assert kv.attach(turn, prompt, len(prompt) - 2, context_id=cid, share=False) == 4
    ctx.fill(turn, 7)
    done = Seq(turn, [*prompt, 7, 8], 7, len(prompt))
    assert kv.settle(done, SessionSpec(context_id=cid), completed=True, cache=True) == cid
    assert not rec.busy and rec.holder == turn and rec.tokens == [*prompt, 7, 8] and rec.n_kv == 6
    # the old holder, unpinned and a prefix of the new one, gives its id back
    assert made.seq_id not in kv.pool.entries and made.seq_id in kv.pool.free
    kv.check()


def test_a_failed_turn_leaves_the_context_as_it_was(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    cid = kv.settle(run(kv, ctx, [1, 2, 3], []), SessionSpec(create=True), completed=True, cache=True)
    assert cid is not None
    kv.begin(cid, lambda r: None)
    turn = run(kv, ctx, [1, 2, 3, 4, 5], [6])
    assert kv.settle(turn, SessionSpec(context_id=cid), completed=False, cache=True) is None
    rec = kv.get(cid)
    assert not rec.busy and rec.tokens == [1, 2, 3] and turn.seq_id in kv.pool.free
    kv.begin(cid, lambda r: None)
    kv.abandon(SessionSpec(context_id=cid))  # a request that never got a sequence
    assert not rec.busy


def test_an_aborted_create_makes_no_context(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    s = run(kv, ctx, [1, 2, 3], [])
    assert kv.settle(s, SessionSpec(create=True), completed=False, cache=True) is None
    assert kv.records() == [] and s.seq_id in kv.pool.free


def test_pressure_frees_cache_entries_first_then_idle_contexts(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    kv.settle(run(kv, ctx, [9, 9, 9], []), None, completed=True, cache=True)
    cid = kv.settle(run(kv, ctx, [1, 2, 3], []), SessionSpec(create=True), completed=True, cache=True)
    assert cid is not None
    assert kv.make_room() and len(kv.pool.entries) == 1  # the cache entry went
    assert kv.get(cid).holder is not None
    assert kv.make_room()  # then the context, to disk
    rec = kv.get(cid)
    assert rec.holder is None and rec.spill is not None and Path(rec.spill).is_file()
    assert not kv.make_room()
    # it comes back on use
    kv.begin(cid, lambda r: None)
    turn = kv.acquire()
    assert turn is not None and kv.attach(turn, [1, 2, 3, 4, 5], 3, context_id=cid, share=False) == 3
    assert ctx.tags[turn] == {0, 1, 2}
    kv.check()


def test_a_busy_context_is_never_spilled(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    cid = kv.settle(run(kv, ctx, [1, 2, 3], []), SessionSpec(create=True), completed=True, cache=True)
    assert cid is not None
    kv.begin(cid, lambda r: None)
    assert not kv.make_room()


def test_acquire_spills_an_idle_context_when_every_id_is_taken(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path, n_seq=2)
    running = kv.acquire()
    cid = kv.settle(run(kv, ctx, [1, 2, 3], []), SessionSpec(create=True), completed=True, cache=True)
    assert cid is not None and running is not None
    got = kv.acquire()
    assert got is not None and kv.get(cid).spill is not None
    assert kv.acquire() is None


def test_usage_tells_running_from_cached(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    kv.settle(run(kv, ctx, [1, 2, 3, 4], []), None, completed=True, cache=True)
    live = run(kv, ctx, [5, 6], [7, 8])
    assert kv.usage({live.seq_id}) == KvUsage(running=3, cached=4)


def test_fork_snapshot_restore_and_delete(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    cid = kv.settle(
        run(kv, ctx, [1, 2, 3], []), SessionSpec(create=True, marking="x"), completed=True, cache=True
    )
    assert cid is not None
    forks = kv.fork(cid, 2)
    assert [f.tokens for f in forks] == [[1, 2, 3]] * 2
    assert kv.pool.entries[kv.get(cid).holder or 0].pins == 3
    header, state = read_snapshot(kv.snapshot(forks[0].id))
    assert header.tokens == [1, 2, 3] and header.marking == "x"
    back = kv.restore(header, state)
    assert back.tokens == [1, 2, 3] and back.n_kv == 3 and back.id != cid
    assert {r.id for r in kv.records()} == {cid, back.id, *(f.id for f in forks)}
    kv.delete(forks[1].id)
    assert kv.find(forks[1].id) is None
    with pytest.raises(NotFound):
        kv.get(forks[1].id)
    kv.check()


def test_saved_contexts_come_back_with_a_new_manager(tmp_path: Path) -> None:
    kv, ctx = manager(tmp_path)
    cid = kv.settle(run(kv, ctx, [1, 2, 3], []), SessionSpec(create=True), completed=True, cache=True)
    kv.save()
    again, _ = manager(tmp_path)
    rec = again.get(cid or "")
    assert rec.tokens == [1, 2, 3] and rec.holder is None
