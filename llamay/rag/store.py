"""The index file: one SQLite database holding documents, their access labels, passages, the
passage vectors and an FTS5 keyword index.

Tables: ``meta`` (key/value: schema, model, dim, root, chunker, generation), ``documents``
(path relative to the indexed folder, sha256, kind, public), ``doc_groups`` (the groups that
may read a non-public document), ``passages`` (document, order, byte range, text, number of
keyword terms, the vector as little-endian float32 bytes) and ``passages_fts`` (FTS5 over the
passage text, kept in step by triggers) with ``passages_terms`` (its fts5vocab "instance"
table: one row per term occurrence).  ``generation`` grows by one with every committed build,
so a reader can tell that the file changed.  Row ids are never reused (AUTOINCREMENT): a
reader holding an older snapshot cannot mistake a new passage for one it knew.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .access import Label
from .chunk import Passage

__all__ = [
    "MAX_QUERY_TERMS",
    "SCHEMA_VERSION",
    "STOPWORDS",
    "DocRecord",
    "IndexStore",
    "NotAnIndex",
    "keyword_terms",
    "query_terms",
]

SCHEMA_VERSION = "1"
_TERM = re.compile(r"[^\W_]+")
#: Distinct query terms used for keyword search; the rest are ignored.
MAX_QUERY_TERMS = 64
#: Words left out of keyword queries: Lucene's English stop words and question words.  They
#: match most passages, so they cost the most to look up and tell the least.
_STOPWORDS = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with what which who whom whose how when where why do does did"
)
STOPWORDS = frozenset(_STOPWORDS.split())

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT NOT NULL UNIQUE, sha256 TEXT NOT NULL, size INTEGER NOT NULL,
    kind TEXT NOT NULL, public INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS doc_groups (
    doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE, grp TEXT NOT NULL,
    PRIMARY KEY (doc_id, grp));
CREATE TABLE IF NOT EXISTS passages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, doc_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, start INTEGER NOT NULL, "end" INTEGER NOT NULL, text TEXT NOT NULL,
    n_terms INTEGER NOT NULL, vector BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS passages_doc ON passages(doc_id);
CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(
    text, content='passages', content_rowid='id', tokenize='unicode61 remove_diacritics 0');
CREATE VIRTUAL TABLE IF NOT EXISTS passages_terms USING fts5vocab(passages_fts, 'instance');
CREATE TRIGGER IF NOT EXISTS passages_ai AFTER INSERT ON passages BEGIN
    INSERT INTO passages_fts(rowid, text) VALUES (new.id, new.text); END;
CREATE TRIGGER IF NOT EXISTS passages_ad AFTER DELETE ON passages BEGIN
    INSERT INTO passages_fts(passages_fts, rowid, text) VALUES ('delete', old.id, old.text); END;
"""


class NotAnIndex(ValueError):
    """The file is not a llamay index (or one of an unknown schema)."""


def keyword_terms(text: str) -> list[str]:
    """The keyword terms of `text` as the index's FTS5 tokenizer (unicode61) makes them: runs
    of letters and digits, lower-cased."""
    return [t.lower() for t in _TERM.findall(text)]


def query_terms(query: str) -> list[str]:
    """The distinct terms a keyword search looks up for `query`, in order: its keyword terms
    less `STOPWORDS` (all of them when nothing else is left), at most `MAX_QUERY_TERMS`."""
    terms = list(dict.fromkeys(keyword_terms(query)))
    return ([t for t in terms if t not in STOPWORDS] or terms)[:MAX_QUERY_TERMS]


@dataclass(frozen=True)
class DocRecord:
    """A document as stored: row `id`, `path`, `sha256`, `kind` and its `label`."""

    id: int
    path: str
    sha256: str
    kind: str
    label: Label


