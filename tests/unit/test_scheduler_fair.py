"""Fair share between tenants: the ledger, whose turn it is, who makes way, and who gives
way under KV pressure. Pure decisions, checked without weights, mostly by simulation."""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field

import pytest

from llamay.engine.scheduler import (
    SHARED_CHUNK,
    STEP_OVERHEAD,
    Ledger,
    Preemption,
    Seat,
    Sharing,
    StepCost,
    make_way,
    next_tenant,
    preempt,
    schedule,
)


@dataclass
class Job:
    tenant: str
    prompt: int
    output: int
    id: int
    done_prompt: bool = False
    generated: int = 0


@dataclass
class Sim:
    """A miniature engine over the pure decisions: `concurrency` seats; a started job pays
    its prompt at once and one token per step while it generates (as the engine charges)."""

    concurrency: int
    weights: dict[str, float]
    ledger: Ledger = field(default_factory=Ledger)
    queues: dict[str, deque[Job]] = field(default_factory=dict)
    running: list[Job] = field(default_factory=list)
    served: Counter[str] = field(default_factory=Counter)  # raw tokens
    started: list[str] = field(default_factory=list)  # tenants in order of start
    ids: int = 0

    def submit(self, tenant: str, prompt: int, output: int, n: int = 1) -> None:
        for _ in range(n):
            self.ids += 1
            self.queues.setdefault(tenant, deque()).append(Job(tenant, prompt, output, self.ids))

    def admit(self) -> None:
        active = {j.tenant: self.weights[j.tenant] for j in self.running}
        active |= {t: self.weights[t] for t, q in self.queues.items() if q}
        self.ledger.refresh(active)
        running = Counter(j.tenant for j in self.running)
        while len(self.running) < self.concurrency:
            heads = {t: q[0].id for t, q in self.queues.items() if q}
            if not heads:
                break
            t = next_tenant(heads, self.ledger, running)
            job = self.queues[t].popleft()
            self.running.append(job)
            running[t] += 1
            self.started.append(t)
            self.ledger.charge(t, job.prompt)
            self.served[t] += job.prompt

    def step(self, refill: int = 0) -> None:
        """One decode step; with `refill`, every tenant that submitted keeps that many waiting."""
        for q in self.queues.values():
            while len(q) < refill:
                self.ids += 1
                q.append(Job(q[0].tenant, q[0].prompt, q[0].output, self.ids))
        self.admit()
        for job in self.running:
            job.generated += 1
            self.ledger.charge(job.tenant, 1)
            self.served[job.tenant] += 1
        self.running = [j for j in self.running if j.generated < j.output]


def test_the_least_served_tenant_goes_next() -> None:
    ledger = Ledger()
    ledger.refresh({"a": 1.0, "b": 1.0, "c": 1.0})
    ledger.charge("a", 50)
    ledger.charge("b", 20)
    ledger.charge("c", 20)
    # b and c are equal: fewer running wins, then the earlier head
    assert next_tenant({"a": 1, "b": 2, "c": 3}, ledger, {"b": 2, "c": 1}) == "c"
    assert next_tenant({"a": 1, "b": 2, "c": 3}, ledger, {}) == "b"
    assert next_tenant({"a": 1}, ledger, {}) == "a"  # alone: never held back


def test_a_weighted_tenant_pays_less_per_token() -> None:
    ledger = Ledger()
    ledger.refresh({"a": 1.0, "b": 4.0})
    ledger.charge("a", 100)
    ledger.charge("b", 100)
    assert ledger.counter("a") == 100 and ledger.counter("b") == 25


def test_a_flood_does_not_keep_a_later_tenant_waiting() -> None:
    # a queues 200 requests first; b's 5, sent later, start at the next free seats
    sim = Sim(concurrency=4, weights={"a": 1.0, "b": 1.0})
    sim.submit("a", 1000, 8, n=200)
    for _ in range(20):
        sim.step()
    before = len(sim.started)
    sim.submit("b", 30, 8, n=5)
    for _ in range(40):
        sim.step()
    after = sim.started[before:]
    # b starts level with a (no credit for arriving late), so they alternate by cost: one
    # 1000-token prompt of a's pays for many of b's 30-token ones
    assert after[:6].count("b") == 5


