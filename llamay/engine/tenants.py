"""The engine's books on tenants: the waiting sequences (one first-come-first-served
queue per tenant, `Waiting`) and what each tenant was served (`Tenants`, over the
scheduler's `Ledger`). Whose turn it is, and who makes way, are the scheduler's decisions;
this keeps the state they are made on."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator, Sequence

from ..errors import Overloaded, QueueLimit
from .request import GenerateRequest, Handle, Sink
from .scheduler import Ledger, Seat, Sharing
from .sequence import Sequence as Running

__all__ = ["Tenants", "Waiting"]

# A tenant that had light work in flight (see LIGHT_PROMPT) within this many seconds counts
# as interactive: while it shares the engine, steps stay short (scheduler.StepCost.prompt_cap).
INTERACTIVE_WINDOW = 30.0
# A sequence with at most this many prompt positions to compute is a chat turn, not a
# document. A tenant whose sequences in flight are all such, and at most half the seats'
# worth of them, is light: its prompts are read whole (scheduler.Sharing), so a chat client
# with a few turns open at once keeps its first tokens quick, while a flood of short prompts
# (more than half the seats) is not light and shares steps like any other.
LIGHT_PROMPT = 128

Entry = tuple[Handle, Sink]


class Waiting:
    """Not thread-safe: the engine uses it with its lock held."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[Entry]] = {}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        """The tenants with sequences waiting."""
        return iter(self._queues)

    def longest(self, tenant: str) -> int:
        """The longest prompt among `tenant`'s waiting sequences (0 if none)."""
        return max((len(h.request.tokens) for h, _ in self._queues.get(tenant, ())), default=0)

    def size(self, tenant: str) -> int:
        """`tenant`'s waiting sequences, aborted or not."""
        q = self._queues.get(tenant)
        return len(q) if q is not None else 0

    def count(self, tenant: str) -> int:
        """`tenant`'s waiting sequences that were not aborted."""
        return sum(1 for h, _ in self._queues.get(tenant, ()) if not h.aborted)

    def push(self, tenant: str, handle: Handle, sink: Sink) -> None:
        self._queues.setdefault(tenant, deque()).append((handle, sink))
        self._n += 1

    def push_front(self, tenant: str, handle: Handle, sink: Sink) -> None:
        """A sequence put back: it goes before its tenant's others (it came first)."""
        self._queues.setdefault(tenant, deque()).appendleft((handle, sink))
        self._n += 1

    def heads(self) -> dict[str, int]:
        """Each tenant with sequences waiting -> its first one's arrival number (request ids
        are given in order of creation, just before submission)."""
        return {t: q[0][0].request.id for t, q in self._queues.items()}

    def head(self, tenant: str) -> Entry:
        return self._queues[tenant][0]

    def pop(self, tenant: str) -> Entry:
        q = self._queues[tenant]
        entry = q.popleft()
        if not q:
            del self._queues[tenant]
        self._n -= 1
        return entry

    def drop_aborted(self) -> list[Entry]:
        """Remove and return the sequences aborted while they waited."""
        gone: list[Entry] = []
        for t in list(self._queues):
            q = self._queues[t]
            if any(h.aborted for h, _ in q):
                keep = deque(e for e in q if not e[0].aborted)
                gone.extend(e for e in q if e[0].aborted)
                if keep:
                    self._queues[t] = keep
                else:
                    del self._queues[t]
        self._n -= len(gone)
        return gone

    def clear(self) -> list[Entry]:
        """Remove and return everything, in arrival order."""
        out = sorted((e for q in self._queues.values() for e in q), key=lambda e: e[0].request.id)
        self._queues.clear()
        self._n = 0
        return out