class IndexStore:
    """The index database, opened for reading and writing.  Not thread-safe: one user at a
    time (readers in other processes are fine: SQLite's WAL mode)."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    @classmethod
    def open(cls, path: Path, *, create: bool = False, check_same_thread: bool = True) -> IndexStore:
        """Open the index at `path`; with `create`, make it (and its folder) if missing.
        FileNotFoundError for a missing file, NotAnIndex for a file that is not an index."""
        if not create and not path.is_file():
            raise FileNotFoundError(f"no index at {path}; build one with `llamay index build DIR -o {path}`")
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=check_same_thread, isolation_level=None)
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA busy_timeout = 10000")
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not tables and create:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.executescript(_SCHEMA)
                conn.execute("INSERT INTO meta VALUES ('schema', ?), ('generation', '0')", (SCHEMA_VERSION,))
            store = cls(conn, path)
            if store.meta("schema") != SCHEMA_VERSION:
                raise NotAnIndex(f"{path} is not a llamay index (schema {SCHEMA_VERSION})")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise NotAnIndex(f"{path} is not a llamay index: {exc}") from None
        except BaseException:
            conn.close()
            raise
        return store

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Everything inside commits together, or not at all."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # -- meta --------------------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        try:
            row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        except sqlite3.OperationalError:  # no meta table: not an index
            return None
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    def generation(self) -> int:
        return int(self.meta("generation") or 0)

    # -- documents ---------------------------------------------------------------------------
    def documents(self) -> dict[str, DocRecord]:
        """Every stored document by path."""
        groups: dict[int, set[str]] = {}
        for doc_id, grp in self.conn.execute("SELECT doc_id, grp FROM doc_groups"):
            groups.setdefault(doc_id, set()).add(grp)
        out: dict[str, DocRecord] = {}
        for doc_id, path, sha, kind, public in self.conn.execute(
            "SELECT id, path, sha256, kind, public FROM documents"
        ):
            label = Label(bool(public), frozenset(groups.get(doc_id, ())))
            out[path] = DocRecord(doc_id, path, sha, kind, label)
        return out

    def add_document(
        self,
        path: str,
        sha256: str,
        size: int,
        kind: str,
        label: Label,
        passages: Sequence[Passage],
        vectors: np.ndarray,
    ) -> int:
        """Store a document with its passages and their vectors (float32 rows, in order)
        replacing any document at `path`; returns its id.  Call inside `transaction`."""
        old = self.conn.execute("SELECT id FROM documents WHERE path = ?", (path,)).fetchone()
        if old is not None:
            self.delete_document(int(old[0]))
        cur = self.conn.execute(
            "INSERT INTO documents (path, sha256, size, kind, public) VALUES (?, ?, ?, ?, ?)",
            (path, sha256, size, kind, int(label.public)),
        )
        doc_id = int(cur.lastrowid or 0)
        self._write_groups(doc_id, label)
        rows = np.ascontiguousarray(vectors, dtype="<f4")
        self.conn.executemany(
            'INSERT INTO passages (doc_id, seq, start, "end", text, n_terms, vector) VALUES (?, ?, ?, ?, ?, ?, ?)',
            [
                (doc_id, i, p.start, p.end, p.text, len(keyword_terms(p.text)), rows[i].tobytes())
                for i, p in enumerate(passages)
            ],
        )
        return doc_id

    def set_label(self, doc_id: int, label: Label) -> None:
        self.conn.execute("UPDATE documents SET public = ? WHERE id = ?", (int(label.public), doc_id))
        self.conn.execute("DELETE FROM doc_groups WHERE doc_id = ?", (doc_id,))
        self._write_groups(doc_id, label)

    def _write_groups(self, doc_id: int, label: Label) -> None:
        self.conn.executemany(
            "INSERT INTO doc_groups (doc_id, grp) VALUES (?, ?)", [(doc_id, g) for g in sorted(label.groups)]
        )

    def delete_document(self, doc_id: int) -> None:
        """Remove a document and its passages (their keyword entries go with them)."""
        self.conn.execute("DELETE FROM passages WHERE doc_id = ?", (doc_id,))
        self.conn.execute("DELETE FROM doc_groups WHERE doc_id = ?", (doc_id,))
        self.conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))

    def counts(self) -> tuple[int, int]:
        """(documents, passages) stored."""
        docs = self.conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        passages = self.conn.execute("SELECT count(*) FROM passages").fetchone()[0]
        return int(docs), int(passages)
