"""State benchmark: what llamay's prefix cache and server-held contexts buy, each against a
baseline measured in the same run.

    .venv/bin/python -m bench.state [--model PATH_OR_NAME] [--quick]

1. prefix_cache_ttft: time to first token (streaming) of a chat request whose ~2,000-token
   system prompt an earlier request already sent, against the first (cold) request with that
   system prompt, whose system prompt nobody sent before. Target: hit/cold <= 0.05.
2. fork: a ~4,000-token context forked 1,000 ways, as one POST fork?n=1000 and as 1,000
   POST fork?n=1: wall time (target < 1 s) and growth of the server's VmRSS (target < 20 MB).
3. snapshot_restore: POST /v1/contexts/restore of a ~4,000-token context's snapshot against
   computing that context (POST /v1/contexts with a prompt the server never saw). Target:
   restore at least 10x faster. The snapshot download is timed separately. Each snapshot is
   restored into the server that made it (after measurement 1, its KV cache holds cached
   prefixes) and into a second server that has served only a warm-up request.
4. ticket_recipe: one instruction context, then short tickets classified by 8 concurrent
   clients, each ticket on its own fork (fork, chat with llamay_session, delete), against
   resending the instruction with the prefix cache defeated, and against plain resending on a
   warm server (the prefix cache working without sessions). Each way runs on a fresh server.
5. tenant_namespaces (bench/state_tenants.py): what isolating tenants in the prefix cache
   costs one caller (nothing, by design) and several callers sharing a system prompt,
   without and with an admin-shared context holding it.

Every server is `llamay serve` on 127.0.0.1 with a free port and its own LLAMAY_HOME (a
temporary folder, so saved contexts never leak between servers or into the user's home).
Prompts are deterministic random word sentences, fitted to a token count with the model's own
tokenizer. Prints one JSON object; a measurement that fails reports the request, the response
and the server log tail under "error" instead of numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .common import (
    HOST,
    Server,
    ServerError,
    free_port,
    log_tail,
    percentile,
    print_json,
    start_server,
    stop_server,
)

REQUEST_TIMEOUT = httpx.Timeout(connect=10.0, read=1800.0, write=120.0, pool=1800.0)
SERVER_START_S = 180.0
SERVER_STOP_GRACE_S = 60.0
TARGETS = {
    "ttft_hit_over_cold_max": 0.05,
    "fork_1000_seconds_max": 1.0,
    "fork_1000_rss_growth_mb_max": 20.0,
    "restore_speedup_min": 10.0,
}

_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "river garden window winter summer bright quiet small large early late green old new "
    "good great high little long young important public able bad different free full real "
    "walks runs reads writes builds opens finds keeps brings holds turns moves lives falls"
)
WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class Sizes:
    """How much of each measurement to run."""

    server_ctx: int = 16384
    ttft_system_tokens: int = 2000
    ttft_reps: int = 3
    ttft_max_tokens: int = 4
    fork_context_tokens: int = 4000
    forks: int = 1000
    snapshot_tokens: int = 4000
    snapshot_reps: int = 3
    tickets: int = 200
    ticket_clients: int = 8
    ticket_max_tokens: int = 8
    ticket_examples: int = 12


FULL = Sizes()
QUICK = Sizes(
    ttft_system_tokens=300,
    ttft_reps=2,
    fork_context_tokens=300,
    forks=100,
    snapshot_tokens=300,
    snapshot_reps=1,
    tickets=8,
    ticket_clients=4,
    ticket_examples=2,
)


def progress(message: str) -> None:
    print(f"bench.state {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Prompts fitted to a token count with the model's own tokenizer.


class Tokenizer:
    """The served model's vocabulary, loaded in this process to size prompts."""

    def __init__(self, path: Path) -> None:
        from llamay.backend.model import Model

        self._model = Model(path)

    def count(self, text: str) -> int:
        """Tokens of `text` as a completion prompt (special tokens added, none parsed)."""
        return len(self._model.tokenize(text, add_special=True, parse_special=False))

    def close(self) -> None:
        self._model.close()


def sentences(words: list[str]) -> str:
    """Words as sentences of 12: capitalized, with full stops."""
    parts = []
    for i in range(0, len(words), 12):
        chunk = words[i : i + 12]
        parts.append(" ".join([chunk[0].capitalize(), *chunk[1:]]) + ".")
    return " ".join(parts)