@pytest.mark.parametrize("seed", range(6))
def test_backlogged_tenants_get_service_in_proportion_to_their_weights(seed: int) -> None:
    rng = random.Random(seed)
    tenants = {f"t{i}": float(rng.choice([1, 1, 2, 3])) for i in range(rng.randint(2, 4))}
    sim = Sim(concurrency=rng.randint(1, 8), weights=tenants)
    max_prompt, max_output = 300, 40
    for t in tenants:  # every tenant keeps more waiting than it can be served
        sim.submit(t, rng.randint(1, max_prompt), rng.randint(1, max_output), n=20)
    bound = 2 * (max_prompt + sim.concurrency * max_output) / min(tenants.values())
    for _ in range(3000):
        sim.step(refill=20)
        per_weight = [sim.served[t] / w for t, w in tenants.items()]
        assert max(per_weight) - min(per_weight) <= bound
    total = sum(sim.served.values())
    for t, w in tenants.items():  # the shares themselves, within a few requests
        share = sim.served[t] / total
        assert abs(share - w / sum(tenants.values())) < 0.05


def test_a_single_tenant_gets_every_seat() -> None:
    sim = Sim(concurrency=8, weights={"solo": 0.5})
    sim.submit("solo", 100, 50, n=30)
    sim.step()
    assert len(sim.running) == 8
    seats = [Seat("solo", True, 10) for _ in range(8)]
    assert make_way(seats, "solo", sim.ledger) is None  # nobody to make way for


def test_a_returning_tenant_is_lifted_to_the_least_active_counter() -> None:
    ledger = Ledger()
    ledger.refresh({"a": 1.0})
    ledger.charge("a", 5000)  # a had the engine to itself: that costs it nothing later
    ledger.refresh({"a": 1.0, "b": 1.0})
    assert ledger.counter("b") == ledger.counter("a") == 5000  # no banked credit for b
    ledger.charge("b", 300)
    ledger.refresh({"a": 1.0})  # b leaves owing 300 more than a
    ledger.charge("a", 100)
    ledger.refresh({"a": 1.0, "b": 1.0})
    assert ledger.counter("b") == 5300  # a debt is kept
    ledger.refresh({"b": 1.0})  # a leaves at 5100, below the floor (b's 5300): forgotten
    assert "a" not in ledger.served and ledger.floor == 5300
    ledger.refresh({})  # nobody active: the floor stays
    ledger.refresh({"c": 1.0})
    assert ledger.counter("c") == ledger.floor == 5300


def test_ledger_invariants_hold_under_random_traffic() -> None:
    rng = random.Random(11)
    ledger = Ledger()
    names = ["a", "b", "c", "d", "e"]
    for _ in range(5000):
        before = dict(ledger.served)
        was, floor = ledger.active, ledger.floor
        active = {t: float(rng.choice([1, 2])) for t in names if rng.random() < 0.5}
        ledger.refresh(active)
        assert ledger.floor >= floor
        for t in set(active) - was:
            assert ledger.counter(t) >= ledger.floor
            assert ledger.counter(t) >= before.get(t, 0.0)  # a debt is never forgiven
        for t in ledger.served:  # only active tenants and debtors are kept
            assert t in ledger.active or ledger.served[t] > ledger.floor
        for t in ledger.active:
            if rng.random() < 0.7:
                ledger.charge(t, rng.randint(1, 200))


def test_make_way_gives_a_tenant_with_nothing_running_a_seat() -> None:
    ledger = Ledger()
    ledger.refresh({"a": 1.0, "b": 1.0})
    ledger.charge("a", 500)
    seats = [Seat("a", False, 900), Seat("a", True, 300), Seat("a", True, 40), Seat("a", False, 5)]
    assert make_way(seats, "b", ledger) == 2  # movable, and the least computed
    assert make_way([Seat("a", False, 1)] * 4, "b", ledger) is None  # all generating: b waits


def test_make_way_never_favours_a_tenant_served_more() -> None:
    ledger = Ledger()
    ledger.refresh({"a": 1.0, "b": 1.0})
    ledger.charge("b", 10)
    assert make_way([Seat("a", True, 5)] * 4, "b", ledger) is None


