"""Measurement 4 of bench.state, ticket_recipe: one instruction context, then short tickets
classified by 8 concurrent clients, each ticket on its own fork (fork, chat with llamay_session,
delete), against resending the instruction with the prefix cache defeated, and against plain
resending on a warm server (the prefix cache working without sessions). Each way runs on a fresh
server."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from llamay.testing.server import log_tail

from ..common import percentile
from .common import (
    REQUEST_TIMEOUT,
    RequestFailed,
    Sizes,
    Tokenizer,
    acall,
    cached_of,
    llamay_server,
    progress,
    warm_up,
)

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
