"""The engine: one thread per loaded model owns its llama context and runs the step loop.

step = reap aborted -> admit waiting -> schedule -> one llama_decode -> per request:
sample_step (mask -> sample -> accept -> stop checks) -> apply its outcome (publish, finish).
The decisions are made elsewhere: which requests start (the least served tenant's first),
who makes way for them, which tokens are decoded and who gives way under KV pressure by
engine/scheduler.py, where a sequence's KV comes from and goes to by the KvManager
(kv/manager.py) the engine is given. The engine executes them and keeps the tenants'
accounts (`scheduler.Ledger`). Events are delivered through each request's sink, called on
the engine thread.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from ..backend.context import Context, DecodeStatus
from ..backend.model import Model
from ..errors import ContextOverflow, EngineError, InvalidRequest, Overloaded
from ..kv.contexts import Contexts
from ..kv.manager import KvManager
from ..types import ErrorEvent, FinishEvent, FinishReason, TokenEvent, Usage
from .batching import fill
from .config import EngineConfig, EngineStats
from .draft_model import DraftModel
from .prompt_scoring import score_row
from .repetition import structural_tokens
from .request import GenerateRequest, Handle, Sink
from .sampling_step import Outcome, sample_step
from .scheduler import Admission, StepCost, choose_leader, make_way, next_tenant, preempt, schedule
from .sequence import Sequence
from .speculate import Speculator, verify
from .tenants import Tenants

__all__ = ["Engine", "EngineConfig"]

log = logging.getLogger("llamay.engine")
T = TypeVar("T")
MEASURE_EVERY = 0.25  # seconds between KV measurements while requests run


class Engine:
    """Owns `ctx` (and uses `model`) from its own thread. Thread-safe: submit/call/close.

    `kv` manages the KV of `ctx` (the engine takes it over: from now on it is used on the
    engine thread only); without one the engine builds it from `config`. `drafter`, a draft
    model for speculation, is the engine's too: it closes it."""

    def __init__(
        self,
        model: Model,
        ctx: Context,
        config: EngineConfig | None = None,
        kv: KvManager | None = None,
        drafter: DraftModel | None = None,
    ) -> None:
        self.model = model
        self.ctx = ctx
        self.config = config or EngineConfig()
        self.stats = EngineStats()
        self._cond = threading.Condition()
        self._tenants = Tenants(self.config.fair, self.config.max_queue, self.config.concurrency)
        self._waiting = self._tenants.waiting  # guarded by _cond
        self._running: list[Sequence] = []
        self._light_step = False  # the last step read light tenants' prompts alone
        self._cost = StepCost()
        self.speculator = Speculator(self.config.speculate, drafter)
        self._no_drafts = False  # the last step's drafts found no KV room: retry without
        if kv is None:
            c = self.config
            kv = KvManager.create(
                ctx,
                folder=c.contexts_dir,
                model_name=c.model_name,
                model_sha256=c.model_sha256,
                cache_ram=c.cache_ram,
            )
        self.kv = kv
        self._calls: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._closing = False
        self._kv_cells = 0
        self._cache_cells = 0
        self._measured_at = 0.0
        self._measured_ids: list[int] = []
        self._structural: Any = None
        self._thread = threading.Thread(target=self._loop, name="llamay-engine", daemon=True)
        self._thread.start()

    # -- public, any thread ----------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return self.ctx.n_ctx

    def submit(self, request: GenerateRequest, sink: Sink) -> Handle:
        """Queue a request. Raises InvalidRequest / ContextOverflow for a request that can
        never run, QueueLimit / Overloaded when its tenant's queue is full (see EngineConfig)."""
        return self.submit_many([(request, sink)])[0]

    def submit_many(self, items: list[tuple[GenerateRequest, Sink]]) -> list[Handle]:
        """Queue every request or none (as `submit`): the queue limit counts them all."""
        for request, _ in items:
            self._check(request)
        handles = [Handle(request, self._wake) for request, _ in items]
        with self._cond:
            if self._closing:
                raise Overloaded("the server is shutting down")
            adding = Counter(self._tenants.of(r) for r, _ in items)
            for tenant, n in adding.items():
                self._tenants.check_room(tenant, n, len(self._running))
            for handle, (request, sink) in zip(handles, items, strict=True):
                self._waiting.push(self._tenants.of(request), handle, sink)
            self._cond.notify()
        return handles

    def check_queue(self, tenant: str, adding: int) -> None:
        """Raise what `submit_many` would (QueueLimit / Overloaded) if `tenant` could not
        queue `adding` more sequences now, so a caller refuses before preparing them."""
        with self._cond:
            self._tenants.check_room(self._tenants.key(tenant), adding, len(self._running))

    def _check(self, request: GenerateRequest) -> None:
        if not request.tokens:
            raise InvalidRequest("the prompt is empty", param="prompt")
        self.model.check_tokens(request.tokens)
        if len(request.tokens) >= self.n_ctx:
            raise ContextOverflow(
                f"the prompt has {len(request.tokens)} tokens but the context holds {self.n_ctx} "
                "(at least one token must be left to generate)",
                param="messages",
            )
        if not (math.isfinite(request.weight) and request.weight > 0):
            raise InvalidRequest(f"a tenant's weight must be a positive number, not {request.weight!r}")

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    def kv_used(self) -> int:
        """KV positions llama.cpp holds for running requests: measured after each loop turn
        that starts or ends a request or runs none, otherwise at most every MEASURE_EVERY s."""
        return self._kv_cells

    def cache_used(self) -> int:
        """KV positions kept by the prefix cache (shared cells counted once per holder)."""
        return self._cache_cells

    def ram_cache(self) -> dict[str, int]:
        """Cached prefixes moved out of the KV cache into RAM: entries and bytes."""
        return self.kv.ram_cache()

    @property
    def contexts(self) -> Contexts:
        """The server-held contexts (engine thread only: use through `call`). Kept for
        callers written before `kv`; new code uses the KvManager's context methods."""
        return self.kv.contexts

    def call(self, fn: Callable[[], T]) -> Future[T]:
        """Run `fn` on the engine thread between steps (for KV and context operations)."""
        fut: Future[T] = Future()
        with self._cond:
            if self._closing:
                raise Overloaded("the server is shutting down")
            self._calls.append((fn, fut))
            self._cond.notify()
        return fut

    def close(self) -> None:
        """Stop the loop: running and waiting requests finish with reason 'abort'."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout=30)
        drafter = self.speculator.drafter
        if drafter is not None and not self._thread.is_alive():
            self.speculator.drafter = None
            drafter.close()

    # -- engine thread ---------------------------------------------------------------------
    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closing and not self._waiting and not self._running and not self._calls:
                    self._cond.wait()
                if self._closing:
                    break
                calls = list(self._calls)
                self._calls.clear()
            for fn, fut in calls:
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn())
                    except BaseException as exc:
                        fut.set_exception(exc)
            try:
                with self._cond:
                    self._admit()
                self._step()
            except Exception as exc:  # the loop must survive anything one step does
                log.exception("engine step failed; failing the running requests")
                self._fail_all(exc)
            now = time.monotonic()
            ids = [s.seq_id for s in self._running]
            if not ids or ids != self._measured_ids or now - self._measured_at >= MEASURE_EVERY:
                self._measured_at, self._measured_ids = now, ids
                self._measure_kv()
        self._shutdown()

    def _measure_kv(self) -> None:
        # One llama.cpp call per sequence id, each giving up and retaking the GIL: a
        # tenth of a millisecond or more per step when the HTTP thread is busy, so steps
        # that only continue the same requests measure now and then.
        usage = self.kv.usage({s.seq_id for s in self._running})
        self._kv_cells, self._cache_cells = usage.running, usage.cached

    def _admit(self) -> None:
        """Start the waiting requests the scheduler admits (lock held): the least served
        tenant's first, each tenant's in arrival order. When the one whose turn it is cannot
        start, a sequence of a tenant holding more than its share of the running set may make
        way for it, or else for the next waiting tenant in the ledger's order (a tenant with
        work waiting gets its share of the seats at once); else the pass stops."""
        for handle, sink in self._waiting.drop_aborted():
            self._emit_finish_unstarted(handle, sink)
        running = Counter(self._tenants.of(s.request) for s in self._running)
        self._tenants.refresh(self._running, time.monotonic())
        admission = Admission.begin(self._running, self.config.concurrency, self.n_ctx)
        slack = float(self.ctx.n_batch)  # counters move by up to a step's budget at once
        ledger = self._tenants.ledger
        turn: str | None = None
        while self._waiting:
            heads = self._waiting.heads()
            tenant = turn or next_tenant(heads, ledger, running, slack)
            handle, sink = self._waiting.head(tenant)
            seq_id = None
            if admission.verdict(len(handle.request.tokens), False) == "admit":
                seq_id = self.kv.acquire()
            if seq_id is None:
                movers = [tenant]
                if turn is None:
                    movers += sorted(
                        (t for t in heads if t != tenant), key=lambda t: (ledger.counter(t), heads[t])
                    )
                turn = next((t for t in movers if self._make_way(t, running, slack)), None)
                if turn is None:
                    break
                admission = Admission.begin(self._running, self.config.concurrency, self.n_ctx)
                continue  # the seat is for `turn`, whoever is least served now
            turn = None
            self._waiting.pop(tenant)
            seq = self._start(handle, sink, seq_id)
            if seq is not None:
                self._running.append(seq)
                running[tenant] += 1
                self.stats.requests += 1
                admission.started(seq.n_prompt)

    def _make_way(self, tenant: str, running: Counter[str], slack: float) -> bool:
        """Put back the running sequence `scheduler.make_way` picks for `tenant`, keeping
        what it computed as a cached prefix it starts from again; False if none."""
        if not self.config.fair:
            return False
        seats = self._tenants.seats(self._running)
        i = make_way(seats, tenant, self._tenants.ledger, slack)
        if i is None:
            return False
        victim = self._running.pop(i)
        running[seats[i].tenant] -= 1
        req = victim.request
        self.kv.settle(victim, None, completed=True, cache=True, namespace=req.namespace)
        self._waiting.push_front(seats[i].tenant, victim.handle, victim.sink)
        log.debug("request %d made way for tenant %r", req.id, tenant)
        return True

    def _start(self, handle: Handle, sink: Sink, seq_id: int) -> Sequence | None:
        """Bind a request to `seq_id` and give it the KV it can start from. On failure the
        request gets an ErrorEvent, `seq_id` is freed, and None is returned."""
        req = handle.request
        seed = req.sampling.seed
        if seed is None:
            seed = secrets.randbits(63)
        try:
            seq = Sequence(
                handle, sink, seq_id, self.model.n_vocab, seed, self._structural_tokens(), self.model.pieces
            )
            if req.constraint is not None and not req.constraint.lazy:
                seq.activate(self.model.compile_cache)
            # The last two prompt tokens are always recomputed: the last one's logits start
            # generation, and computing it alone would change them (see engine/scheduler.py).
            # Scoring the prompt needs the logits of every position from the one before
            # the first scored token on, which a shared prefix lacks.
            limit = len(seq.tokens) - 2
            if req.prompt_logprobs is not None:
                limit = min(limit, max(0, req.score_from - 1))
            context_id = req.session.context_id if req.session is not None else None
            seq.n_past = seq.n_cached = self.kv.attach(
                seq_id, seq.tokens, limit, context_id=context_id, share=req.cache, namespace=req.namespace
            )
            seq.share_limit = limit
            if context_id is None and req.cache:
                self._follow(seq)
        except Exception as exc:
            self.kv.release(seq_id)
            self.kv.abandon(req.session)
            self._safe_sink(sink, ErrorEvent(exc))
            return None
        self.kv.expect(len(seq.tokens) - seq.n_past)
        return seq

    def _follow(self, seq: Sequence) -> None:
        """If a running request of the same namespace (and caching too) has a prompt that
        starts like `seq`'s, further than what `seq` got from the cache, `seq` takes those
        positions from it instead of computing them a second time: at once if they are
        computed, else once they are (`_join`). Only prompt positions are shared, as with
        cached prefixes, so the output is the same either way."""
        ns = seq.request.namespace
        leaders = [
            r
            for r in self._running
            if r.follows is None
            and r.request.cache
            and r.request.session is None
            and r.request.namespace == ns
        ]
        pick = choose_leader(
            seq.tokens, seq.n_past, seq.share_limit, [r.tokens[: r.n_prompt] for r in leaders]
        )
        if pick is not None:
            seq.follows, seq.follow_to = leaders[pick[0]], pick[1]
            self._join(seq)

    def _join(self, s: Sequence) -> None:
        """Give follower `s` its leader's cells once they are computed; if the leader left
        first (finished: its prompt is now a cache entry; aborted or put back: maybe
        not), `s` starts from the cache again and computes the rest itself."""
        lead = s.follows
        if lead is None:
            return
        if lead.done or lead not in self._running:
            s.follows = None
            s.n_past = s.n_cached = self.kv.reattach(s.seq_id, s.tokens, s.share_limit, s.request.namespace)
        elif lead.n_past >= s.follow_to:
            s.follows = None
            self.kv.share_running(lead.seq_id, s.seq_id, s.follow_to)
            s.n_past = s.n_cached = s.follow_to

    def _structural_tokens(self) -> Any:
        if self._structural is None:
            self._structural = structural_tokens(self.model.pieces)
        return self._structural

    def _step(self) -> None:
        begun = time.perf_counter()
        aborted = [s for s in self._running if s.handle.aborted]
        if aborted:
            for s in aborted:
                self._finish(s, "abort")
            self._running = [s for s in self._running if not s.done]
        if not self._running:
            return
        for s in self._running:
            self._join(s)
        ready = [s for s in self._running if s.follows is None]
        sharing = self._tenants.sharing(ready, not self._light_step, self._cost.prompt_cap())
        plan = schedule(ready, self.ctx.n_batch, sharing)
        # A step that read only light tenants' prompts is followed by one that may not.
        self._light_step = (
            sharing is not None
            and sharing.light_alone
            and any(ready[sl.index].prefilling and sharing.tenants[sl.index] in sharing.light for sl in plan)
        )
        room = 0 if self._no_drafts else self.ctx.n_batch - sum(sl.count for sl in plan)
        if sharing is not None and sharing.prompt_cap is not None:
            # A step shared with prompts waiting is kept short for them: drafts too.
            room = min(room, max(0, sharing.prompt_cap - sum(sl.count for sl in plan if sl.count > 1)))
        self._no_drafts = False
        decoding = [sl.index for sl in plan if sl.count == 1 and not ready[sl.index].prefilling]
        self.speculator.retain({s.seq_id for s in self._running})
        drafts = self.speculator.plan(ready, decoding, room, self.n_ctx)
        batch = self.ctx.batch
        rows, scored = fill(batch, plan, ready, drafts)
        t0 = time.perf_counter()
        status = self.ctx.decode()
        spent = time.perf_counter() - t0
        self._cost.add(batch.n, spent)
        self.stats.decode_seconds += spent
        self.stats.steps += 1
        if status == DecodeStatus.NO_KV_SLOT:
            if drafts:
                self._no_drafts = True
                return
            self._relieve_kv([self._running.index(ready[sl.index]) for sl in plan])
            return
        if status != DecodeStatus.OK:
            raise EngineError(f"llama_decode failed with status {status}")
        by_tenant = self.stats.by_tenant
        for sl in plan:
            ready[sl.index].n_past += sl.count
            n = sl.count + len(drafts.get(sl.index, ((), 0))[0])
            self._tenants.computed(ready[sl.index], n)
            ready[sl.index].decode_seconds += spent
            tenant = ready[sl.index].request.tenant
            by_tenant[tenant] = by_tenant.get(tenant, 0) + n
        self.stats.computed_tokens += batch.n
        self.kv.age(batch.n)
        for s, pos, row in scored:
            k = s.request.prompt_logprobs or 0
            lp = score_row(self.ctx.logits(row), self.model.n_vocab, s.tokens[pos + 1], k, self.model.pieces)
            s.prompt_scores.append(lp)
        for s, row, index in rows:
            if index in drafts:
                self._verify(s, row, *drafts[index])
            else:
                self._apply(s, sample_step(s, self.ctx.logits(row), self.model, self.n_ctx))
        self._running = [s for s in self._running if not s.done]
        if len(decoding) == len(plan):
            # What a draft row costs: the whole step of decoding rows, from planning it to
            # sampling every row (a tiny model's sampling is a large share of a row). Steps
            # that read prompts are left out: their rows are not sampled.
            self.speculator.fit.add(batch.n, time.perf_counter() - begun)

    def _verify(self, s: Sequence, row: int, drafts: list[int], guessed: int) -> None:
        """Sample `s` from its row and its drafts' rows (speculate.verify), drop the KV of
        the drafts it did not take, then publish what it sampled."""
        logits = [self.ctx.logits(row + j) for j in range(len(drafts) + 1)]
        outcomes, kept = verify(s, logits, drafts, self.model, self.n_ctx)
        s.n_past += kept - 1
        self.kv.trim(s.seq_id, s.n_past)
        self.speculator.taken(s, drafts, guessed, kept)
        for outcome in outcomes:
            self._apply(s, outcome)

    def _apply(self, s: Sequence, outcome: Outcome) -> None:
        if outcome.token is not None:
            self._safe_sink(s.sink, outcome.token)
        if outcome.finish is not None:
            f = outcome.finish
            self._finish(s, f.reason, f.message, n_extra=f.n_extra)

    def _relieve_kv(self, planned: list[int]) -> None:
        """The KV cache is full: free idle KV, else preempt whom the scheduler chooses.
        Either way the step is retried."""
        if self.kv.make_room():
            return
        choice = preempt(self._running, planned, self._tenants.served(self._running))
        victim = self._running[choice.index]
        if choice.requeue:
            self._running.remove(victim)
            self.kv.release(victim.seq_id)
            with self._cond:
                self._waiting.push_front(self._tenants.of(victim.request), victim.handle, victim.sink)
            log.info("KV cache full: request %d put back in the queue", victim.request.id)
            return
        self._finish(victim, "length", "the KV cache is full: generation stopped early")
        self._running = [s for s in self._running if not s.done]

    # -- finishing -------------------------------------------------------------------------
    def _finish(
        self, s: Sequence, reason: FinishReason, message: str | None = None, *, n_extra: int = 0
    ) -> None:
        if s.done:
            return
        s.done = True
        completed = reason in ("stop", "length")
        # A request its client left keeps what it computed as a cached prefix, as one that
        # finished does: the next turn, or the same question asked again, starts from it.
        cache = s.request.cache and (completed or reason == "abort")
        context_id = self.kv.settle(
            s, s.request.session, completed=completed, cache=cache, namespace=s.request.namespace
        )
        if reason == "abort":
            self.stats.aborted += 1
        event = s.finish_event(reason, message, n_extra, context_id)
        self.stats.prompt_tokens += s.n_prompt
        self.stats.cached_tokens += s.n_cached
        self.stats.generated_tokens += event.usage.completion_tokens
        self._safe_sink(s.sink, event)

    def _emit_finish_unstarted(self, handle: Handle, sink: Sink) -> None:
        self.kv.abandon(handle.request.session)
        usage = Usage(len(handle.request.tokens), 0, 0)
        self._safe_sink(sink, FinishEvent("abort", usage))

    def _fail_all(self, exc: Exception) -> None:
        for s in self._running:
            s.done = True
            self.kv.release(s.seq_id)
            self.kv.abandon(s.request.session)
            self._safe_sink(s.sink, ErrorEvent(exc))
        self._running = []

    def _shutdown(self) -> None:
        for s in list(self._running):
            self._finish(s, "abort", "the server is shutting down")
        self._running = []
        with self._cond:
            waiting = self._waiting.clear()
        for handle, sink in waiting:
            self._emit_finish_unstarted(handle, sink)
        try:
            self.kv.save()
        except Exception:  # never lose the shutdown over one unwritable file
            log.exception("could not save contexts")

    @staticmethod
    def _safe_sink(sink: Sink, event: TokenEvent | FinishEvent | ErrorEvent) -> None:
        try:
            sink(event)
        except Exception:  # a dead consumer must not take the engine down
            log.debug("event sink failed", exc_info=True)
