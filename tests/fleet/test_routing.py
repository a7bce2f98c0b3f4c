"""The routing policy and request hints without Ray: what the router decides from what."""

from __future__ import annotations

import json
import random

from llamay.fleet.hints import BLOCK, RouteHint, prefix_hashes, read_hint, rewrite_context
from llamay.fleet.routing import FleetKnowledge, ReplicaView, rank

SYSTEM = {"role": "system", "content": "tenant rules " * 100}


def chat_hint(*messages: dict, model: str = "m", **extra: object) -> RouteHint:
    body = json.dumps({"model": model, "messages": list(messages), **extra}).encode()
    return read_hint("POST", "/v1/chat/completions", {}, body)


def test_prefix_hashes_share_exactly_the_common_full_blocks() -> None:
    a = prefix_hashes(b"x" * (BLOCK * 3) + b"tail-a")
    b = prefix_hashes(b"x" * (BLOCK * 3) + b"tail-b" * 50)
    assert len(a) == 3 and a == b[:3] and b[3] not in a
    assert prefix_hashes(b"y" + b"x" * (BLOCK * 3))[0] != a[0]


def test_hints_name_the_context_the_model_and_the_prompt() -> None:
    h = chat_hint(SYSTEM, {"role": "user", "content": "q"}, llamay_session="ctx_1")
    assert h.context == "ctx_1" and h.model == "m" and h.prefix == ()
    assert read_hint("GET", "/v1/contexts/ctx_2/snapshot", {}, b"").context == "ctx_2"
    assert read_hint("POST", "/v1/contexts/restore", {"model": "m2"}, b"\x00bin").context is None
    assert read_hint("POST", "/v1/contexts/restore", {"model": "m2"}, b"\x00bin").model == "m2"
    same = chat_hint(SYSTEM, {"role": "user", "content": "other question"})
    assert chat_hint(SYSTEM, {"role": "user", "content": "q"}).prefix[:5] == same.prefix[:5]
    assert chat_hint(SYSTEM, model="other").prefix[:1] != same.prefix[:1]
    assert read_hint("POST", "/v1/chat/completions", {}, b"not json") == RouteHint()


def test_rewrite_puts_the_local_id_in_the_path_or_the_body() -> None:
    h = read_hint("POST", "/v1/contexts/ctx_a/fork", {}, b"")
    assert rewrite_context("/v1/contexts/ctx_a/fork", b"", h, "ctx_b") == ("/v1/contexts/ctx_b/fork", b"")
    h = chat_hint(SYSTEM, llamay_session="ctx_a")
    path, body = rewrite_context("/v1/chat/completions", b"{}", h, "ctx_b")
    assert path == "/v1/chat/completions" and json.loads(body)["llamay_session"] == "ctx_b"
    assert json.loads(body)["messages"] == [SYSTEM]


def views(*loads: int) -> list[ReplicaView]:
    return [ReplicaView(f"r{i}", load, frozenset({"m"})) for i, load in enumerate(loads)]


def test_a_context_goes_to_its_holder_only_and_a_pin_to_its_replica() -> None:
    know = FleetKnowledge()
    know.learn("ctx_1", "r1", "ctx_local")
    know.set_live({"r0", "r1"}, views(0, 9))
    assert rank(RouteHint(context="ctx_1"), views(0, 9), know) == [["r1"]]
    assert know.holder("ctx_1") == ("r1", "ctx_local")
    reported = [ReplicaView("r0", 0, contexts=frozenset({"ctx_9"})), ReplicaView("r1", 0)]
    assert rank(RouteHint(context="ctx_9"), reported, know) == [["r0"]]
    assert rank(RouteHint(pin="r0"), views(5, 0), know) == [["r0"]]
    know.mark_dead("r1")
    assert know.holder("ctx_1") is None and know.holder_lost("ctx_1")
    assert all("r1" not in tier for tier in rank(RouteHint(context="ctx_1"), views(0, 0), know))


def test_prefix_affinity_is_bounded_by_load() -> None:
    know = FleetKnowledge()
    hint = chat_hint(SYSTEM, {"role": "user", "content": "q"})
    know.record_sent("r1", hint)
    assert rank(hint, views(0, 4), know)[0] == ["r1"]  # within the bound: affinity wins
    for seed in range(6):  # past it: two choices, the less loaded first, each a rank of its own
        tiers = rank(hint, views(0, 5, 0), know, rng=random.Random(seed))
        assert tiers[0] != ["r1"] and [len(t) for t in tiers[:2]] == [1, 1]
    other = chat_hint({"role": "system", "content": "another tenant " * 100})
    tiers = rank(other, views(0, 0, 0), know, rng=random.Random(2))
    assert [len(t) for t in tiers] == [1, 1, 1] and sorted(u for t in tiers for u in t) == ["r0", "r1", "r2"]