def test_a_tenant_is_given_seats_up_to_its_weighted_share_and_no_further() -> None:
    ledger = Ledger()
    ledger.refresh({"a": 1.0, "b": 1.0})
    seats = [Seat("a", True, 5)] * 7 + [Seat("b", True, 5)]
    given = 0
    while (i := make_way(seats, "b", ledger)) is not None:  # b has work waiting throughout
        seats = seats[:i] + seats[i + 1 :] + [Seat("b", True, 0)]
        given += 1
    assert given == 3 and Counter(s.tenant for s in seats) == {"a": 4, "b": 4}
    assert make_way(seats[:7], "b", ledger) is None  # 4 of a's against 3 of b's: b waits
    ledger.refresh({"a": 1.0, "b": 3.0})  # weight 3 of 4: six of eight seats
    seats = [Seat("a", True, 5)] * 8
    for _ in range(6):
        i = make_way(seats, "b", ledger)
        assert i is not None
        seats = seats[:i] + seats[i + 1 :] + [Seat("b", True, 0)]
    assert make_way(seats, "b", ledger) is None


def test_counters_within_the_slack_count_as_equal() -> None:
    ledger = Ledger()
    ledger.refresh({"a": 1.0, "b": 1.0})
    ledger.charge("b", 40)  # b's chat was just read, a step's budget is 512
    seats = [Seat("a", True, 5)] * 6 + [Seat("b", False, 40)]
    assert make_way(seats, "b", ledger) is None
    assert make_way(seats, "b", ledger, slack=512) is not None
    ledger.charge("b", 1000)  # far ahead: b waits for a to catch up
    assert make_way(seats, "b", ledger, slack=512) is None
    # a free seat: a is served least, but within the slack b holds fewer than its share
    assert next_tenant({"a": 1, "b": 2}, ledger, {"a": 6, "b": 1}) == "a"
    ledger.charge("a", 1000)
    assert next_tenant({"a": 1, "b": 2}, ledger, {"a": 6, "b": 1}, slack=512) == "b"
    assert next_tenant({"a": 1, "b": 2}, ledger, {"a": 6, "b": 1}) == "a"


def test_make_way_respects_weights() -> None:
    ledger = Ledger()
    ledger.refresh({"a": 3.0, "b": 1.0})
    # a (weight 3) gives up one of k seats only if (k - 1) / 3 >= 1 / 1
    assert make_way([Seat("a", True, 5)] * 3, "b", ledger) is None
    assert make_way([Seat("a", True, 5)] * 4, "b", ledger) is not None


def test_make_way_never_undoes_itself() -> None:
    rng = random.Random(5)
    for _ in range(3000):
        weights = {t: float(rng.choice([1, 2, 3])) for t in "abc"}
        ledger = Ledger()
        ledger.refresh(weights)
        for t in weights:
            ledger.charge(t, rng.randint(0, 3) * 100)
        seats = [
            Seat(rng.choice("abc"), rng.random() < 0.7, rng.randint(0, 99)) for _ in range(rng.randint(1, 9))
        ]
        newcomer = rng.choice("abc")
        i = make_way(seats, newcomer, ledger)
        if i is None:
            continue
        victim = seats[i]
        assert victim.movable and victim.tenant != newcomer
        assert ledger.counter(victim.tenant) >= ledger.counter(newcomer)
        after = [s for j, s in enumerate(seats) if j != i] + [Seat(newcomer, True, 0)]
        back = make_way(after, victim.tenant, ledger)
        assert back is None or after[back].tenant != newcomer


@dataclass
class Run:
    n_past: int
    n_tokens: int
    n_prompt: int

    @property
    def n_generated(self) -> int:
        return max(0, self.n_tokens - self.n_prompt)


def test_kv_pressure_puts_back_the_most_served_tenants_reader() -> None:
    running = [Run(10, 40, 40), Run(5, 50, 50), Run(30, 31, 20)]
    # unweighted: the last reader in the plan
    assert preempt(running, [0, 1, 2]) == Preemption(1, requeue=True)
    # the tenant of request 0 has been served most: its reader goes back
    assert preempt(running, [0, 1, 2], served=[900.0, 100.0, 100.0]) == Preemption(0, requeue=True)


