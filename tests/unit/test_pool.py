from llamay.kv.pool import SHARED, SeqPool


class FakeKv:
    """Cells as (seq, pos) tags, like a unified KV cache."""

    def __init__(self) -> None:
        self.tags: dict[int, set[int]] = {}

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        if p0 < 0 and p1 < 0:
            self.tags.pop(seq, None)
        else:
            self.tags[seq] = {p for p in self.tags.get(seq, set()) if p < p0 or (0 <= p1 <= p)}
        return True

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        held = self.tags.get(src, set())
        self.tags.setdefault(dst, set()).update(p for p in held if (p0 < 0 or p >= p0) and (p1 < 0 or p < p1))

    def seq_state(self, seq: int) -> bytes:
        return bytes(sorted(self.tags.get(seq, set())))

    def set_seq_state(self, seq: int, data: bytes) -> bool:
        if self.room is not None and len(data) > self.room - sum(len(t) for t in self.tags.values()):
            return False
        self.tags[seq] = set(data)
        return True

    def fill(self, seq: int, n: int) -> None:
        self.tags.setdefault(seq, set()).update(range(n))

    room: int | None = None  # cells free for set_seq_state; None: unlimited


def test_reuse_longest_prefix_and_limit() -> None:
    kv = FakeKv()
    pool = SeqPool(4, kv)
    a = pool.acquire()
    kv.fill(a, 5)
    pool.keep(a, [1, 2, 3, 4, 5])
    b = pool.acquire()
    assert pool.attach(b, [1, 2, 3, 9], limit=3) == 3
    assert kv.tags[b] == {0, 1, 2}
    c = pool.acquire()
    assert pool.attach(c, [1, 2, 3, 4, 5], limit=4) == 4  # the last prompt token is always recomputed


def test_eviction_is_lru_and_spares_pinned() -> None:
    kv = FakeKv()
    pool = SeqPool(3, kv)
    ids = [pool.acquire() for _ in range(3)]
    for i, s in enumerate(ids):
        kv.fill(s, 2)
        pool.keep(s, [10 + i, 1], pins=1 if i == 0 else 0)
    pool.attach(99, [12, 1], limit=2)  # touch the third
    got = pool.acquire()
    assert got == ids[1]  # least recently used unpinned
    assert ids[0] in pool.entries and ids[2] in pool.entries
    assert pool.acquire() == ids[2]
    assert pool.acquire() is None  # only the pinned one is left


def test_keep_drops_unpinned_prefixes_of_the_new_entry() -> None:
    kv = FakeKv()
    pool = SeqPool(4, kv)
    a = pool.acquire()
    pool.keep(a, [1, 2])
    b = pool.acquire()
    pool.keep(b, [1, 2, 3])
    assert list(pool.entries) == [b]
    assert a in pool.free


def test_dropping_an_entry_keeps_cells_a_sharer_uses() -> None:
    kv = FakeKv()
    pool = SeqPool(4, kv)
    a = pool.acquire()
    kv.fill(a, 4)
    pool.keep(a, [1, 2, 3, 4])
    b = pool.acquire()
    pool.attach(b, [1, 2, 3, 4, 5], limit=4)
    pool.drop(a)
    assert kv.tags[b] == {0, 1, 2, 3}


def test_budget_keeps_the_cache_small_and_recent() -> None:
    kv = FakeKv()
    pool = SeqPool(8, kv, budget=10)
    for i in range(4):
        pool.keep(pool.acquire(), [100 + i] * 4)
    kept = sorted(e.tokens[0] for e in pool.entries.values())
    assert kept == [102, 103]  # the most recent ones, within 10 positions
    big = pool.acquire()
    pool.keep(big, list(range(50)))  # a single entry over budget stays: it is the newest
    assert list(pool.entries) == [big]


def _kept(pool: SeqPool, kv: FakeKv, tokens: list[int]) -> int:
    seq = pool.acquire()
    assert seq is not None
    kv.fill(seq, len(tokens))
    pool.keep(seq, tokens)
    return seq


def test_idle_entries_move_to_ram_and_come_back_on_a_hit() -> None:
    kv = FakeKv()
    pool = SeqPool(4, kv, stash_bytes=1000, idle_after=10)
    a = _kept(pool, kv, [1, 2, 3, 4, 5, 6])
    pool.age(9)
    assert a in pool.entries  # not idle long enough yet
    pool.age(1)
    assert a not in pool.entries and a not in kv.tags and len(pool.stash) == 1
    b = pool.acquire()
    assert b is not None
    assert pool.attach(b, [1, 2, 3, 4, 9], limit=4) == 4
    assert kv.tags[b] == {0, 1, 2, 3}  # loaded, then cut to the shared prefix


def test_a_shared_entry_stays_while_its_borrower_runs() -> None:
    kv = FakeKv()
    pool = SeqPool(4, kv, stash_bytes=1000, idle_after=4)
    a = _kept(pool, kv, [1, 2, 3, 4])
    b = pool.acquire()
    assert b is not None and pool.attach(b, [1, 2, 3, 7], limit=3) == 3
    pool.age(100)
    assert a in pool.entries and len(pool.stash) == 0
    pool.release(b)
    pool.age(4)
    assert a not in pool.entries and len(pool.stash) == 1