def fitted_text(tok: Tokenizer, seed: int, n_tokens: int) -> str:
    """Random sentences (seeded) of at most n_tokens tokens, within 1% of it. Distinct seeds
    give texts that differ from their first word on (almost surely)."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) for _ in range(n_tokens * 2)]
    lo, hi = 1, len(words)
    while lo < hi:  # the most words that still fit
        mid = (lo + hi + 1) // 2
        if tok.count(sentences(words[:mid])) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    return sentences(words[:lo])


# ---------------------------------------------------------------------------------------------
# HTTP: every non-200 answer is a RequestFailed that carries the request and the response.


class RequestFailed(RuntimeError):
    def __init__(self, method: str, path: str, body: Any, status: int | None, response: str) -> None:
        self.detail = {
            "request": f"{method} {path}",
            "body": shorten(body),
            "status": status,
            "response": response[:2000],
        }
        super().__init__(json.dumps(self.detail))


def shorten(obj: Any, keep: int = 120) -> Any:
    """A request body fit for a report: long strings cut, bytes as their length."""
    if isinstance(obj, str):
        return obj if len(obj) <= keep else f"{obj[:keep]}... ({len(obj)} chars)"
    if isinstance(obj, bytes):
        return f"<{len(obj)} bytes>"
    if isinstance(obj, dict):
        return {k: shorten(v, keep) for k, v in obj.items()}
    if isinstance(obj, list):
        return [shorten(v, keep) for v in obj]
    return obj


def call(
    client: httpx.Client,
    method: str,
    path: str,
    *,
    body: dict[str, Any] | None = None,
    content: bytes | None = None,
    params: dict[str, Any] | None = None,
) -> httpx.Response:
    try:
        resp = client.request(method, path, json=body, content=content, params=params)
    except httpx.HTTPError as exc:
        raise RequestFailed(method, path, body or content, None, f"{type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise RequestFailed(method, path, body or content, resp.status_code, resp.text)
    return resp


async def acall(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None = None, **kw: Any
) -> dict[str, Any]:
    try:
        resp = await client.request(method, path, json=body, **kw)
    except httpx.HTTPError as exc:
        raise RequestFailed(method, path, body, None, f"{type(exc).__name__}: {exc}") from exc
    if resp.status_code != 200:
        raise RequestFailed(method, path, body, resp.status_code, resp.text)
    return dict(resp.json())


def cached_of(usage: dict[str, Any] | None) -> int | None:
    if not usage:
        return None
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))


@dataclass
class Streamed:
    """A streamed chat completion: time to the first token, and its usage."""

    ttft_s: float
    total_s: float
    prompt_tokens: int | None
    cached_tokens: int | None


def stream_chat(client: httpx.Client, body: dict[str, Any]) -> Streamed:
    """POST a streaming chat completion. The first token is the first chunk after the role
    chunk (which the server sends before it reads the prompt) that carries content or a
    finish_reason."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    sent = time.perf_counter()
    first = 0.0
    usage: dict[str, Any] | None = None
    try:
        with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                raise RequestFailed(
                    "POST", "/v1/chat/completions", body, resp.status_code, resp.read().decode()
                )
            for line in resp.iter_lines():
                event = _sse_event(line, body)
                if event is None:
                    continue
                usage = event.get("usage") or usage
                if not first and _is_token(event):
                    first = time.perf_counter()
    except httpx.HTTPError as exc:
        raise RequestFailed(
            "POST", "/v1/chat/completions", body, None, f"{type(exc).__name__}: {exc}"
        ) from exc
    if not first:
        raise RequestFailed("POST", "/v1/chat/completions", body, 200, "the stream carried no token")
    done = time.perf_counter()
    prompt = int(usage["prompt_tokens"]) if usage else None
    return Streamed(first - sent, done - sent, prompt, cached_of(usage))


def _sse_event(line: str, body: dict[str, Any]) -> dict[str, Any] | None:
    if not line.startswith("data:") or line[5:].strip() == "[DONE]":
        return None
    try:
        event = json.loads(line[5:])
    except ValueError:
        raise RequestFailed(
            "POST", "/v1/chat/completions", body, 200, f"malformed SSE data: {line}"
        ) from None
    if "error" in event:
        raise RequestFailed("POST", "/v1/chat/completions", body, 200, line)
    return dict(event)


