"""Who may read a document: access labels from the indexed folder, and readers.

Every document carries a `Label`.  It comes from the nearest folder, from the document's own
folder up to the indexed folder, that is either

* holding a ``.llamay-access`` file: the group names in it, one per line (blank lines and
  ``#`` comments ignored), may read; a line ``public`` (or ``*``) makes it readable by everyone;
  a file naming no group leaves the documents to admins only; or
* named ``public``: everyone may read, unless a folder between it and the indexed folder
  holds a ``.llamay-access`` file that restricts it: a ``public`` folder lifts only the
  indexed folder's own (default) label, never a restricted sub-folder's, so a folder made
  inside ``finance/`` (by whoever may write there) cannot publish finance's files.

A folder holding a ``.llamay-access`` file is ruled by that file even if it is named
``public``.  With neither anywhere up to the indexed folder, documents are public.

A `Reader` may read a document that is public, or whose groups it shares; an admin reads all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..auth import Principal

__all__ = [
    "ACCESS_FILE",
    "ADMIN",
    "PUBLIC",
    "PUBLIC_DIR",
    "AccessResolver",
    "Label",
    "Reader",
    "parse_access",
    "reader_of",
]

ACCESS_FILE = ".llamay-access"
PUBLIC_DIR = "public"
_EVERYONE = frozenset({"public", "*"})


@dataclass(frozen=True)
class Label:
    """Who may read a document: everyone when `public`, else members of `groups` (and admins)."""

    public: bool
    groups: frozenset[str] = field(default_factory=frozenset)


PUBLIC = Label(True)


@dataclass(frozen=True)
class Reader:
    """Who is asking: an `admin` reads every document, others public ones and those labelled
    with one of their `groups`."""

    groups: frozenset[str] = field(default_factory=frozenset)
    admin: bool = False

    def may_read(self, label: Label) -> bool:
        return self.admin or label.public or not self.groups.isdisjoint(label.groups)


ADMIN = Reader(admin=True)


def reader_of(principal: Principal) -> Reader:
    """The reader an authenticated principal is."""
    return Reader(frozenset(principal.groups), principal.admin)


def parse_access(text: str) -> Label:
    """The label a ``.llamay-access`` file's text gives."""
    groups = set()
    for line in text.splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            groups.add(name)
    if groups & _EVERYONE:
        return PUBLIC
    return Label(False, frozenset(groups))


class AccessResolver:
    """Labels for the files under `root`, reading each folder's access file once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._by_dir: dict[PurePosixPath, Label] = {}
        # The folder whose access file gave each folder its label (the root's "." for the
        # default): a public/ folder lifts only the root's restriction.
        self._origin: dict[PurePosixPath, PurePosixPath] = {}

    def label(self, rel_path: str) -> Label:
        """The label of the file at `rel_path` (POSIX, relative to `root`)."""
        return self._dir_label(PurePosixPath(rel_path).parent)

    def _dir_label(self, rel_dir: PurePosixPath) -> Label:
        found = self._by_dir.get(rel_dir)
        if found is not None:
            return found
        access = self.root.joinpath(*rel_dir.parts, ACCESS_FILE)
        origin = rel_dir
        if access.is_file():
            label = parse_access(access.read_text(encoding="utf-8", errors="replace"))
        elif rel_dir == rel_dir.parent:
            label = PUBLIC
        else:
            label = self._dir_label(rel_dir.parent)
            origin = self._origin[rel_dir.parent]
            if rel_dir.name == PUBLIC_DIR and (label.public or origin == origin.parent):
                label = PUBLIC  # a public/ folder lifts the root's label, not a sub-folder's
        self._by_dir[rel_dir] = label
        self._origin[rel_dir] = origin
        return label
