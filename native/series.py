#!/usr/bin/env python3
"""Check llama-cpp-python's source tarball and apply native/'s patch series to it, strictly.

    python3 native/series.py verify TARBALL SHA256
    python3 native/series.py apply SOURCE_DIR [PATCH ...]

`verify` fails unless the file's sha256 is the pinned one. `apply` applies the patches (default:
every NNNN-*.patch beside this file, in name order) to SOURCE_DIR as `patch -p1` would, but only
exactly: each hunk's context and removed lines must be the source's lines at the very line the
hunk names (counting the earlier hunks of its patch). No fuzz, and no offset either: the tarball
is pinned by sha256, so every line number is known, and a hunk whose text sits at another line
was written against some other source (it could even land on a second copy of the same lines).
The first hunk that does not match stops everything with a message naming the patch, the file
and the hunk; nothing is written unless every patch applies.

Standard library only: setup.sh runs it before anything is installed.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

HERE = Path(__file__).resolve().parent
_HUNK = re.compile(rb"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NO_NEWLINE = b"\\"  # "\ No newline at end of file": the line before it has no newline


class SeriesError(Exception):
    """A tarball that is not the pinned one, or a patch that does not apply exactly."""


@dataclass
class Hunk:
    number: int  # 1-based, within its file's section of the patch
    header: str
    at_line: int  # where the hunk starts in the patch file (1-based)
    old_start: int
    new_start: int
    old: list[bytes] = field(default_factory=list)
    new: list[bytes] = field(default_factory=list)


@dataclass
class FilePatch:
    path: str  # relative to the source, the first component (a/, b/) stripped
    creates: bool  # --- /dev/null
    deletes: bool  # +++ /dev/null
    hunks: list[Hunk] = field(default_factory=list)


def series(folder: Path = HERE) -> list[Path]:
    """The series: every NNNN-*.patch in `folder`, in name order."""
    return sorted(p for p in folder.glob("[0-9][0-9][0-9][0-9]-*.patch") if p.is_file())


def verify(tarball: Path, sha256: str) -> None:
    """SeriesError unless `tarball`'s sha256 is `sha256`."""
    digest = hashlib.sha256()
    with open(tarball, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    got = digest.hexdigest()
    if got != sha256.lower():
        raise SeriesError(
            f"{tarball.name} has sha256 {got}, not the pinned {sha256.lower()}: it is not the source "
            "the patches in native/ were written against (a changed upload or a damaged download); "
            "refusing to build from it"
        )


def _strip_path(raw: bytes, name: str, line: int) -> str | None:
    """The path of a ---/+++ line with its first component stripped (None for /dev/null)."""
    text = raw.split(b"\t", 1)[0].rstrip(b"\r\n").decode("utf-8", errors="replace")
    if text == "/dev/null":
        return None
    parts = PurePosixPath(text).parts[1:]
    if not parts or text.startswith("/") or ".." in parts:
        raise SeriesError(f"{name}, line {line}: cannot use the path {text!r}")
    return "/".join(parts)


def parse(name: str, data: bytes) -> list[FilePatch]:
    """A unified diff's file sections; the text before the first `--- ` line (followed by a
    `+++ ` line) is the patch's description and is skipped."""
    lines = _lines(data)
    i = 0
    while i < len(lines) and not (
        lines[i].startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ ")
    ):
        i += 1
    files: list[FilePatch] = []
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            old = _strip_path(line[4:], name, i + 1)
            new = _strip_path(lines[i + 1][4:], name, i + 2)
            path = new if new is not None else old
            if path is None:
                raise SeriesError(f"{name}, line {i + 1}: both sides are /dev/null")
            files.append(FilePatch(path, creates=old is None, deletes=new is None))
            i += 2
            continue
        m = _HUNK.match(line)
        if m is None or not files:
            raise SeriesError(f"{name}, line {i + 1}: expected a hunk (@@ ... @@) or a file (---), got {_show(line[:60])}")
        section = files[-1]
        hunk = Hunk(
            number=len(section.hunks) + 1,
            header=m.group(0).decode(),
            at_line=i + 1,
            old_start=int(m.group(1)),
            new_start=int(m.group(3)),
        )
        n_old = int(m.group(2) or b"1")
        n_new = int(m.group(4) or b"1")
        i += 1
        kind = b""
        while len(hunk.old) < n_old or len(hunk.new) < n_new:
            if i == len(lines):
                raise SeriesError(f"{name}: hunk {hunk.number} of {section.path} ({hunk.header}) ends early")
            body = lines[i]
            if body in (b"\n", b"\r\n"):  # a blank context line whose space was trimmed
                body = b" " + body
            if body.startswith(_NO_NEWLINE) and kind:
                _no_newline(hunk, kind)
                i += 1
                continue
            kind, text = body[:1], body[1:]
            if kind == b" ":
                hunk.old.append(text)
                hunk.new.append(text)
            elif kind == b"-":
                hunk.old.append(text)
            elif kind == b"+":
                hunk.new.append(text)
            else:
                raise SeriesError(f"{name}, line {i + 1}: not a line of hunk {hunk.number} of {section.path}")
            if len(hunk.old) > n_old or len(hunk.new) > n_new:
                raise SeriesError(f"{name}: hunk {hunk.number} of {section.path} ({hunk.header}) is longer than its header says")
            i += 1
        if i < len(lines) and lines[i].startswith(_NO_NEWLINE) and kind:
            _no_newline(hunk, kind)
            i += 1
        section.hunks.append(hunk)
    empty = [f.path for f in files if not f.hunks]
    if not files or empty:
        raise SeriesError(f"{name}: no hunks for {empty[0]}" if empty else f"{name}: no file to patch (no ---/+++ lines)")
    return files


def _lines(data: bytes) -> list[bytes]:
    """`data` split after each newline (LF) only: a CR stays part of its line, as patch reads it."""
    parts = data.split(b"\n")
    lines = [part + b"\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _no_newline(hunk: Hunk, kind: bytes) -> None:
    sides = {b" ": (hunk.old, hunk.new), b"-": (hunk.old,), b"+": (hunk.new,)}[kind]
    for side in sides:
        side[-1] = side[-1].rstrip(b"\n")


def _apply_file(name: str, section: FilePatch, lines: list[bytes]) -> list[bytes]:
    """`lines` with `section`'s hunks applied, each exactly where its header says."""
    delta = 0  # lines added minus removed by this section's earlier hunks
    end = 0  # where the previous hunk ended
    for h in section.hunks:
        where = f"{name}: hunk {h.number} of {section.path} ({h.header}, line {h.at_line} of the patch)"
        at = (h.old_start - 1 if h.old else h.old_start) + delta
        if at < end:
            raise SeriesError(f"{where}: starts inside the hunk before it")
        if (h.new_start - 1 if h.new else h.new_start) != at:
            new_start = at + 1 if h.new else at
            raise SeriesError(f"{where}: its header says +{h.new_start}, the hunks before it make that +{new_start}")
        found = lines[at : at + len(h.old)]
        if found != h.old:
            raise SeriesError(where + " does not apply exactly: " + _mismatch(h, found, lines, delta))
        lines[at : at + len(h.old)] = h.new
        delta += len(h.new) - len(h.old)
        end = at + len(h.new)
    return lines


def _mismatch(h: Hunk, found: list[bytes], lines: list[bytes], delta: int) -> str:
    """Which line differs (numbered as the hunk numbers them), and where the hunk's text is
    instead if it is elsewhere in the file."""
    k = next((k for k, (a, b) in enumerate(zip(h.old, found, strict=False)) if a != b), len(found))
    if k < len(found):
        text = f"line {h.old_start + k} is {_show(found[k])}, the patch expects {_show(h.old[k])}"
    else:
        text = f"the file ends at line {h.old_start + k - 1}, the patch expects {_show(h.old[k])} next"
    n = len(h.old)
    elsewhere = [i + 1 - delta for i in range(len(lines) - n + 1) if n and lines[i : i + n] == h.old]
    if elsewhere:
        text += (
            f" (its text is at line {elsewhere[0]} instead: the patch was made against other "
            "line numbers; make it again against the source with the patches before it applied)"
        )
    return text


def _show(line: bytes) -> str:
    return repr(line.removesuffix(b"\n").decode("utf-8", errors="replace"))


def apply(source: Path, patches: list[Path]) -> None:
    """Apply `patches` in order to the tree at `source`; SeriesError (and nothing written)
    unless every hunk applies exactly."""
    changed: dict[str, list[bytes] | None] = {}  # path -> new lines (None: deleted)
    for patch in patches:
        name = f"native/{patch.name}" if patch.parent == HERE else str(patch)
        for section in parse(name, patch.read_bytes()):
            target = source / section.path
            if section.path in changed:
                current = changed[section.path]
            elif target.is_file():
                current = _lines(target.read_bytes())
            else:
                current = None
            # A new file is `--- /dev/null`, or (diff -N) one hunk adding lines at line 0.
            creates = section.creates or [(h.old_start, len(h.old)) for h in section.hunks] == [(0, 0)]
            if current is not None and section.creates:
                raise SeriesError(f"{name}: {section.path} already exists in the source")
            if current is None and not creates:
                raise SeriesError(f"{name}: {section.path} does not exist in the source")
            lines = _apply_file(name, section, list(current or []))
            if section.deletes and lines:
                raise SeriesError(f"{name}: {section.path} is not empty after the patch deletes it")
            changed[section.path] = None if section.deletes else lines
    for path, result in changed.items():
        target = source / path
        if result is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"".join(result))


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 3 and argv[0] == "verify":
            verify(Path(argv[1]), argv[2])
        elif len(argv) >= 2 and argv[0] == "apply":
            patches = [Path(p) for p in argv[2:]] or series()
            if not patches:
                raise SeriesError(f"no NNNN-*.patch files in {HERE}")
            apply(Path(argv[1]), patches)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (SeriesError, OSError) as exc:
        print(f"native: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