def test_resident_entry_wins_a_tie_and_stash_keeps_within_capacity() -> None:
    kv = FakeKv()
    pool = SeqPool(6, kv, stash_bytes=8, idle_after=1)
    _kept(pool, kv, [1, 2, 3, 4, 5])
    pool.age(1)
    _kept(pool, kv, [7, 8, 9, 10, 11])
    pool.age(1)  # the second stashed entry pushes the first out: 5 + 5 bytes > 8
    assert [i.tokens for i in pool.stash.items.values()] == [[7, 8, 9, 10, 11]]
    b = pool.acquire()
    assert b is not None and pool.attach(b, [1, 2, 3, 4, 5, 6], limit=5) == 0
    c = _kept(pool, kv, [7, 8, 9, 10, 11, 12])  # covers the stashed one, which goes
    assert len(pool.stash) == 0
    d = pool.acquire()
    assert d is not None and pool.attach(d, [7, 8, 9, 10, 11, 12, 13], limit=6) == 6
    assert pool.borrowed[d] == c


def test_a_stashed_prefix_that_cannot_fit_is_recomputed() -> None:
    kv = FakeKv()
    pool = SeqPool(4, kv, stash_bytes=1000, idle_after=1)
    _kept(pool, kv, [1, 2, 3, 4, 5, 6])
    pool.age(1)
    kv.room = 3
    b = pool.acquire()
    assert b is not None and pool.attach(b, [1, 2, 3, 4, 5, 6, 7], limit=6) == 0
    assert kv.tags.get(b, set()) == set()


def test_a_prefix_in_steady_use_stays_resident_longer() -> None:
    kv = FakeKv()
    pool = SeqPool(6, kv, stash_bytes=1000, idle_after=4)
    system = [1, 2, 3, 4]
    _kept(pool, kv, system)
    for question in (10, 11, 12):  # three requests share the system prompt, each kept after
        seq = pool.acquire()
        assert seq is not None and pool.attach(seq, [*system, question, 99], limit=5) == 4
        kv.fill(seq, 6)
        pool.keep(seq, [*system, question])
    hot = max(pool.entries.values(), key=lambda e: e.hits)
    assert hot.hits >= 3
    pool.age(4)  # idle_after for an entry that never served a hit
    assert hot.seq in pool.entries
    pool.age(4 << 6)
    assert hot.seq not in pool.entries
    back = next(i for i in pool.stash.items.values() if i.tokens == hot.tokens)
    assert back.hits == hot.hits  # the count travels with it to RAM


def test_a_dropped_source_is_forgotten_by_its_borrowers() -> None:
    kv = FakeKv()
    pool = SeqPool(3, kv, stash_bytes=1000, idle_after=1)
    a = _kept(pool, kv, [1, 2, 3])
    b = pool.acquire()
    assert b is not None and pool.attach(b, [1, 2, 3, 4], limit=3) == 3
    assert pool.evict_one() and b not in pool.borrowed
    c = _kept(pool, kv, [7, 8, 9])  # reuses the freed id
    assert c == a
    pool.age(1)
    assert c not in pool.entries  # not held back as if b still shared it


def test_namespaces_attach_only_to_their_own_or_shared_prefixes() -> None:
    kv = FakeKv()
    pool = SeqPool(8, kv, stash_bytes=1 << 20, idle_after=1)
    a = pool.acquire()
    assert a is not None
    kv.fill(a, 6)
    pool.keep(a, [1, 2, 3, 4, 5, 6], namespace="u:ann")
    b = pool.acquire()
    assert b is not None
    assert pool.attach(b, [1, 2, 3, 4, 5, 6, 7], limit=6, namespace="u:bob") == 0
    assert pool.attach(b, [1, 2, 3, 4, 5, 6, 7], limit=6, namespace="u:ann") == 6
    pool.release(b)
    s = pool.acquire()
    assert s is not None
    kv.fill(s, 3)
    pool.keep(s, [1, 2, 3], namespace=SHARED)  # not dropped as a prefix of ann's entry
    c = pool.acquire()
    assert c is not None
    assert pool.attach(c, [1, 2, 3, 4, 9], limit=4, namespace="u:bob") == 3
    pool.release(c)
    # In the stash too: ann's entry moves to RAM and is still hers alone.
    pool.age(100)
    assert pool.stash and a not in pool.entries
    d = pool.acquire()
    assert d is not None
    assert pool.attach(d, [1, 2, 3, 4, 5, 6, 7], limit=6, namespace="u:bob") == 3  # the shared part
    pool.release(d)
    e = pool.acquire()
    assert e is not None
    assert pool.attach(e, [1, 2, 3, 4, 5, 6, 7], limit=6, namespace="u:ann") == 6
