"""The engine's decisions, as pure functions tested without weights: which tokens go into
the next decode (`schedule`, shared between tenants as `Sharing` says, in steps as short
as `StepCost` allows), which waiting requests start (`Admission`; whose turn it is by the
`Ledger` and `next_tenant`; who makes way by `make_way`), and which request gives way when
the KV cache is full (`preempt`).

Decode tokens of running sequences come first (one each, so generation never stalls
behind a long prompt), then prompt chunks, the budget shared fairly between tenants and
otherwise in arrival order.

A prompt's last token is never computed in a chunk of its own: llama.cpp gives that token
different logits when it is alone in its sequence's chunk than when it is computed with
its predecessors (measured: up to 0.44 on SmolLM2's logits), so a prompt's output would
depend on how it happened to be split. The final chunk always holds at least two tokens.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = [
    "MIN_FOLLOW",
    "Admission",
    "Ledger",
    "Preemptible",
    "Preemption",
    "Schedulable",
    "SHARED_CHUNK",
    "Seat",
    "Sharing",
    "StepCost",
    "Slice",
    "Verdict",
    "choose_leader",
    "common_prefix",
    "make_way",
    "next_tenant",
    "preempt",
    "schedule",
]


class Schedulable(Protocol):
    @property
    def n_past(self) -> int: ...  # tokens already in the KV cache

    @property
    def n_tokens(self) -> int: ...  # tokens known (prompt + sampled)


@dataclass(frozen=True)
class Slice:
    """Feed tokens [start, start + count) of `index`-th sequence; `logits` says whether the
    last of them needs logits (it completes what is known, so the next token is sampled)."""

    index: int
    start: int
    count: int
    logits: bool


# While a tenant waiting on a few short requests at a time (a chat) shares the engine with others,
# steps are kept short, since its next first token waits for the step in progress (on
# SmolLM2 on two idle cores a step of 512 prompt tokens takes ~1.6 s, one of 32 ~0.1 s).
# How short: at least SHARED_CHUNK prompt tokens, and enough that a step's fixed cost stays
# within STEP_OVERHEAD of its time (`StepCost.prompt_cap`).
SHARED_CHUNK = 32
STEP_OVERHEAD = 0.04


@dataclass
class StepCost:
    """What a step costs, learnt from the steps the engine runs (moving averages): `fixed`,
    the time a step takes whatever its size (the weights are read once a step), and
    `per_token`, the time per token of a large step. A step of a few tokens measures
    `fixed`; a step of LARGE_STEP tokens or more measures `per_token`; one in between,
    `fixed` given `per_token` (t = fixed + n * per_token)."""

    fixed: float | None = None
    per_token: float | None = None
    alpha: float = 0.1

    def add(self, n_tokens: int, seconds: float) -> None:
        if n_tokens >= LARGE_STEP:
            self.per_token = _average(self.per_token, seconds / n_tokens, self.alpha)
        elif n_tokens <= SMALL_STEP:
            self.fixed = _average(self.fixed, seconds, self.alpha)
        elif self.per_token is not None:
            self.fixed = _average(self.fixed, max(0.0, seconds - n_tokens * self.per_token), self.alpha)

    def prompt_cap(self) -> int:
        """Prompt tokens a shared step reads at most: the fewest for which the fixed cost is
        at most STEP_OVERHEAD of the step, and never fewer than SHARED_CHUNK (the floor
        too while nothing is known). A machine where steps cost more to start gets longer
        steps, so sharing never costs much more than STEP_OVERHEAD of the throughput."""
        if not self.fixed or not self.per_token:
            return SHARED_CHUNK
        need = self.fixed * (1 - STEP_OVERHEAD) / (STEP_OVERHEAD * self.per_token)
        return max(SHARED_CHUNK, math.ceil(need))


SMALL_STEP = 8
LARGE_STEP = 128


def _average(old: float | None, new: float, alpha: float) -> float:
    return new if old is None else old + alpha * (new - old)


@dataclass(frozen=True)
class Sharing:
    """How one step is shared between tenants (see `schedule`). `tenants[i]` is the tenant
    of the i-th sequence; `weights` maps a tenant to its weight (default 1). `light`: the
    tenants with a few short sequences in flight (a chat client; `tenants.LIGHT_PROMPT`),
    whose prompts are read whole in a step
    of their own when `light_alone` (the engine alternates, so nobody else's prompts wait
    more than every other step). `prompt_cap`: prompt tokens a step reads at most (None: the
    whole budget). `served`: each tenant's `Ledger` counter (default 0): the prompt budget
    goes first to the tenants served least, so one that fell behind catches up."""

    tenants: Sequence[str]
    weights: Mapping[str, float] = field(default_factory=dict)
    light: frozenset[str] = frozenset()
    light_alone: bool = True
    prompt_cap: int | None = None
    served: Mapping[str, float] = field(default_factory=dict)


def schedule(seqs: Sequence[Schedulable], budget: int, sharing: Sharing | None = None) -> list[Slice]:
    """Plan one step. Never exceeds `budget` tokens in total. Decode tokens come first.

    Without `sharing` the rest of the budget goes to prompt chunks in arrival order. With it,
    the prompts of light tenants come first, whole, and with `light_alone` without any other
    prompt in the step (so a chat's first token waits for a step as short as its own prompt).
    Otherwise the prompt budget (at most `prompt_cap`) is shared between the tenants with
    prompts to read by water-filling their counters (`served`): the least served tenant's
    share comes first, until its counter reaches the next one's, then both rise together in
    proportion to their weights, and so on; with equal counters that is max-min fair by
    weight. A tenant that needs less than its share leaves the rest to the others. Each tenant's share goes to its own prompts
    in arrival order, and what is left over (rounding, the two-token final chunk) to any
    prompt in arrival order. So one tenant's prompt is read in the next step however many
    long ones another tenant is reading. Slices are listed decode tokens first, then prompt
    chunks in arrival order."""
    plan: list[Slice] = []
    left = budget
    prefill: list[int] = []
    for i, s in enumerate(seqs):
        pending = s.n_tokens - s.n_past
        if pending <= 0:
            continue
        if pending == 1:
            if left == 0:
                break
            plan.append(Slice(i, s.n_past, 1, True))
            left -= 1
        else:
            prefill.append(i)
    take = dict.fromkeys(prefill, 0)
    if sharing is not None and prefill:
        left = _share(seqs, prefill, left, sharing, take)
    for i in prefill:
        if left == 0:
            break
        more = _chunk(seqs[i].n_tokens - seqs[i].n_past, take[i] + left)
        left -= more - take[i]
        take[i] = more
    for i in prefill:
        if take[i] > 0:
            s = seqs[i]
            plan.append(Slice(i, s.n_past, take[i], take[i] == s.n_tokens - s.n_past))
    return plan


def _share(
    seqs: Sequence[Schedulable], prefill: list[int], left: int, sharing: Sharing, take: dict[int, int]
) -> int:
    """Fill `take` (prompt tokens per sequence) as `schedule` says; the budget left for the
    arrival-order pass that follows (0 when that pass must add nothing)."""
    tenants = sharing.tenants
    light = [i for i in prefill if tenants[i] in sharing.light]
    for i in light:
        take[i] = _chunk(seqs[i].n_tokens - seqs[i].n_past, left)
        left -= take[i]
    if light and sharing.light_alone or left == 0:
        return 0
    room = left if sharing.prompt_cap is None else min(left, max(0, sharing.prompt_cap - sum(take.values())))
    demand: dict[str, int] = {}
    for i in prefill:
        if tenants[i] not in sharing.light:
            demand[tenants[i]] = demand.get(tenants[i], 0) + seqs[i].n_tokens - seqs[i].n_past
    shares = _fill(room, demand, sharing.weights, sharing.served)
    for i in prefill:
        t = tenants[i]
        if t in shares:
            take[i] = _chunk(seqs[i].n_tokens - seqs[i].n_past, shares[t])
            shares[t] -= take[i]
            room -= take[i]
    return room


def _chunk(pending: int, room: int) -> int:
    """How much of a prompt with `pending` tokens to read with `room` tokens of budget."""
    count = min(pending, room)
    if pending - count == 1:
        count -= 1  # leave two for the final chunk (see the module docstring)
    return max(count, 0)


def _fill(
    budget: int, demand: Mapping[str, int], weights: Mapping[str, float], served: Mapping[str, float]
) -> dict[str, int]:
    """`budget` tokens shared between tenants that want `demand` so that their counters
    (`served`, plus tokens / weight) end as level as the budget allows: the lowest rise
    first, then together with the next, by weight (`_split` among equals)."""
    alloc = dict.fromkeys(demand, 0)
    left = budget
    while left > 0:
        want = {t: demand[t] - alloc[t] for t in demand if demand[t] > alloc[t]}
        if not want:
            break
        level = {t: served.get(t, 0.0) + alloc[t] / weights.get(t, 1.0) for t in want}
        low = min(level.values())
        # within a token of the lowest counts as level, so two close tenants rise together
        lowest = {t: n for t, n in want.items() if level[t] <= low + 1 / weights.get(t, 1.0)}
        above = [v for t, v in level.items() if t not in lowest]
        give = left
        if above:  # raise the lowest to the next level, no further this round
            rise = (min(above) - low) * sum(weights.get(t, 1.0) for t in lowest)
            give = min(left, max(len(lowest), math.ceil(rise)))
        got = _split(give, lowest, weights)
        spent = sum(got.values())
        if spent == 0:
            break  # rounding left nothing to give: the caller hands the rest out in arrival order
        for t, n in got.items():
            alloc[t] += n
        left -= spent
    return alloc


def _split(budget: int, demand: Mapping[str, int], weights: Mapping[str, float]) -> dict[str, int]:
    """`budget` tokens shared max-min fairly by weight between tenants that want `demand`."""
    alloc = dict.fromkeys(demand, 0)
    active = [t for t in demand if demand[t] > 0]
    left = budget
    while active and left > 0:
        total = sum(weights.get(t, 1.0) for t in active)
        met = [t for t in active if demand[t] - alloc[t] <= left * weights.get(t, 1.0) / total]
        if not met:
            for t in active:
                give = int(left * weights.get(t, 1.0) / total)
                alloc[t] += give
            break
        for t in met:
            left -= demand[t] - alloc[t]
            alloc[t] = demand[t]
            active.remove(t)
    return alloc


Verdict = Literal["admit", "drop", "wait"]


@dataclass
class Admission:
    """One admission pass over the waiting queue, head first.

    `verdict` answers for the request at the head of the queue: "admit" it, "drop" it (it
    was aborted while waiting), or "wait" (stop the pass: no slot, or its prompt does not
    fit beside the running requests' KV). The queue is first come, first served: a request
    that must wait holds back the ones behind it, so a long prompt is never starved by
    shorter ones. A request is admitted alone even if it would not fit beside others, so
    the queue always moves (the engine refuses prompts longer than the context at submit).
    After a request really starts, `started` counts it.
    """

    n_running: int
    used: int  # KV positions the running requests may need (tokens known so far)
    concurrency: int
    n_ctx: int

    @classmethod
    def begin(cls, running: Sequence[Schedulable], concurrency: int, n_ctx: int) -> Admission:
        return cls(len(running), sum(s.n_tokens for s in running), concurrency, n_ctx)

    def verdict(self, n_prompt: int, aborted: bool) -> Verdict:
        if self.n_running >= self.concurrency:
            return "wait"
        if aborted:
            return "drop"
        if self.n_running and self.used + n_prompt + 1 > self.n_ctx:
            return "wait"  # until running requests free KV
        return "admit"

    def started(self, n_prompt: int) -> None:
        """A request of `n_prompt` tokens is now running (it needs one more to generate)."""
        self.n_running += 1
        self.used += n_prompt + 1


# A request waits for another to compute a shared prefix only if it gains this many positions.
MIN_FOLLOW = 32


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """How many leading tokens `a` and `b` share, at most `limit` (C-speed comparisons)."""
    hi = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    if hi <= 0 or a[:hi] == b[:hi]:
        return max(hi, 0)
    lo = 0  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def choose_leader(
    tokens: Sequence[int], have: int, limit: int, prompts: Sequence[Sequence[int]]
) -> tuple[int, int] | None:
    """Which running request's prompt (`prompts`, the ones a new request may share) to take
    the first positions of `tokens` from: the index of the one sharing the longest prefix
    (at most `limit` tokens) and that length, when it beats the `have` positions the request
    already holds by at least MIN_FOLLOW; else None. Eight clients sending documents under
    one instruction then compute the instruction once, not eight times side by side."""
    best: tuple[int, int] | None = None
    for i, p in enumerate(prompts):
        n = common_prefix(tokens, p, limit)
        if n >= have + MIN_FOLLOW and (best is None or n > best[1]):
            best = (i, n)
    return best


class Preemptible(Protocol):
    @property
    def n_past(self) -> int: ...  # tokens already in the KV cache

    @property
    def n_prompt(self) -> int: ...

    @property
    def n_generated(self) -> int: ...


@dataclass(frozen=True)
class Preemption:
    """Running request `index` gives way: with `requeue` it goes back to the head of the
    queue (its KV is freed and its prompt computed again later); otherwise it ends with
    reason "length"."""

    index: int
    requeue: bool


def preempt(
    running: Sequence[Preemptible], planned: Sequence[int], served: Sequence[float] | None = None
) -> Preemption:
    """Choose who gives way when a decode of the requests at `planned` (indexes into
    `running`, in plan order) found no KV room, after idle cached KV was freed. A request
    still reading its prompt, with nothing generated yet, loses the least: one such is put
    back, unless it is the only running request. Otherwise a request ends, the one holding
    the most KV. `served[i]` is how much the tenant of `running[i]` has been served (its
    `Ledger` counter): the choice is made among the most served tenant's requests first,
    and only among equals is it the last reader in the plan, or the longest request (the
    first of equals). Without `served` every tenant counts as equal. `running` must not be
    empty."""
    rank = served if served is not None else [0.0] * len(running)
    reading = [i for i in planned if running[i].n_past < running[i].n_prompt and running[i].n_generated == 0]
    if reading and len(running) > 1:
        order = {i: n for n, i in enumerate(reading)}
        return Preemption(max(reading, key=lambda i: (rank[i], order[i])), requeue=True)
    longest = max(range(len(running)), key=lambda i: (rank[i], running[i].n_past))
    return Preemption(longest, requeue=False)


@dataclass
class Ledger:
    """Virtual token counters (VTC, from "Fairness in Serving Large Language Models",
    Sheng et al., OSDI 2024): how much each tenant has been served, so the next waiting
    sequence to start comes from the tenant served least (`next_tenant`).

    A tenant pays `tokens / weight` (`charge`) for every position computed for it, as it is
    computed: the prompt positions read (what the prefix cache, its context or a running
    request's prompt gives it is free) and each generated token fed back. So its counter
    follows what it was served, step by step, however its sequences start, make way or end,
    and the engine's per-tenant token counts are the same figures. A weight-2 tenant pays half as much,
    so it is served twice as much. A tenant is active while it has sequences waiting or
    running; `refresh` is told which, with their weights, before every admission pass.

    Invariants:
    - `floor` never decreases: it is the largest value the least counter among active
      tenants has had (kept while nobody is active).
    - A tenant that becomes active starts at `floor` or above: time away earns no credit,
      and a tenant that left owing (above `floor`) still owes when it returns.
    - The ledger keeps only active tenants and inactive ones above `floor`; an inactive
      tenant at or below `floor` is forgotten, as it would be lifted to `floor` anyway.
    - A tenant alone is never held back: the counters only order tenants that wait.
    """

    floor: float = 0.0
    served: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    active: frozenset[str] = frozenset()

    def refresh(self, active: Mapping[str, float]) -> None:
        """`active` maps each tenant with sequences waiting or running to its weight."""
        was, now = self.active, frozenset(active)
        staying = was & now
        pool = staying or was
        if pool:
            self.floor = max(self.floor, min(self.served[t] for t in pool))
        for t in now - was:
            self.served[t] = max(self.served.get(t, 0.0), self.floor)
        for t in was - now:
            self.weights.pop(t, None)
        for t in [t for t, c in self.served.items() if c <= self.floor and t not in now]:
            del self.served[t]  # a debt the floor has caught up with
        for t, w in active.items():
            self.weights[t] = w
        self.active = now

    def charge(self, tenant: str, tokens: float) -> None:
        """`tenant` (active) was served `tokens` (negative: returned), at its weight."""
        self.served[tenant] = self.served.get(tenant, self.floor) + tokens / self.weight(tenant)

    def counter(self, tenant: str) -> float:
        return self.served.get(tenant, self.floor)

    def weight(self, tenant: str) -> float:
        return self.weights.get(tenant, 1.0)


def next_tenant(
    heads: Mapping[str, int], ledger: Ledger, running: Mapping[str, int], slack: float = 0.0
) -> str:
    """Whose waiting sequence starts next, among `heads` (tenant -> the arrival number of
    its first waiting sequence; not empty): the least served tenant by `ledger`, counting
    counters within `slack` of the least as equal (a step charges up to its budget at once);
    among equals, one that holds fewer than its weighted share of the seats, i.e. that
    `make_way` would not take the seat back from for another of them; then the least served,
    the one with fewer sequences `running`, the one whose head came first. A tenant's own
    sequences start in arrival order."""
    least = min(ledger.counter(t) for t in heads)
    near = [t for t in heads if ledger.counter(t) <= least + slack]

    def share(t: str) -> float:
        return running.get(t, 0) / ledger.weight(t)

    def fits(t: str) -> bool:
        return all(share(t) < (running.get(u, 0) + 1) / ledger.weight(u) for u in near if u != t)

    return min(near, key=lambda t: (not fits(t), ledger.counter(t), running.get(t, 0), heads[t]))


@dataclass(frozen=True)
class Seat:
    """A running sequence as `make_way` sees it. `movable`: it is still reading its prompt,
    has generated nothing and runs on no context, so it can go back to the queue and
    start later from its own computed positions (kept as a cached prefix)."""

    tenant: str
    movable: bool
    n_past: int


def make_way(seats: Sequence[Seat], newcomer: str, ledger: Ledger, slack: float = 0.0) -> int | None:
    """The running sequence (index into `seats`) that goes back to the queue so that
    `newcomer`, the tenant whose turn it is, can start one more now; None if none should.

    A tenant with work waiting gets seats up to its weighted share of the running set at
    once, not only as seats free (its first tokens should not wait for someone else's
    sequences to end); beyond that, seats change hands as they free, in the ledger's order.
    A sequence gives way only if it is movable, its tenant has been served at least as much
    as `newcomer` (by `ledger`, to within `slack`: see `next_tenant`) and still holds at least as large a weighted share of the
    running sequences after giving one up as `newcomer` holds after taking it:
    (k - 1) / w >= (n + 1) / w_new for its k sequences and newcomer's n. So seats move
    towards the weights and the move is never undone at once (the reverse would need
    n / w_new >= k / w). Among candidates: the tenant with the largest weighted share,
    then the most served, then the sequence with the fewest positions computed (the least
    to carry), the latest of equals."""
    count: dict[str, int] = {}
    for seat in seats:
        count[seat.tenant] = count.get(seat.tenant, 0) + 1
    need = (count.get(newcomer, 0) + 1) / ledger.weight(newcomer)
    floor = ledger.counter(newcomer) - slack
    best: tuple[float, float, int, int] | None = None
    pick = None
    for i, seat in enumerate(seats):
        t = seat.tenant
        if not seat.movable or t == newcomer or ledger.counter(t) < floor:
            continue
        if (count[t] - 1) / ledger.weight(t) < need:
            continue
        key = (count[t] / ledger.weight(t), ledger.counter(t), -seat.n_past, i)
        if best is None or key > best:
            best, pick = key, i
    return pick
