"""The engine: one thread per loaded model owns its llama context and runs the step loop.

step = reap aborted -> admit waiting -> schedule -> one llama_decode -> per request:
sample_step (mask -> sample -> accept -> stop checks) -> apply its outcome (publish, finish).
Events are delivered through each request's sink, called on the engine thread.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ..backend.context import Context, DecodeStatus
from ..backend.model import Model
from ..errors import ContextOverflow, EngineError, InvalidRequest, Overloaded
from ..kv.contexts import Contexts
from ..kv.pool import SeqPool
from ..types import ErrorEvent, FinishEvent, FinishReason, TokenEvent, Usage
from .prompt_scoring import score_row
from .repetition import structural_tokens
from .request import GenerateRequest, Handle, Sink
from .sampling_step import Outcome, sample_step
from .scheduler import schedule
from .sequence import Sequence

__all__ = ["Engine", "EngineConfig"]

log = logging.getLogger("llamay.engine")
T = TypeVar("T")


@dataclass(frozen=True)
class EngineConfig:
    """`concurrency` caps running sequences; up to `max_queue` more wait, past that submit()
    raises Overloaded (HTTP 503 with Retry-After)."""

    concurrency: int = 8
    max_queue: int = 64
    model_name: str = "model"
    model_sha256: str = ""
    contexts_dir: Path | None = None  # where contexts are spilled and saved; None: a temp folder
    cache_ram: int = 512 * 1024 * 1024  # bytes of RAM for cached prefixes moved out of the KV cache


@dataclass
class EngineStats:
    requests: int = 0
    aborted: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    steps: int = 0
    decode_seconds: float = 0.0


class Engine:
    """Owns `ctx` (and uses `model`) from its own thread. Thread-safe: submit/close."""

    def __init__(self, model: Model, ctx: Context, config: EngineConfig | None = None) -> None:
        self.model = model
        self.ctx = ctx
        self.config = config or EngineConfig()
        self.stats = EngineStats()
        self._cond = threading.Condition()
        self._waiting: deque[tuple[Handle, Sink]] = deque()
        self._running: list[Sequence] = []
        # Ids beyond the running cap hold finished sequences as a prefix cache.
        self.pool = SeqPool(ctx.n_seq_max, ctx, budget=ctx.n_ctx // 4, stash_bytes=self.config.cache_ram)
        folder = self.config.contexts_dir
        if folder is None:
            import tempfile

            folder = Path(tempfile.mkdtemp(prefix="llamay-contexts-"))
        self.contexts = Contexts(self.pool, ctx, folder, self.config.model_name, self.config.model_sha256)
        if self.contexts.load_all():
            log.info("contexts restored from disk", extra={"fields": {"count": len(self.contexts.records)}})
        self._calls: deque[tuple[Callable[[], Any], Future[Any]]] = deque()
        self._closing = False
        self._kv_cells = 0
        self._cache_cells = 0
        self._structural: Any = None
        self._thread = threading.Thread(target=self._loop, name="llamay-engine", daemon=True)
        self._thread.start()

    # -- public, any thread ----------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        return self.ctx.n_ctx

    def submit(self, request: GenerateRequest, sink: Sink) -> Handle:
        """Queue a request. Raises InvalidRequest / ContextOverflow for a request that can
        never run, Overloaded when the queue is full."""
        if not request.tokens:
            raise InvalidRequest("the prompt is empty", param="prompt")
        self.model.check_tokens(request.tokens)
        if len(request.tokens) >= self.n_ctx:
            raise ContextOverflow(
                f"the prompt has {len(request.tokens)} tokens but the context holds {self.n_ctx} "
                "(at least one token must be left to generate)",
                param="messages",
            )
        handle = Handle(request, self._wake)
        with self._cond:
            if self._closing:
                raise Overloaded("the server is shutting down")
            if len(self._waiting) >= self.config.max_queue:
                raise Overloaded(
                    f"the request queue is full ({self.config.max_queue} waiting, "
                    f"{len(self._running)} running); retry shortly",
                    retry_after=1,
                )
            self._waiting.append((handle, sink))
            self._cond.notify()
        return handle

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    def kv_used(self) -> int:
        """KV positions llama.cpp holds for running requests, measured after the last step."""
        return self._kv_cells

    def cache_used(self) -> int:
        """KV positions kept by the prefix cache (shared cells counted once per holder)."""
        return self._cache_cells

    def ram_cache(self) -> dict[str, int]:
        """Cached prefixes moved out of the KV cache into RAM: entries and bytes."""
        stash = self.pool.stash
        return {"entries": len(stash), "bytes": stash.bytes, "capacity": stash.capacity}

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
            self._measure_kv()
        self._shutdown()

    def _measure_kv(self) -> None:
        running = {s.seq_id for s in self._running}
        held = {i: self.ctx.seq_pos_max(i) + 1 for i in range(self.ctx.n_seq_max)}
        self._kv_cells = sum(n for i, n in held.items() if i in running or (i not in self.pool.entries and n))
        self._cache_cells = sum(n for i, n in held.items() if i in self.pool.entries)

    def _admit(self) -> None:
        """Move waiting requests into running sequences while slots and KV allow (lock held)."""
        used = sum(s.n_tokens for s in self._running)
        while self._waiting and len(self._running) < self.config.concurrency:
            handle, sink = self._waiting[0]
            if handle.aborted:
                self._waiting.popleft()
                self._emit_finish_unstarted(handle, sink)
                continue
            need = len(handle.request.tokens) + 1
            if self._running and used + need > self.n_ctx:
                break  # wait until running requests free KV
            seq_id = self.acquire_seq()
            if seq_id is None:
                break
            self._waiting.popleft()
            seed = handle.request.sampling.seed
            if seed is None:
                seed = secrets.randbits(63)
            try:
                seq = Sequence(
                    handle, sink, seq_id, self.model.n_vocab, seed, self._structural_tokens(), self.model.pieces
                )
                plan = handle.request.constraint
                if plan is not None and not plan.lazy:
                    seq.activate(self.model.compile_cache)
            except Exception as exc:
                self.pool.release(seq_id)
                self._safe_sink(sink, ErrorEvent(exc))
                continue
            try:
                seq.n_past = seq.n_cached = self._attach(seq)
            except Exception as exc:
                self.pool.release(seq_id)
                self._end_session(handle.request, None)
                self._safe_sink(sink, ErrorEvent(exc))
                continue
            self.pool.expect(len(seq.tokens) - seq.n_past)
            self._running.append(seq)
            self.stats.requests += 1
            used += need

    def _structural_tokens(self) -> Any:
        if self._structural is None:
            self._structural = structural_tokens(self.model.pieces)
        return self._structural

    def acquire_seq(self) -> int | None:
        """A free sequence id: evicting cached prefixes, then spilling idle contexts."""
        seq = self.pool.acquire()
        if seq is None and self.contexts.spill_lru():
            seq = self.pool.acquire()
        return seq

    def _attach(self, s: Sequence) -> int:
        """Share cached KV into a new sequence; returns the positions it now holds. The
        last two prompt tokens are always recomputed: the last one's logits start
        generation, and computing it alone would change them (see engine/scheduler.py)."""
        limit = len(s.tokens) - 2
        session = s.request.session
        if session is None or session.context_id is None:
            # Scoring the prompt needs every position's logits, which a shared prefix lacks.
            share = s.request.cache and s.request.prompt_logprobs is None
            return self.pool.attach(s.seq_id, s.tokens, limit) if share else 0
        rec = self.contexts.get(session.context_id)
        holder = self.contexts.resident(rec, self.acquire_seq)
        n = min(rec.n_kv, limit)
        self.ctx.seq_cp(holder, s.seq_id, 0, n)
        return n

    def _shareable(self, s: Sequence) -> int:
        """How many leading positions of a finished sequence may be shared with later
        requests: those computed as prompt (in chunks of two or more tokens). Positions
        computed one token per step while generating get slightly different KV values than
        the same tokens read as a prompt, and sharing them would make a cache hit change
        output; they are dropped here and recomputed by whoever needs them."""
        n = min(s.n_past, s.n_prompt)
        if n < s.n_past:
            self.ctx.seq_rm(s.seq_id, n, -1)
        return n

    def _end_session(self, req: GenerateRequest, s: Sequence | None, reason: str = "abort") -> str | None:
        """Settle a session request: a created or continued context takes the sequence.
        Returns the context id, or None when the sequence is still the caller's to free."""
        session = req.session
        if session is None:
            return None
        ok = s is not None and reason in ("stop", "length") and s.n_past > 0
        if session.create:
            if not ok or s is None:
                return None
            rec = self.contexts.adopt(s.seq_id, s.tokens, self._shareable(s), session.owner, session.marking)
            return rec.id
        assert session.context_id is not None
        current = self.contexts.records.get(session.context_id)
        if current is None:
            return None
        current.busy = False
        if ok and s is not None:
            self.contexts.update(current, s.seq_id, s.tokens, self._shareable(s))
            return current.id
        return None

    def _step(self) -> None:
        aborted = [s for s in self._running if s.handle.aborted]
        if aborted:
            for s in aborted:
                self._finish(s, "abort")
            self._running = [s for s in self._running if not s.done]
        if not self._running:
            return
        plan = schedule(self._running, self.ctx.n_batch)
        batch = self.ctx.batch
        batch.clear()
        rows: list[tuple[Sequence, int]] = []
        scored: list[tuple[Sequence, int, int]] = []  # (sequence, prompt position, batch row)
        for sl in plan:
            s = self._running[sl.index]
            last = sl.start + sl.count - 1
            score = s.request.prompt_logprobs is not None
            for pos in range(sl.start, sl.start + sl.count):
                keep = score and pos + 1 < s.n_prompt  # this row scores prompt token pos + 1
                row = batch.add(s.tokens[pos], pos, s.seq_id, keep or (sl.logits and pos == last))
                if keep:
                    scored.append((s, pos, row))
            if sl.logits:
                rows.append((s, row))
        t0 = time.perf_counter()
        status = self.ctx.decode()
        spent = time.perf_counter() - t0
        self.stats.decode_seconds += spent
        self.stats.steps += 1
        if status == DecodeStatus.NO_KV_SLOT:
            self._relieve_kv(plan_seqs=[self._running[sl.index] for sl in plan])
            return
        if status != DecodeStatus.OK:
            raise EngineError(f"llama_decode failed with status {status}")
        for sl in plan:
            self._running[sl.index].n_past += sl.count
            self._running[sl.index].decode_seconds += spent
        self.pool.age(batch.n)
        for s, pos, row in scored:
            k = s.request.prompt_logprobs or 0
            lp = score_row(self.ctx.logits(row), self.model.n_vocab, s.tokens[pos + 1], k, self.model.pieces)
            s.prompt_scores.append(lp)
        for s, row in rows:
            self._apply(s, sample_step(s, self.ctx.logits(row), self.model, self.n_ctx))
        self._running = [s for s in self._running if not s.done]

    def _apply(self, s: Sequence, outcome: Outcome) -> None:
        if outcome.token is not None:
            self._safe_sink(s.sink, outcome.token)
        if outcome.finish is not None:
            f = outcome.finish
            self._finish(s, f.reason, f.message, n_extra=f.n_extra)

    def _relieve_kv(self, plan_seqs: list[Sequence]) -> None:
        """The KV cache is full. Put back a request still reading its prompt if there is
        one (it is recomputed later); otherwise end the longest with reason 'length'."""
        if self.pool.evict_one() or self.contexts.spill_lru():
            return  # cached prefixes, then idle contexts, go first; the step is retried
        prefilling = [s for s in plan_seqs if s.prefilling and s.n_generated == 0]
        if prefilling and len(self._running) > 1:
            victim = prefilling[-1]
            self._running.remove(victim)
            self.pool.release(victim.seq_id)
            with self._cond:
                self._waiting.appendleft((victim.handle, victim.sink))
            log.info("KV cache full: request %d put back in the queue", victim.request.id)
            return
        victim = max(self._running, key=lambda s: s.n_past)
        self._finish(victim, "length", "the KV cache is full: generation stopped early")
        self._running = [s for s in self._running if not s.done]

    # -- finishing -------------------------------------------------------------------------
    def _finish(
        self, s: Sequence, reason: FinishReason, message: str | None = None, *, n_extra: int = 0
    ) -> None:
        if s.done:
            return
        s.done = True
        context_id = self._end_session(s.request, s, reason)  # a context may take the sequence
        if context_id is None:
            if reason in ("stop", "length") and s.n_past > 0 and s.request.cache:
                n = self._shareable(s)
                self.pool.keep(s.seq_id, s.tokens[:n])
            else:
                self.pool.release(s.seq_id)
        if reason == "abort":
            self.stats.aborted += 1
        now = time.perf_counter()
        n_gen = s.n_generated + n_extra
        self.stats.prompt_tokens += s.n_prompt
        self.stats.cached_tokens += s.n_cached
        self.stats.generated_tokens += n_gen
        t_first = s.t_first or now
        extra = {
            "prompt_ms": (t_first - s.t_admit) * 1000.0,
            "generate_ms": (now - t_first) * 1000.0,
            "queue_ms": (s.t_admit - s.handle.submitted) * 1000.0,
            "decode_ms": s.decode_seconds * 1000.0,
            "mask_steps": s.mask_steps,
            "mask_ms": s.mask_seconds * 1000.0,
            "context_id": context_id,
        }
        tail = "" if reason == "abort" else s.text.flush()
        usage = Usage(s.n_prompt, n_gen, s.n_cached)
        scores = None
        if s.request.prompt_logprobs is not None and len(s.prompt_scores) == s.n_prompt - 1:
            scores = tuple(s.prompt_scores)
        self._safe_sink(s.sink, FinishEvent(reason, usage, tail, message, extra, scores))

    def _emit_finish_unstarted(self, handle: Handle, sink: Sink) -> None:
        self._end_session(handle.request, None)
        usage = Usage(len(handle.request.tokens), 0, 0)
        self._safe_sink(sink, FinishEvent("abort", usage))

    def _fail_all(self, exc: Exception) -> None:
        for s in self._running:
            s.done = True
            self.pool.release(s.seq_id)
            self._end_session(s.request, None)
            self._safe_sink(s.sink, ErrorEvent(exc))
        self._running = []

    def _shutdown(self) -> None:
        for s in list(self._running):
            self._finish(s, "abort", "the server is shutting down")
        self._running = []
        with self._cond:
            waiting = list(self._waiting)
            self._waiting.clear()
        for handle, sink in waiting:
            self._emit_finish_unstarted(handle, sink)
        try:
            self.contexts.save_all()
        except Exception:  # never lose the shutdown over one unwritable file
            log.exception("could not save contexts")

    @staticmethod
    def _safe_sink(sink: Sink, event: TokenEvent | FinishEvent | ErrorEvent) -> None:
        try:
            sink(event)
        except Exception:  # a dead consumer must not take the engine down
            log.debug("event sink failed", exc_info=True)