def test_model_aware_candidates() -> None:
    know = FleetKnowledge()
    vs = [ReplicaView("r0", 0, frozenset({"a"})), ReplicaView("r1", 3, frozenset({"b"}))]
    assert rank(RouteHint(model="b"), vs, know) == [["r1"]]
    assert rank(RouteHint(model="c"), vs, know) == [["r0"], ["r1"]]  # none has it: any, idlest first


def test_a_burst_of_new_tenants_is_spread_while_loads_read_the_same() -> None:
    # Ray's queue lengths lag in a burst, so every replica reads as idle; each new tenant is
    # claimed where it goes, and the next goes where fewer prompt blocks were placed.
    know = FleetKnowledge()
    placed = []
    for t in range(8):
        hint = chat_hint({"role": "system", "content": f"tenant {t} rules " * 100})
        first = rank(hint, views(0, 0), know, rng=random.Random(t))[0][0]
        know.claim(first, hint)
        placed.append(first)
    # balanced at every point of the burst, not only at its end
    assert all(abs(placed[:n].count("r0") - placed[:n].count("r1")) <= 1 for n in range(1, 9))
    # a later request of a placed tenant follows its prefix
    again = chat_hint(
        {"role": "system", "content": "tenant 3 rules " * 100}, {"role": "user", "content": "q"}
    )
    assert rank(again, views(0, 0), know)[0] == [placed[3]]


def test_a_claim_taken_back_leaves_what_was_indexed_before() -> None:
    # A request claimed on one replica and turned away there must not leave its prefix
    # indexed on it: the tenant's next request would follow it to a cache that never read it.
    know = FleetKnowledge()
    base = chat_hint(SYSTEM)
    longer = chat_hint(SYSTEM, {"role": "user", "content": "a question long enough " * 20})
    know.record_sent("r0", base)
    added = know.claim("r0", longer)
    assert added and set(added) == set(longer.prefix) - set(base.prefix)
    know.unclaim("r0", added)
    assert know.match("r0", longer.prefix) == know.match("r0", base.prefix) == len(base.prefix)
    assert know.claim("r0", base) == []  # all there already


def test_a_new_ingress_routes_by_what_the_replicas_report() -> None:
    """An ingress that knows nothing of its own (just started, or another node's) sends a
    prompt to the replica that reports its prefix, and a context to the replica that
    reports holding it: the routing knowledge is rebuilt from the replicas' reports."""
    hint = chat_hint(SYSTEM, {"role": "user", "content": "q"})
    fresh = FleetKnowledge()
    views = [ReplicaView("a", load=0), ReplicaView("b", load=0, prefixes=frozenset(hint.prefix[:4]))]
    for seed in range(8):
        assert rank(hint, views, fresh, rng=random.Random(seed))[0] == ["b"]
    # Partly reported: the longer run wins, whichever kind of knowledge it comes from.
    fresh.claim("a", RouteHint(prefix=hint.prefix[:2]))
    assert rank(hint, views, fresh)[0] == ["b"]
    fresh.claim("a", RouteHint(prefix=hint.prefix[:6]))
    assert rank(hint, views, fresh)[0] == ["a"]
    # Too far ahead in load, the reported replica loses its claim as a learned one would.
    busy = [ReplicaView("a", load=0), ReplicaView("b", load=9, prefixes=frozenset(hint.prefix))]
    assert rank(hint, busy, FleetKnowledge(), rng=random.Random(1))[0] == ["a"]
    on_b = RouteHint(context="ctx_0123")
    views = [ReplicaView("a"), ReplicaView("b", contexts=frozenset({"ctx_0123"}))]
    assert rank(on_b, views, FleetKnowledge()) == [["b"]]


def test_a_context_learned_on_a_dead_replica_follows_the_reports() -> None:
    """A context restored under its own id on a survivor is routed there by every ingress,
    even one that learned it on the replica that died."""
    know = FleetKnowledge()
    know.learn("ctx_7", "dead")
    know.set_live({"dead", "b"}, [ReplicaView("dead"), ReplicaView("b")])
    know.mark_dead("dead")
    views = [ReplicaView("b", contexts=frozenset({"ctx_7"}))]
    know.set_live({"b"}, views)
    assert know.holder_lost("ctx_7")
    assert rank(RouteHint(context="ctx_7"), views, know) == [["b"]]
    assert know.holder("ctx_7", views) == ("b", "ctx_7")
