"""The pull pipeline: fetch a plan's parts, verify them, install the blobs, write the manifest.

    lock every part's key  (other processes pulling the same bytes wait here, then find
                            them present; threads of this process share one in-flight pull)
    for each part:          present already? (a blob of the known digest, or one an earlier
                            pull of the same origin recorded)  else fetch it into tmp/
    verify:                 size, sha256 (when known in advance), GGUF magic; a part that
                            fails is deleted, and nothing is installed or registered
    install:                rename each into blobs/sha256-<digest>
    commit:                 under the manifests lock: write the manifest, link split parts

Progress goes to `emit` as Ollama-shaped dicts: {"status": "pulling manifest"} (sent by the
caller before planning), {"status": "pulling <digest12>", "digest", "total", "completed"}
(one total across all parts; with `speed` in bytes/s and `eta` in seconds once bytes move, and
`file` of `files` for a split model), {"status": "verifying sha256 digest"},
{"status": "writing manifest"}, then the caller's {"status": "success"}.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from llamay.errors import StoreError
from llamay.store.layout import MANIFESTS_LOCK, Layout, file_sha256
from llamay.store.manifest import Manifest, Part
from llamay.store.names import ModelName
from llamay.store.sources import FetchContext, PartPlan, PullPlan, Staged

__all__ = ["Emit", "PullOptions", "commit", "run_pull"]

Emit = Callable[[dict[str, Any]], None]

_EMIT_INTERVAL = 0.1  # seconds between "pulling" events; the last one is always sent
# In-process sharing: (models dir, part keys) -> the parts the pull in flight will produce.
_inflight: dict[tuple[str, tuple[str, ...]], Future[tuple[Part, ...]]] = {}
_inflight_lock = threading.Lock()


@dataclass(frozen=True)
class PullOptions:
    """`fresh` discards partial downloads instead of resuming them; `retries` and
    `retry_delay` (seconds, growing 4x per retry) apply to dropped connections."""

    fresh: bool = False
    retries: int = 3
    retry_delay: float = 0.25


class _Tracker:
    """Progress across every part of one pull, as throttled "pulling" events."""

    def __init__(self, emit: Emit, total: int, files: int = 1) -> None:
        self.emit, self.total, self.completed = emit, total, 0
        self.digest, self._last = "", 0.0
        self.files, self.file = files, 0
        self._start, self._moved = time.monotonic(), 0  # bytes fetched by this pull, for its speed

    def begin(self, part: PartPlan, *, done: int = 0) -> None:
        """Start reporting `part`, `done` of whose bytes are there already."""
        self.digest = f"sha256:{part.sha256}" if part.sha256 else part.key
        self.completed += done
        self.file += 1
        self.flush()

    def add(self, n: int) -> None:
        self.completed = max(0, self.completed + n)
        self._moved = max(0, self._moved + n)
        if time.monotonic() - self._last >= _EMIT_INTERVAL:
            self.flush()

    def finish(self) -> None:
        self.completed = max(self.completed, self.total)
        self.flush()

    def flush(self) -> None:
        self._last = time.monotonic()
        short = self.digest.partition(":")[2][:12] if ":" in self.digest else self.digest[:16]
        total = max(self.total, self.completed)
        event: dict[str, Any] = {
            "status": f"pulling {short}", "digest": self.digest, "total": total, "completed": self.completed,
        }  # fmt: skip
        elapsed = self._last - self._start
        if self._moved and elapsed >= 0.5:  # bytes per second so far, and the time left at that pace
            speed = self._moved / elapsed
            event |= {"speed": int(speed), "eta": round((total - self.completed) / speed, 1)}
        if self.files > 1:  # a split model: which of its files is coming
            event |= {"file": min(self.file, self.files), "files": self.files}
        self.emit(event)


def run_pull(
    layout: Layout, plan: PullPlan, name: ModelName, client: httpx.Client, emit: Emit, options: PullOptions
) -> Manifest:
    """Pull `plan` under `name` and return the manifest written. Raises StoreError (or the
    source's error) with nothing registered; partial downloads are kept for a later attempt
    unless they failed verification."""
    keyset = (str(layout.models), tuple(p.key for p in plan.parts))
    with _inflight_lock:
        future = _inflight.get(keyset)
        owner = future is None
        if future is None:
            future = _inflight[keyset] = Future()
    tracker = _Tracker(emit, sum(p.transfer_size for p in plan.parts), len(plan.parts))
    if not owner:
        tracker.begin(plan.parts[0])
        parts = future.result()  # the pull in flight's error, if it fails
        tracker.finish()
        return commit(layout, name, parts, plan.source, emit)
    try:
        manifest = _locked_pull(layout, plan, name, client, tracker, options)
        future.set_result(manifest.parts)
        return manifest
    except BaseException as exc:
        future.set_exception(exc)
        raise
    finally:
        with _inflight_lock:
            _inflight.pop(keyset, None)


def _locked_pull(
    layout: Layout,
    plan: PullPlan,
    name: ModelName,
    client: httpx.Client,
    tracker: _Tracker,
    options: PullOptions,
) -> Manifest:
    layout.make_dirs()
    with contextlib.ExitStack() as stack:
        for key in sorted({p.key for p in plan.parts}):
            note: dict[str, Any] = {"status": f"waiting for another pull of {key[:19]}"}
            stack.enter_context(layout.lock(key, on_wait=functools.partial(tracker.emit, note)))
        found: list[Part | None] = []
        staged: list[tuple[int, PartPlan, Staged]] = []
        try:
            for index, plan_part in enumerate(plan.parts):
                present = _present(layout, plan_part)
                found.append(present)
                if present is not None:
                    tracker.begin(plan_part, done=plan_part.transfer_size or present.size)
                    continue
                tracker.begin(plan_part)
                if options.fresh:
                    layout.clear_temps(plan_part.key)
                ctx = FetchContext(
                    client, layout, plan_part.key, tracker.add, options.retries, options.retry_delay
                )
                try:
                    staged.append((index, plan_part, plan_part.fetch(ctx)))
                finally:
                    tracker.flush()  # the bytes got, also when it failed
            tracker.emit({"status": "verifying sha256 digest"})
            for index, plan_part, item in staged:
                try:
                    found[index] = _verify(plan_part, item)
                except StoreError:
                    layout.clear_temps(plan_part.key)  # corrupt: nothing of it is worth resuming
                    raise
        except BaseException:
            for _, plan_part, item in staged:
                if item.path != layout.partial(plan_part.key):
                    item.path.unlink(missing_ok=True)  # copies are cheap to redo; downloads stay
            raise
        for index, plan_part, item in staged:
            part = found[index]
            assert part is not None
            blob = layout.blob(part.digest)
            if blob.is_file() and blob.stat().st_size == part.size:
                item.path.unlink()
            else:
                os.replace(item.path, blob)
            layout.clear_temps(plan_part.key)
        parts = tuple(p for p in found if p is not None)
        return commit(layout, name, parts, plan.source, tracker.emit)


def _present(layout: Layout, plan_part: PartPlan) -> Part | None:
    """The part's blob if the store holds it: by its known digest (size checked when known),
    else as recorded by an earlier pull of the same origin key."""
    if plan_part.sha256 is not None:
        blob = layout.blob(plan_part.sha256)
        with contextlib.suppress(OSError):
            size = blob.stat().st_size
            if plan_part.size in (None, size):
                return Part(plan_part.sha256, size, plan_part.filename)
        return None
    for _, manifest in layout.iter_manifests():
        for part in manifest.parts:
            if part.key == plan_part.key and layout.blob(part.digest).is_file():
                return Part(part.digest, part.size, plan_part.filename, plan_part.key)
    return None


def _verify(plan_part: PartPlan, item: Staged) -> Part:
    """The staged file's Part, or StoreError if it is not what was announced: short or long,
    another digest, or not a GGUF file at all (the caller then deletes it)."""
    path = item.path
    size = path.stat().st_size
    if plan_part.size is not None and size != plan_part.size:
        raise StoreError(
            f"{plan_part.filename}: got {size} bytes, expected {plan_part.size} (truncated or corrupt download)"
        )
    digest = item.sha256 or file_sha256(path)
    if plan_part.sha256 is not None and digest != plan_part.sha256:
        raise StoreError(
            f"sha256 mismatch for {plan_part.filename}: got {digest}, expected {plan_part.sha256}"
        )
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise StoreError(f"{plan_part.filename} is not a GGUF file")
    return Part(digest, size, plan_part.filename, "" if plan_part.sha256 else plan_part.key)


def commit(
    layout: Layout, name: ModelName, parts: tuple[Part, ...], source: dict[str, Any], emit: Emit
) -> Manifest:
    """Write `name`'s manifest for `parts` (already installed). A manifest for the same parts
    keeps its params, template and system prompt; anything else under `name` is replaced."""
    emit({"status": "writing manifest"})
    with layout.lock(MANIFESTS_LOCK):
        missing = [p.digest[:12] for p in parts if not layout.blob(p.digest).is_file()]
        if missing:
            raise StoreError(f"blobs {', '.join(missing)} were removed while {name} was pulled; pull again")
        old = layout.read_manifest(name)
        same = old is not None and [p.digest for p in old.parts] == [p.digest for p in parts]
        manifest = Manifest(
            name=name,
            parts=parts,
            source=source,
            params=old.params if same and old else {},
            template=old.template if same and old else None,
            system=old.system if same and old else None,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        try:
            layout.write_manifest(manifest)
            if len(parts) > 1:
                layout.link_split(manifest)
        except OSError as exc:
            raise StoreError(f"cannot write the manifest of {name}: {exc}") from exc
    return manifest