def test_kv_pressure_ends_the_most_served_tenants_longest_when_nobody_reads() -> None:
    running = [Run(300, 301, 10), Run(50, 51, 10), Run(80, 81, 5)]
    assert preempt(running, [0, 1, 2]) == Preemption(0, requeue=False)
    assert preempt(running, [0, 1, 2], served=[10.0, 500.0, 500.0]) == Preemption(2, requeue=False)


@dataclass
class S:
    n_past: int
    n_tokens: int


def test_a_short_prompt_is_read_in_the_next_step_beside_another_tenants_long_ones() -> None:
    seqs = [S(0, 900), S(0, 900), S(0, 900), S(9, 10), S(0, 30)]
    tenants = ["a", "a", "a", "a", "b"]
    plan = schedule(seqs, 128, Sharing(tenants))
    assert [(p.index, p.count) for p in plan] == [(3, 1), (0, 97), (4, 30)]
    # without tenants: arrival order, and b's prompt waits for a's three
    assert [(p.index, p.count) for p in schedule(seqs, 128)] == [(3, 1), (0, 127)]


def test_long_prompts_share_the_budget_by_weight() -> None:
    seqs = [S(0, 900), S(0, 900), S(0, 900)]
    plan = schedule(seqs, 400, Sharing(["a", "a", "b"]))
    assert [(p.index, p.count) for p in plan] == [(0, 200), (2, 200)]
    plan = schedule(seqs, 400, Sharing(["a", "a", "b"], {"a": 3.0, "b": 1.0}))
    assert [(p.index, p.count) for p in plan] == [(0, 300), (2, 100)]
    # a single tenant: everything, as without tenants
    assert schedule(seqs, 400, Sharing(["a"] * 3)) == schedule(seqs, 400)


def test_a_tenant_that_fell_behind_catches_up_in_the_prompt_budget() -> None:
    seqs = [S(0, 900), S(0, 900), S(0, 900)]
    tenants = ["a", "a", "b"]
    behind = schedule(seqs, 400, Sharing(tenants, served={"a": 1000.0, "b": 400.0}))
    assert [(p.index, p.count) for p in behind] == [(2, 400)]  # b first, all of it
    close = schedule(seqs, 400, Sharing(tenants, served={"a": 1000.0, "b": 900.0}))
    assert [(p.index, p.count) for p in close] == [(0, 150), (2, 250)]  # b's 100 first, then even
    weighted = schedule(seqs, 400, Sharing(tenants, {"a": 1.0, "b": 3.0}, served={"a": 50.0, "b": 0.0}))
    # b rises 50 (150 tokens at weight 3), then the other 250 go 1:3 (62 and 187), and the
    # token rounding leaves over goes to the first prompt in arrival order
    assert [(p.index, p.count) for p in weighted] == [(0, 63), (2, 337)]
    # a tenant that would fall behind keeps its share over many steps: the counters stay level
    served = {"a": 0.0, "b": 0.0}
    reads = [S(0, 10_000), S(0, 10_000), S(0, 300)]
    for _ in range(40):
        plan = schedule(reads, 64, Sharing(tenants, served=dict(served)))
        for sl in plan:
            reads[sl.index].n_past += sl.count
            served[tenants[sl.index]] += sl.count
        assert abs(served["a"] - served["b"]) <= 64 or reads[2].n_past == reads[2].n_tokens


def test_a_light_tenants_prompt_is_read_whole_and_alone_then_others_follow() -> None:
    seqs = [S(0, 900), S(9, 10), S(0, 35), S(0, 900)]
    tenants = ["a", "a", "b", "a"]
    alone = schedule(seqs, 512, Sharing(tenants, light=frozenset({"b"})))
    assert [(p.index, p.count) for p in alone] == [(1, 1), (2, 35)]  # a's decode token rides along
    beside = schedule(seqs, 512, Sharing(tenants, light=frozenset({"b"}), light_alone=False))
    assert [(p.index, p.count) for p in beside] == [(1, 1), (0, 476), (2, 35)]


def test_a_prompt_cap_keeps_steps_short() -> None:
    seqs = [S(0, 900), S(0, 900), S(9, 10)]
    plan = schedule(seqs, 512, Sharing(["a", "c", "a"], prompt_cap=32))
    assert [(p.index, p.count) for p in plan] == [(2, 1), (0, 16), (1, 16)]  # decode tokens are not capped
    light = schedule([S(0, 40), S(0, 900)], 512, Sharing(["b", "a"], light=frozenset({"b"}), prompt_cap=32))
    assert [(p.index, p.count) for p in light] == [(0, 40)]  # a chat's prompt is read whole


