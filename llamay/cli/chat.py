"""The chat behind `llamay run [MODEL] [PROMPT]`: one answer, or an interactive conversation
with history, multi-line input and slash commands, over a `llamay.LLM` (a running server, or
the model loaded in this process)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import LlamayError
from ..library import LLM
from .term import Term

__all__ = ["Settings", "ChatSession", "read_message", "HELP"]

HELP = """Available commands:
  /set parameter NAME VALUE   temperature, top_p, top_k, min_p, seed, num_predict (max tokens)
  /set system TEXT            the system message (/set system alone clears it)
  /set think | nothink        let a reasoning model think, or ask it not to
  /set verbose | quiet        print a stats line after each answer, or not
  /show info | parameters | system
  /clear                      forget the conversation so far
  /bye                        leave
Begin a message with \"\"\" to write several lines; end it with \"\"\"."""

# /set parameter names (Ollama's spellings first) -> (option, type).
PARAMETERS: dict[str, tuple[str, type]] = {
    "temperature": ("temperature", float),
    "top_p": ("top_p", float),
    "top_k": ("top_k", int),
    "min_p": ("min_p", float),
    "seed": ("seed", int),
    "num_predict": ("max_tokens", int),
    "max_tokens": ("max_tokens", int),
}


@dataclass
class Settings:
    """What each answer is asked with; None leaves the model's own default."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    max_tokens: int | None = None
    system: str | None = None
    thinking: bool | None = None
    verbose: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def options(self) -> dict[str, Any]:
        names = ("temperature", "top_p", "top_k", "min_p", "seed", "max_tokens", "system", "thinking")
        return {k: v for k, v in asdict(self).items() if k in names and v is not None}


def read_message(read_line: Callable[[str], str]) -> str:
    """One message from `read_line` (which raises EOFError at the end of input): a line, or
    several between a pair of triple quotes."""
    line = read_line(">>> ")
    if not line.lstrip().startswith('"""'):
        return line
    first = line.lstrip()[3:]
    if first.rstrip().endswith('"""'):
        return first.rstrip()[:-3]
    lines = [first] if first else []
    while True:
        more = read_line("... ")
        if more.rstrip().endswith('"""'):
            lines.append(more.rstrip()[:-3])
            return "\n".join(lines).strip("\n")
        lines.append(more)