class Tenants:
    """Per-tenant state of one engine. With `fair` off every request is tenant "" (one
    queue, first come first served). `waiting` is used under the engine's lock; the rest
    on the engine thread only."""

    def __init__(self, fair: bool, max_queue: int, concurrency: int = 8) -> None:
        self.fair = fair
        self.max_queue = max_queue
        self.light_max = max(1, concurrency // 2)  # sequences in flight a light tenant may have
        self.waiting = Waiting()
        self.ledger = Ledger()
        self._light: frozenset[str] = frozenset()  # tenants with only light work in flight
        self._light_seen: dict[str, float] = {}  # tenant -> when it last had light work in flight
        self._interactive = False

    def of(self, request: GenerateRequest) -> str:
        return self.key(request.tenant)

    def key(self, tenant: str) -> str:
        """The queue a principal's sequences go to: its own when fair, else the one queue."""
        return tenant if self.fair else ""

    def check_room(self, tenant: str, adding: int, n_running: int) -> None:
        """Raise unless `tenant` may queue `adding` more sequences: QueueLimit (429) past a
        tenant's own limit, Overloaded (503) when there is one queue for everyone."""
        cap = self.max_queue
        have = self.waiting.count(tenant)
        if have + adding <= cap:
            return
        if tenant == "":  # the single user, or first come first served: the server is full
            raise Overloaded(
                f"the request queue is full ({have} waiting, {n_running} running); retry shortly",
                retry_after=1,
            )
        raise QueueLimit(
            f"'{tenant}' may have at most {cap} sequences waiting (every prompt and every choice "
            f"counts); {have} are waiting and this request adds {adding}; retry once some have started",
            retry_after=1,
        )

    def refresh(self, running: Sequence[Running], now: float) -> None:
        """Before an admission pass (lock held): tell the ledger who is active (waiting or
        running), and note whose work in flight is light (LIGHT_PROMPT)."""
        active = {self.of(s.request): s.request.weight for s in running}
        in_flight = Counter(self.of(s.request) for s in running)
        heavy = {self.of(s.request) for s in running if s.n_prompt - s.n_cached > LIGHT_PROMPT}
        for tenant in self.waiting:
            active[tenant] = self.waiting.head(tenant)[0].request.weight
            in_flight[tenant] += self.waiting.size(tenant)
            if in_flight[tenant] <= self.light_max and self.waiting.longest(tenant) > LIGHT_PROMPT:
                heavy.add(tenant)
        self.ledger.refresh(active)
        self._light = frozenset(t for t, n in in_flight.items() if 0 < n <= self.light_max and t not in heavy)
        for t in self._light:
            self._light_seen[t] = now
        for t in [t for t, seen in self._light_seen.items() if now - seen > INTERACTIVE_WINDOW]:
            del self._light_seen[t]
        # An interactive tenant, in a request or between two, beside someone else's work.
        chatting = {t for t in self._light_seen if t in self._light or not in_flight[t]}
        busy = {t for t, n in in_flight.items() if n}
        self._interactive = any(busy - {t} for t in chatting)

    def sharing(self, ready: Sequence[Running], light_alone: bool, short: int) -> Sharing | None:
        """How the next step is shared between the tenants of `ready` (None: not fair);
        `short`: the prompt tokens of a step while an interactive tenant shares the engine."""
        if not self.fair:
            return None
        cap = short if self._interactive else None
        tenants = [self.of(s.request) for s in ready]
        served = {t: self.ledger.counter(t) for t in set(tenants)}
        return Sharing(tenants, self.ledger.weights, self._light, light_alone, cap, served)

    def computed(self, s: Running, n_tokens: int) -> None:
        """`n_tokens` positions were computed for `s` (prompt positions read, or a token fed
        back): its tenant pays for them as they are computed, so what it is charged is what
        it was served, whether `s` finishes, makes way or is aborted."""
        self.ledger.charge(self.of(s.request), n_tokens)

    def served(self, seqs: Sequence[Running]) -> list[float] | None:
        """How much each sequence's tenant has been served; None when not fair."""
        return [self.ledger.counter(self.of(s.request)) for s in seqs] if self.fair else None

    def seats(self, running: Sequence[Running]) -> list[Seat]:
        return [Seat(self.of(s.request), _movable(s), s.n_past) for s in running]


def _movable(s: Running) -> bool:
    """Whether `s` can go back to the queue and start again from its own computed prompt
    positions (kept as a cached prefix) at no loss."""
    req = s.request
    return (
        s.prefilling
        and s.n_generated == 0
        and req.session is None
        and req.cache
        and req.prompt_logprobs is None
        and not s.handle.aborted
    )
