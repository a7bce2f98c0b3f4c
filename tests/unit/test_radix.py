import random

from llamay.kv.radix import RadixTree


def brute(entries: dict[str, list[int]], q: list[int]) -> int:
    best = 0
    for toks in entries.values():
        n = 0
        while n < min(len(toks), len(q)) and toks[n] == q[n]:
            n += 1
        best = max(best, n)
    return best


def test_longest_prefix_matches_brute_force_under_random_inserts_and_removes() -> None:
    rng = random.Random(0)
    tree = RadixTree()
    entries: dict[str, list[int]] = {}
    for step in range(2000):
        op = rng.random()
        if op < 0.5 or not entries:
            base = rng.choice(list(entries.values())) if entries and rng.random() < 0.7 else []
            toks = base[: rng.randint(0, len(base))] + [rng.randint(0, 4) for _ in range(rng.randint(1, 6))]
            key = f"k{step}"
            tree.insert(key, toks)
            entries[key] = toks
        elif op < 0.7:
            key = rng.choice(list(entries))
            tree.remove(key)
            del entries[key]
        q = [rng.randint(0, 4) for _ in range(rng.randint(0, 10))]
        if entries and rng.random() < 0.5:
            src = rng.choice(list(entries.values()))
            q = src[: rng.randint(0, len(src))] + q
        m = tree.longest(q)
        want = brute(entries, q)
        assert (m.length if m else 0) == want
        if m:
            held = entries[m.holder]
            assert held[: m.length] == q[: m.length]
    assert len(tree) == len(entries)


def test_prefer_picks_the_most_recent_holder() -> None:
    tree = RadixTree()
    tree.insert("a", [1, 2, 3])
    tree.insert("b", [1, 2, 3, 4])
    m = tree.longest([1, 2, 9], prefer={"a": 1.0, "b": 2.0})
    assert m is not None and m.length == 2 and m.holder == "b"
    m = tree.longest([1, 2, 9], prefer={"a": 3.0, "b": 2.0})
    assert m is not None and m.holder == "a"


def test_no_match_and_reinsert() -> None:
    tree = RadixTree()
    assert tree.longest([1]) is None
    tree.insert("a", [1, 2])
    tree.insert("a", [3, 4])
    assert tree.longest([1, 2]) is None
    assert tree.longest([3, 4, 5]).length == 2