class ChatSession:
    """A conversation with `llm`, printed through `term`. `where` says what answers it (a
    server's address, or "this process")."""

    def __init__(self, llm: LLM, term: Term, settings: Settings, where: str) -> None:
        self.llm = llm
        self.term = term
        self.settings = settings
        self.where = where
        self.history: list[dict[str, Any]] = []

    def ask(self, text: str, *, remember: bool = True) -> bool:
        """Stream the answer to `text`; True if it ran to the end. Ctrl-C stops it (the
        server or engine frees its work) and the turn is not remembered."""
        messages = [*self.history, {"role": "user", "content": text}]
        stream = self.llm.stream(messages, **self.settings.options())
        shown = _Shown(self.term)
        try:
            for chunk in stream:
                shown.add(chunk.kind, chunk.reasoning if chunk.kind == "reasoning" else chunk.text)
        except KeyboardInterrupt:
            stream.close()
            shown.end()
            self.term.note("(stopped)")
            return False
        shown.end()
        result = stream.result
        if result is None:
            return False
        if remember:
            self.history = [*messages, {"role": "assistant", "content": result.text}]
        if self.settings.verbose:
            self.term.note(stats_text(result))
        if result.finish_message:
            self.term.note(f"note: {result.finish_message}")
        return True

    def command(self, line: str) -> bool:
        """Run a slash command; False when it ends the conversation."""
        words = line.split()
        verb = words[0].lower()
        if verb in ("/bye", "/exit", "/quit"):
            return False
        if verb in ("/?", "/help"):
            self.term.note(HELP)
        elif verb == "/clear":
            self.history = []
            self.term.note("Cleared the conversation.")
        elif verb == "/set":
            self._set(line, words[1:])
        elif verb == "/show":
            self._show(words[1:])
        else:
            self.term.note(f"Unknown command '{verb}'. Type /? for help.")
        return True

    def _set(self, line: str, args: list[str]) -> None:
        s = self.settings
        what = args[0].lower() if args else ""
        if what == "system":
            text = line.split(None, 2)[2] if len(args) > 1 else ""
            s.system = text or None
            self.term.note("Set the system message." if text else "Cleared the system message.")
        elif what in ("verbose", "quiet"):
            s.verbose = what == "verbose"
            self.term.note(f"Set {what} mode.")
        elif what in ("think", "nothink"):
            s.thinking = what == "think"
            self.term.note("Thinking on." if s.thinking else "Thinking off.")
        elif what == "parameter" and len(args) == 3 and args[1].lower() in PARAMETERS:
            name, kind = PARAMETERS[args[1].lower()]
            try:
                setattr(s, name, kind(args[2]))
            except ValueError:
                self.term.note(f"'{args[2]}' is not a valid {kind.__name__} for {args[1]}.")
                return
            self.term.note(f"Set parameter '{args[1]}' to '{args[2]}'.")
        else:
            self.term.note(
                "Usage: /set parameter NAME VALUE | system TEXT | think | nothink | verbose | quiet"
            )

    def _show(self, args: list[str]) -> None:
        what = args[0].lower() if args else "info"
        s = self.settings
        if what == "info":
            self.term.note(
                f"model: {self.llm.model}\nanswered by: {self.where}\nturns: {len(self.history) // 2}"
            )
        elif what == "parameters":
            shown = {k: v for k, v in s.options().items() if k not in ("system", "thinking")}
            lines = [f"{k:<12} {v}" for k, v in shown.items()] or ["(the model's defaults)"]
            self.term.note("\n".join(lines))
        elif what == "system":
            self.term.note(s.system or "(no system message)")
        else:
            self.term.note("Usage: /show info | parameters | system")


class _Shown:
    """Reasoning and answer as they stream: thinking apart from the answer, never as tags."""

    def __init__(self, term: Term) -> None:
        self.term = term
        self.state = "start"  # start -> thinking -> answer

    def add(self, kind: str, text: str) -> None:
        if not text:
            return
        if kind == "reasoning":
            if self.state == "start":
                self.term.thinking("Thinking...\n")
            self.state = "thinking" if self.state != "answer" else self.state
            self.term.thinking(text)
            return
        if kind != "content":
            return
        if self.state == "thinking":
            self.term.thinking("\n...done thinking.\n\n")
        self.state = "answer"
        self.term.answer(text)

    def end(self) -> None:
        if self.state == "thinking":
            self.term.thinking("\n")
        elif self.state == "answer":
            self.term.answer("\n")


def stats_text(result: Any) -> str:
    """`prompt 12 tokens (8 cached) in 35 ms · generated 40 tokens in 0.61 s (65.6 tok/s) · stop`"""
    u, t = result.usage, result.timings
    rate = f"{u.completion_tokens / (t.generate_ms / 1000):.1f} tok/s" if t.generate_ms > 0 else "-"
    return (
        f"prompt {u.prompt_tokens} tokens ({u.cached} cached) in {t.prompt_ms:.0f} ms · "
        f"generated {u.completion_tokens} tokens in {t.generate_ms / 1000:.2f} s ({rate}) · "
        f"{result.finish_reason}"
    )


def converse(session: ChatSession, read_line: Callable[[str], str]) -> None:
    """The interactive loop: read, answer, until /bye or the end of input (Ctrl-D)."""
    for text in _messages(session, read_line):
        if text.startswith("/"):
            if not session.command(text):
                return
            continue
        try:
            session.ask(text)
        except LlamayError as exc:
            session.term.note(f"error: {exc.message}")


def _messages(session: ChatSession, read_line: Callable[[str], str]) -> Iterator[str]:
    while True:
        try:
            text = read_message(read_line).strip()
        except EOFError:
            session.term.answer("\n")
            return
        except KeyboardInterrupt:
            session.term.note("\nUse Ctrl-D or /bye to leave.")
            continue
        if text:
            yield text
