from llamay.kv.pool import SeqPool


class FakeKv:
    """Cells as (seq, pos) tags, like a unified KV cache."""

    def __init__(self) -> None:
        self.tags: dict[int, set[int]] = {}

    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> bool:
        self.tags.pop(seq, None)
        return True

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        held = self.tags.get(src, set())
        self.tags.setdefault(dst, set()).update(p for p in held if (p0 < 0 or p >= p0) and (p1 < 0 or p < p1))

    def fill(self, seq: int, n: int) -> None:
        self.tags.setdefault(seq, set()).update(range(n))


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