def test_shared_budgets_keep_every_rule_of_the_plan() -> None:
    rng = random.Random(2)
    for _ in range(1500):
        n = rng.randint(1, 6)
        seqs = [S(0, rng.randint(2, 80)) for _ in range(n)]
        tenants = [rng.choice("abc") for _ in range(n)]
        weights = {t: float(rng.choice([1, 2, 4])) for t in "abc"}
        for _step in range(100):
            if all(s.n_tokens - s.n_past <= 0 for s in seqs):
                break
            budget = rng.randint(1, 60)
            light = frozenset(t for t in "abc" if rng.random() < 0.2)
            cap = rng.choice([None, None, rng.randint(2, 40)])
            alone = rng.random() < 0.5
            reading = [i for i, s in enumerate(seqs) if s.n_tokens - s.n_past > 1]
            demand: Counter[str] = Counter()
            for i in reading:
                if tenants[i] not in light:
                    demand[tenants[i]] += seqs[i].n_tokens - seqs[i].n_past
            n_decode = sum(1 for s in seqs if s.n_tokens - s.n_past == 1)
            light_demand = sum(seqs[i].n_tokens - seqs[i].n_past for i in reading if tenants[i] in light)
            plan = schedule(seqs, budget, Sharing(tenants, weights, light, alone, cap))
            assert sum(p.count for p in plan) <= budget
            assert len({p.index for p in plan}) == len(plan)  # one slice per sequence
            got: Counter[str] = Counter()
            light_read = heavy_read = 0
            for sl in plan:
                seq = seqs[sl.index]
                if sl.start + sl.count == seq.n_tokens and sl.start > 0:
                    assert sl.count >= 2
                assert sl.logits == (sl.start + sl.count == seq.n_tokens)
                if sl.index in reading:
                    if tenants[sl.index] in light:
                        light_read += sl.count
                    else:
                        heavy_read += sl.count
                        got[tenants[sl.index]] += sl.count
                seq.n_past += sl.count
            # light tenants' prompts first, whole as far as the budget goes
            assert light_read >= min(budget - min(budget, n_decode), light_demand) - n
            if light_read and alone:
                assert heavy_read == 0  # a light tenant's prompt is read in a step of its own
                continue
            if cap is not None:
                assert light_read + heavy_read <= max(cap, light_read)
            # work conserving, but for the token each prompt may keep for its final chunk
            room = budget - min(budget, n_decode) - light_read
            if cap is not None:
                room = min(room, max(0, cap - light_read))
            assert heavy_read >= min(room, sum(demand.values())) - n
            # max-min fair: tenants that got less than they wanted got equal shares per weight,
            # up to the rounding and the tokens kept back for final chunks
            short = [t for t in demand if got[t] < demand[t]]
            for t in short:
                for u in short:
                    assert got[t] / weights[t] >= got[u] / weights[u] - (n + 2)


def test_shared_steps_are_as_short_as_their_fixed_cost_allows() -> None:
    cost = StepCost()
    assert cost.prompt_cap() == SHARED_CHUNK  # nothing known yet
    for _ in range(50):
        cost.add(1, 0.007)  # a decode step: ~7 ms, whatever its size
        cost.add(512, 0.007 + 512 * 0.0032)  # a prompt step: 3.2 ms a token
        cost.add(40, 0.007 + 40 * 0.0032)
    cap = cost.prompt_cap()
    assert cost.fixed is not None and cost.per_token is not None
    step = cost.fixed + cap * cost.per_token
    # the shortest step whose fixed cost is within STEP_OVERHEAD of it
    assert cost.fixed / step <= STEP_OVERHEAD < cost.fixed / (step - cost.per_token)
    busy = StepCost()
    for _ in range(50):  # a machine where each step costs far more to start
        busy.add(1, 0.4)
        busy.add(512, 0.4 + 512 * 0.03)
    assert busy.prompt_cap() > cap
    assert StepCost(fixed=0.0001, per_token=0.01).prompt_cap() == SHARED_CHUNK  # never below the floor
