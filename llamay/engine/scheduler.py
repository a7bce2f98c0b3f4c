"""The engine's decisions, as pure functions tested without weights: which tokens go into
the next decode (`schedule`), which waiting requests start (`Admission`), and which
request gives way when the KV cache is full (`preempt`).

Decode tokens of running sequences come first (one each, so generation never stalls
behind a long prompt), then prompt chunks, in arrival order, within the token budget.

A prompt's last token is never computed in a chunk of its own: llama.cpp gives that token
different logits when it is alone in its sequence's chunk than when it is computed with
its predecessors (measured: up to 0.44 on SmolLM2's logits), so a prompt's output would
depend on how it happened to be split. The final chunk always holds at least two tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = [
    "MIN_FOLLOW",
    "Admission",
    "Preemptible",
    "Preemption",
    "Schedulable",
    "Slice",
    "Verdict",
    "choose_leader",
    "common_prefix",
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


def schedule(seqs: Sequence[Schedulable], budget: int) -> list[Slice]:
    """Plan one step. Never exceeds `budget` tokens in total."""
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
    for i in prefill:
        if left == 0:
            break
        s = seqs[i]
        pending = s.n_tokens - s.n_past
        count = min(pending, left)
        if pending - count == 1:
            count -= 1  # leave two for the final chunk (see the module docstring)
        if count <= 0:
            continue
        plan.append(Slice(i, s.n_past, count, count == pending))
        left -= count
    return plan


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


def preempt(running: Sequence[Preemptible], planned: Sequence[int]) -> Preemption:
    """Choose who gives way when a decode of the requests at `planned` (indexes into
    `running`, in plan order) found no KV room, after idle cached KV was freed. A request
    still reading its prompt, with nothing generated yet, loses the least: the last such
    one in the plan is put back, unless it is the only running request. Otherwise the
    request holding the most KV ends (the first of equals). `running` must not be empty."""
    reading = [i for i in planned if running[i].n_past < running[i].n_prompt and running[i].n_generated == 0]
    if reading and len(running) > 1:
        return Preemption(reading[-1], requeue=True)
    longest = max(range(len(running)), key=lambda i: running[i].n_past)
    return Preemption(longest, requeue=False)