def _is_token(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or []:
        if (choice.get("delta") or {}).get("content") or choice.get("finish_reason"):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Servers.


@contextlib.contextmanager
def llamay_server(name: str, model: Path, sizes: Sizes, logs: dict[str, str]) -> Iterator[Server]:
    """`llamay serve` with its own temporary LLAMAY_HOME; always stopped, home removed."""
    home = tempfile.mkdtemp(prefix=f"bench-state-{name}-home-")
    port = free_port()
    argv = [sys.executable, "-m", "llamay", "serve", "-m", str(model), "-addr", f"{HOST}:{port}"]
    argv += ["-ctx", str(sizes.server_ctx), "-concurrency", str(sizes.ticket_clients)]
    progress(f"{name}: starting {' '.join(argv[1:])}")
    try:
        server = start_server(name, argv, port, "/health", env={"LLAMAY_HOME": home}, timeout=SERVER_START_S)
        logs[name] = str(server.log_path)
        try:
            yield server
        finally:
            progress(f"{name}: stopping")
            stop_server(server, grace=SERVER_STOP_GRACE_S)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def rss_mb(server: Server) -> float:
    """VmRSS of the server process, in MiB."""
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError("no VmRSS line in /proc/<pid>/status")


def guarded(name: str, server: Server | None, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one measurement; a failure becomes an "error" entry with the server log tail."""
    progress(f"measuring {name}")
    try:
        result = fn()
        progress(f"{name}: {json.dumps(result, default=str)}")
        return result
    except RequestFailed as exc:
        error: dict[str, Any] = {"error": exc.detail}
    except (ServerError, httpx.HTTPError, OSError, RuntimeError, ValueError, KeyError) as exc:
        error = {"error": f"{type(exc).__name__}: {exc}"}
    if server is not None:
        error["server_exit_code"] = server.proc.poll()
        error["server_log_tail"] = log_tail(server.log_path, 25).splitlines()
    progress(f"{name} failed: {error['error']}")
    return error


def warm_up(client: httpx.Client) -> None:
    """One short request so that first-call costs (graph allocation) stay out of every timing."""
    body = {"messages": [{"role": "user", "content": "Hello there."}], "max_tokens": 2, "temperature": 0}
    call(client, "POST", "/v1/chat/completions", body=body)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# ---------------------------------------------------------------------------------------------
# 1. Prefix cache: TTFT of a request whose system prompt is cached vs cold.

USER_COLD = "In one word, what is the first topic above?"
USER_HIT = "In one word, what is the final topic above?"


def measure_ttft(client: httpx.Client, tok: Tokenizer, sizes: Sizes) -> dict[str, Any]:
    """Per rep: a system prompt no request sent before. The first request with it is cold;
    the second (same system prompt, another question of equal length) is the cache hit."""
    cold: list[Streamed] = []
    hit: list[Streamed] = []
    for rep in range(sizes.ttft_reps):
        system = fitted_text(tok, 1000 + rep, sizes.ttft_system_tokens)
        for user, out in ((USER_COLD, cold), (USER_HIT, hit)):
            body = {
                "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "max_tokens": sizes.ttft_max_tokens,
                "temperature": 0,
            }
            out.append(stream_chat(client, body))
    cold_ms = [s.ttft_s * 1000 for s in cold]
    hit_ms = [s.ttft_s * 1000 for s in hit]
    ratio = median(hit_ms) / median(cold_ms)
    return {
        "method": "per rep: a never-sent ~N-token system prompt; request 1 (cold) then request 2 "
        "(same system prompt, a different question of the same length) = hit; TTFT = first chunk "
        "after the role chunk with content or finish_reason",
        "reps": sizes.ttft_reps,
        "system_prompt_tokens_target": sizes.ttft_system_tokens,
        "prompt_tokens": [s.prompt_tokens for s in hit],
        "cold_ttft_ms_median": median(cold_ms),
        "hit_ttft_ms_median": median(hit_ms),
        "hit_over_cold": ratio,
        "target_max": TARGETS["ttft_hit_over_cold_max"],
        "meets_target": ratio <= TARGETS["ttft_hit_over_cold_max"],
        "cold_ttft_ms": cold_ms,
        "hit_ttft_ms": hit_ms,
        "cold_cached_tokens": [s.cached_tokens for s in cold],
        "hit_cached_tokens": [s.cached_tokens for s in hit],
    }


# ---------------------------------------------------------------------------------------------
# 2. Fork a context 1,000 ways: time and server RSS growth.


def create_context(client: httpx.Client, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    info = call(client, "POST", "/v1/contexts", body=body).json()
    return info, time.perf_counter() - t0


def fork(client: httpx.Client, cid: str, n: int) -> list[str]:
    data = call(client, "POST", f"/v1/contexts/{cid}/fork", params={"n": n}).json()["data"]
    if len(data) != n:
        raise RuntimeError(f"fork?n={n} returned {len(data)} contexts")
    return [str(d["id"]) for d in data]


def session_check(client: httpx.Client, cid: str, prompt: str) -> dict[str, Any]:
    """Continue context `cid` (which holds `prompt`) by a few words; its usage shows how much
    of the prompt came from the context."""
    body = {"prompt": prompt + " And then", "max_tokens": 1, "temperature": 0, "llamay_session": cid}
    usage = call(client, "POST", "/v1/completions", body=body).json()["usage"]
    return {"prompt_tokens": usage["prompt_tokens"], "cached_tokens": cached_of(usage)}


def measure_fork(client: httpx.Client, server: Server, tok: Tokenizer, sizes: Sizes) -> dict[str, Any]:
    prompt = fitted_text(tok, 2000, sizes.fork_context_tokens)
    info, create_s = create_context(client, {"prompt": prompt})
    cid = info["id"]
    call(client, "DELETE", f"/v1/contexts/{fork(client, cid, 1)[0]}")  # warm the routes up
    n = sizes.forks
    rss0 = rss_mb(server)
    t0 = time.perf_counter()
    batch = fork(client, cid, n)
    batch_s = time.perf_counter() - t0
    rss1 = rss_mb(server)
    latencies = []
    t1 = time.perf_counter()
    for _ in range(n):
        t = time.perf_counter()
        fork(client, cid, 1)
        latencies.append(time.perf_counter() - t)
    singles_s = time.perf_counter() - t1
    rss2 = rss_mb(server)
    return {
        "context_tokens": info["tokens"],
        "context_create_s": create_s,
        "n": n,
        "batch": _fork_result(batch_s, rss1 - rss0, n),
        "singles": _fork_result(singles_s, rss2 - rss1, n)
        | {
            "call_p50_ms": percentile(latencies, 50) * 1000,
            "call_p99_ms": percentile(latencies, 99) * 1000,
            "calls": "sequential, one keep-alive connection",
        },
        "rss_mb": {"before": rss0, "after_batch": rss1, "after_singles": rss2},
        "fork_in_use": session_check(client, batch[-1], prompt),
        "targets": {
            "seconds_max": TARGETS["fork_1000_seconds_max"] * n / 1000,
            "rss_growth_mb_max": TARGETS["fork_1000_rss_growth_mb_max"] * n / 1000,
        },
    }


def _fork_result(seconds: float, growth_mb: float, n: int) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "rss_growth_mb": growth_mb,
        "rss_bytes_per_fork": growth_mb * 1024 * 1024 / n,
        "meets_time_target": seconds < TARGETS["fork_1000_seconds_max"] * n / 1000,
        "meets_rss_target": growth_mb < TARGETS["fork_1000_rss_growth_mb_max"] * n / 1000,
    }


# ---------------------------------------------------------------------------------------------
# 3. Snapshot + restore vs recompute.


@dataclass
class Target:
    """A server that snapshots are restored into."""

    name: str
    server: Server
    client: httpx.Client


def snapshot_rep(
    source: Target, targets: list[Target], tok: Tokenizer, sizes: Sizes, rep: int
) -> dict[str, Any]:
    """Compute a context from a prompt `source` never saw, download its snapshot, restore it
    into every target. A failed restore is recorded and the rep goes on."""
    prompt = fitted_text(tok, 3000 + rep, sizes.snapshot_tokens)
    info, recompute_s = create_context(source.client, {"prompt": prompt})
    cid = info["id"]
    t0 = time.perf_counter()
    snap = call(source.client, "GET", f"/v1/contexts/{cid}/snapshot").content
    download_s = time.perf_counter() - t0
    out: dict[str, Any] = {
        "tokens": info["tokens"],
        "recompute_s": recompute_s,
        "snapshot_download_s": download_s,
        "snapshot_bytes": len(snap),
    }
    for target in targets:
        out[f"restore_{target.name}"] = restore_into(target, snap, prompt)
    call(source.client, "DELETE", f"/v1/contexts/{cid}")
    return out


def restore_into(target: Target, snap: bytes, prompt: str) -> dict[str, Any]:
    """POST the snapshot to `target` (timed), prove the context usable, delete it."""
    t0 = time.perf_counter()
    try:
        restored = call(target.client, "POST", "/v1/contexts/restore", content=snap).json()
    except RequestFailed as exc:
        tail = log_tail(target.server.log_path, 40).splitlines()
        return {"error": exc.detail, "server_log_errors": [line for line in tail if "level=ERROR" in line]}
    restore_s = time.perf_counter() - t0
    check = session_check(target.client, restored["id"], prompt)
    call(target.client, "DELETE", f"/v1/contexts/{restored['id']}")
    return {"restore_s": restore_s, "restored_tokens": restored["tokens"], "restored_in_use": check}


def restore_summary(
    reps: list[dict[str, Any]], name: str, recompute: float, download: float
) -> dict[str, Any]:
    done = [r[f"restore_{name}"] for r in reps if "restore_s" in r[f"restore_{name}"]]
    restore = median([d["restore_s"] for d in done])
    speedup = recompute / restore if done else None
    return {
        "restores_ok": len(done),
        "restores_failed": len(reps) - len(done),
        "restore_s_median": restore,
        "restore_speedup": speedup,
        "restore_plus_download_speedup": recompute / (restore + download) if done else None,
        "meets_target": speedup is not None and speedup >= TARGETS["restore_speedup_min"],
    }


def measure_snapshot(
    source: Target, model: Path, tok: Tokenizer, sizes: Sizes, logs: dict[str, str]
) -> dict[str, Any]:
    with (
        llamay_server("restore-target", model, sizes, logs) as server,
        httpx.Client(base_url=server.base_url, timeout=REQUEST_TIMEOUT) as client,
    ):
        warm_up(client)
        second = Target("second_server", server, client)
        reps = [snapshot_rep(source, [source, second], tok, sizes, rep) for rep in range(sizes.snapshot_reps)]
    recompute = median([r["recompute_s"] for r in reps])
    download = median([r["snapshot_download_s"] for r in reps])
    return {
        "method": "per rep: POST /v1/contexts with a prompt the server never saw (recompute), GET its "
        "snapshot (download), POST /v1/contexts/restore with those bytes into the same server "
        "(which has served the earlier measurements, so its KV cache holds cached prefixes) and into "
        "a second server that only served a warm-up request (restore), then a completion with "
        "llamay_session on each restored context to show it is usable",
        "reps": sizes.snapshot_reps,
        "context_tokens": reps[0]["tokens"],
        "snapshot_bytes": reps[0]["snapshot_bytes"],
        "snapshot_mb": reps[0]["snapshot_bytes"] / 1024 / 1024,
        "recompute_s_median": recompute,
        "snapshot_download_s_median": download,
        "same_server": restore_summary(reps, source.name, recompute, download),
        "second_server": restore_summary(reps, second.name, recompute, download),
        "target_speedup_min": TARGETS["restore_speedup_min"],
        "runs": reps,
    }


# ---------------------------------------------------------------------------------------------
# 4. The ticket-classification recipe.

LABELS = ("billing", "bug", "account", "feature", "other")
INSTRUCTIONS = (
    "You are the triage assistant of a software company's support desk. Read one customer "
    "ticket and answer with exactly one label, in lower case, and nothing else. The labels are: "
    "billing (invoices, charges, refunds, prices, payment methods), bug (something in the product "
    "is broken, crashes, shows wrong data or errors), account (sign-in, passwords, two-factor "
    "codes, user seats, email changes, closing an account), feature (a request for something the "
    "product does not do yet, or an improvement), other (anything else: praise, partnership offers, "
    "questions about the company). If a ticket fits two labels, pick the one the customer needs "
    "solved first. Never explain the label and never repeat the ticket."
)
EXAMPLES = (
    ("I was charged twice for the March invoice, please refund one of them.", "billing"),
    ("The export button does nothing since the last update, no file is downloaded.", "bug"),
    ("I cannot sign in because the two-factor code never arrives by SMS.", "account"),
    ("Could you add a dark mode to the dashboard? My eyes would thank you.", "feature"),
    ("Just wanted to say your support team was great last week. Thanks!", "other"),
    ("Why did my monthly price go up from 20 to 25 dollars without notice?", "billing"),
    ("The app crashes on startup on my phone after I updated it this morning.", "bug"),
    ("Please change the email address on my account to my new work address.", "account"),
    ("It would be great if reports could be scheduled to run every Monday.", "feature"),
    ("Do you have an office in Berlin where we could meet your sales team?", "other"),
    ("My credit card expired, how do I switch the payment method to a bank transfer?", "billing"),
    ("Totals in the weekly report are wrong: they count cancelled orders twice.", "bug"),
)
TICKET_SUBJECTS = (
    "the invoice for {m}",
    "my password reset link",
    "the CSV import of {n} rows",
    "the mobile app on version 4.{n}",
    "a refund of {n} dollars",
    "our team plan with {n} seats",
    "the calendar sync with {m} events",
    "search results for order {n}",
    "an API key created in {m}",
    "the annual subscription renewed in {m}",
)
TICKET_PROBLEMS = (
    "Something is wrong with {s}, can you check it?",
    "I need help with {s} as soon as possible.",
    "Since yesterday {s} does not work at all.",
    "Could you explain what happened to {s}?",
    "Please look into {s}; my manager is asking.",
)
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August")


def instruction_text(n_examples: int, code: str) -> str:
    """The system prompt: a code (see ticket_recipe), the instructions, examples."""
    shots = "\n".join(f"Ticket: {t}\nLabel: {label}" for t, label in EXAMPLES[:n_examples])
    return f"{code}\n{INSTRUCTIONS}\n\nExamples:\n{shots}"


def make_tickets(n: int) -> list[str]:
    """`n` distinct short tickets (deterministic)."""
    rng = random.Random(77)
    out: list[str] = []
    seen: set[str] = set()
    for i in range(n * 20):
        if len(out) == n:
            break
        subject = rng.choice(TICKET_SUBJECTS).format(m=rng.choice(MONTHS), n=rng.randint(2, 999))
        text = rng.choice(TICKET_PROBLEMS).format(s=subject)
        text = text[0].upper() + text[1:]
        if text not in seen:
            seen.add(text)
            out.append(text)
        elif i == n * 20 - 1:
            raise RuntimeError("could not make enough distinct tickets")
    return out


def random_code(rng: random.Random) -> str:
    return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))


@dataclass
class Ticket:
    """One classified ticket, or the error that stopped it."""

    answer: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    error: dict[str, Any] | None = None


@dataclass
class TicketRun:
    mode: str
    setup_s: float = 0.0
    tickets_s: float = 0.0
    results: list[Ticket] = field(default_factory=list)


def chat_body(system: str, ticket: str, sizes: Sizes) -> dict[str, Any]:
    return {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": f"Ticket: {ticket}"}],
        "max_tokens": sizes.ticket_max_tokens,
        "temperature": 0,
    }


async def classify(
    client: httpx.AsyncClient, system: str, ticket: str, sizes: Sizes, context: str | None
) -> Ticket:
    """Plain: one chat request. With `context`: fork it, chat on the fork, delete the fork."""
    t0 = time.perf_counter()
    body = chat_body(system, ticket, sizes)
    fork_id = None
    if context is not None:
        forks = await acall(client, "POST", f"/v1/contexts/{context}/fork", params={"n": 1})
        fork_id = forks["data"][0]["id"]
        body["llamay_session"] = fork_id
    out = await acall(client, "POST", "/v1/chat/completions", body)
    if fork_id is not None:
        await acall(client, "DELETE", f"/v1/contexts/{fork_id}")
    usage = out["usage"]
    text = str(out["choices"][0]["message"]["content"] or "")
    return Ticket(
        answer=text.strip(),
        prompt_tokens=int(usage["prompt_tokens"]),
        cached_tokens=cached_of(usage) or 0,
        latency_s=time.perf_counter() - t0,
    )


async def run_tickets(base_url: str, mode: str, tickets: list[str], sizes: Sizes) -> TicketRun:
    """Classify every ticket with `ticket_clients` concurrent clients in one of three modes:
    sessions, resend_cold (a fresh code per ticket), resend_warm (one code for all)."""
    rng = random.Random(5)
    shared = instruction_text(sizes.ticket_examples, random_code(rng))
    systems = [
        instruction_text(sizes.ticket_examples, random_code(rng)) if mode == "resend_cold" else shared
        for _ in tickets
    ]
    run = TicketRun(mode, results=[Ticket() for _ in tickets])
    limits = httpx.Limits(max_connections=sizes.ticket_clients * 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT, limits=limits) as client:
        context = None
        t0 = time.perf_counter()
        if mode == "sessions":
            made = await acall(
                client, "POST", "/v1/contexts", {"messages": [{"role": "system", "content": shared}]}
            )
            context = str(made["id"])
        run.setup_s = time.perf_counter() - t0
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(tickets)):
            queue.put_nowait(i)

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                try:
                    run.results[i] = await classify(client, systems[i], tickets[i], sizes, context)
                except RequestFailed as exc:
                    run.results[i] = Ticket(error=exc.detail)

        t1 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(sizes.ticket_clients)))
        run.tickets_s = time.perf_counter() - t1
    return run


def summarize(run: TicketRun) -> dict[str, Any]:
    ok = [t for t in run.results if t.error is None]
    errors = [t.error for t in run.results if t.error is not None]
    total = run.setup_s + run.tickets_s
    answers = [t.answer for t in ok]
    return {
        "tickets_ok": len(ok),
        "tickets_failed": len(errors),
        "first_error": errors[0] if errors else None,
        "setup_s": run.setup_s,
        "tickets_phase_s": run.tickets_s,
        "tickets_per_s": len(ok) / total if total else None,
        "tickets_per_s_excluding_setup": len(ok) / run.tickets_s if run.tickets_s else None,
        "latency_p50_ms": percentile([t.latency_s * 1000 for t in ok], 50),
        "latency_p95_ms": percentile([t.latency_s * 1000 for t in ok], 95),
        "prompt_tokens_mean": statistics.fmean(t.prompt_tokens for t in ok) if ok else None,
        "cached_tokens_mean": statistics.fmean(t.cached_tokens for t in ok) if ok else None,
        "cached_tokens_min": min((t.cached_tokens for t in ok), default=None),
        "answers_that_are_a_label": sum(1 for a in answers if as_label(a) in LABELS),
        "answer_examples": answers[:4],
    }


def as_label(answer: str | None) -> str:
    """The answer's first line, without a "Label:" prefix or a full stop, in lower case."""
    line = (answer or "").strip().split("\n")[0].strip().lower()
    return line.removeprefix("label:").strip(" .")


def agreement(a: TicketRun, b: TicketRun) -> float | None:
    """Fraction of tickets both runs answered with the same text (temperature 0)."""
    pairs = [
        (x.answer, y.answer)
        for x, y in zip(a.results, b.results, strict=True)
        if x.error is None and y.error is None
    ]
    return sum(1 for x, y in pairs if x == y) / len(pairs) if pairs else None


def ticket_mode(model: Path, sizes: Sizes, tickets: list[str], mode: str, logs: dict[str, str]) -> TicketRun:
    """One mode on its own fresh server; a failed request outside the tickets (warm-up,
    creating the context) carries the server log tail."""
    with llamay_server(f"tickets-{mode}", model, sizes, logs) as server:
        progress(f"tickets: {mode}")
        try:
            with httpx.Client(base_url=server.base_url, timeout=REQUEST_TIMEOUT) as client:
                warm_up(client)
            return asyncio.run(run_tickets(server.base_url, mode, tickets, sizes))
        except RequestFailed as exc:
            exc.detail["server_log_tail"] = log_tail(server.log_path, 25).splitlines()
            raise


def measure_tickets(model: Path, tok: Tokenizer, sizes: Sizes, logs: dict[str, str]) -> dict[str, Any]:
    tickets = make_tickets(sizes.tickets)
    runs = {
        mode: ticket_mode(model, sizes, tickets, mode, logs)
        for mode in ("sessions", "resend_cold", "resend_warm")
    }
    out: dict[str, Any] = {
        "method": (
            f"{len(tickets)} distinct short tickets, {sizes.ticket_clients} concurrent clients, chat with "
            f"max_tokens {sizes.ticket_max_tokens}, temperature 0; each mode on its own fresh server "
            f"(-concurrency {sizes.ticket_clients}) after one short warm-up request. sessions: POST "
            "/v1/contexts with the system message once (setup_s), then per ticket fork?n=1, chat with "
            "llamay_session on the fork, DELETE the fork. resend_cold: no session, and the prefix cache "
            "defeated by a distinct random 6-character code as the first line of every ticket's system "
            "message (so only the chat template's first tokens can be shared: see cached_tokens_mean). "
            "resend_warm: no session, the same system message for all (same code length), the prefix "
            "cache allowed to work. tickets_per_s includes setup_s."
        ),
        "system_message_tokens": tok.count(instruction_text(sizes.ticket_examples, "ABCDEF")),
        "ticket_tokens_mean": statistics.fmean(tok.count(t) for t in tickets),
        "sessions": summarize(runs["sessions"]),
        "resend_cold": summarize(runs["resend_cold"]),
        "resend_warm": summarize(runs["resend_warm"]),
        "answers_identical_to_resend_warm": {
            "sessions": agreement(runs["sessions"], runs["resend_warm"]),
            "resend_cold": agreement(runs["resend_cold"], runs["resend_warm"]),
            "note": "sessions sends exactly resend_warm's prompts; resend_cold's differ in the code line",
        },
    }
    out["ratios"] = _ticket_ratios(out)
    return out


def _ticket_ratios(out: dict[str, Any]) -> dict[str, float | None]:
    def ratio(a: str, b: str) -> float | None:
        x, y = out[a]["tickets_per_s"], out[b]["tickets_per_s"]
        return x / y if x and y else None

    return {
        "sessions_over_resend_cold": ratio("sessions", "resend_cold"),
        "resend_warm_over_resend_cold": ratio("resend_warm", "resend_cold"),
        "sessions_over_resend_warm": ratio("sessions", "resend_warm"),
    }


# ---------------------------------------------------------------------------------------------
# Main.


def llamay_commit() -> str:
    """The commit llamay runs from, "+dirty" when the work tree has changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def resolve_model(name: str | None) -> Path:
    from llamay.store import ModelStore

    return Path(ModelStore().resolve(name).path)


def measure_main_server(model: Path, tok: Tokenizer, sizes: Sizes, logs: dict[str, str]) -> dict[str, Any]:
    """Measurements 1-3 on one server (each with prompts it never saw); forks last, since
    they leave 2,000 records behind."""
    out: dict[str, Any] = {}
    with (
        llamay_server("contexts", model, sizes, logs) as server,
        httpx.Client(base_url=server.base_url, timeout=REQUEST_TIMEOUT) as client,
    ):
        warm_up(client)
        out["prefix_cache_ttft"] = guarded(
            "prefix_cache_ttft", server, lambda: measure_ttft(client, tok, sizes)
        )
        source = Target("same_server", server, client)
        out["snapshot_restore"] = guarded(
            "snapshot_restore", server, lambda: measure_snapshot(source, model, tok, sizes, logs)
        )
        out["fork"] = guarded("fork", server, lambda: measure_fork(client, server, tok, sizes))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.state", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model name or .gguf path (default: the default model)")
    parser.add_argument("--quick", action="store_true", help="shrink everything for a smoke run")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    load_start = os.getloadavg()
    model = resolve_model(args.model)
    logs: dict[str, str] = {}
    tok = Tokenizer(model)
    try:
        results = guarded_main(model, tok, sizes, logs)
    finally:
        tok.close()
    report = {
        "benchmark": "bench.state",
        "quick": args.quick,
        "model": str(model),
        "llamay_commit": llamay_commit(),
        "cpus": os.cpu_count(),
        "load_avg_start": list(load_start),
        "load_avg_end": list(os.getloadavg()),
        "sizes": sizes.__dict__,
        **results,
        "targets": TARGETS,
        "wall_s": time.perf_counter() - started,
        "server_logs": logs,
    }
    print_json(report)
    return 0


def guarded_main(model: Path, tok: Tokenizer, sizes: Sizes, logs: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        out.update(measure_main_server(model, tok, sizes, logs))
    except ServerError as exc:
        out["contexts_server_error"] = str(exc)
    out["ticket_recipe"] = guarded("ticket_recipe", None, lambda: measure_tickets(model, tok, sizes, logs))
    from .state_tenants import measure_namespaces

    out["tenant_namespaces"] = guarded(
        "tenant_namespaces", None, lambda: measure_namespaces(model, tok, sizes, logs)
    )
    return out


if __name__ == "__main__":
    sys.exit(main())
