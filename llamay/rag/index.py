"""`Index`: an index file opened for searching (what ``app.state.index`` holds).

The passages' vectors, lengths and documents' labels are held in memory (a snapshot), and
vector search is an exact (brute-force) cosine search over them with numpy.  The snapshot is
reloaded when a build has committed since (the index's ``generation`` changed), checked at
every search, so a server picks up ``llamay index build`` without a restart.  Passages a build
adds after the snapshot are not found until it has committed; results always come from the
snapshot's passages, filtered by the snapshot's labels.  Each reader's readable mask and each
query term's occurrences are cached for the snapshot's lifetime (bounded), so repeated readers
and common terms cost nothing after their first search.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .access import Label, Reader
from .search import bm25_scores, rrf, top_rows, vector_scores
from .store import IndexStore, query_terms

__all__ = ["MASK_CACHE", "POSTINGS_CACHE", "Hit", "Index", "open_index"]

#: Term occurrences (snapshot row numbers) kept in memory between searches, at most.
POSTINGS_CACHE = 4_000_000
#: Readers whose readable-passage masks are kept between searches, at most.
MASK_CACHE = 256


@dataclass(frozen=True)
class Hit:
    """A passage found: its `text`, `source` (path under the indexed folder), byte range
    [`start`, `end`) in that file, and `score`."""

    text: str
    source: str
    start: int
    end: int
    score: float

    def as_json(self) -> dict[str, object]:
        return {
            "text": self.text,
            "source": self.source,
            "start": self.start,
            "end": self.end,
            "score": self.score,
        }


@dataclass(frozen=True)
class _Snapshot:
    generation: int
    model: str
    model_source: str
    dim: int
    root: str
    ids: np.ndarray  # passage ids, ascending (row number -> id)
    doc_of: np.ndarray  # row -> document id
    lengths: np.ndarray  # row -> keyword terms
    vectors: np.ndarray  # (rows, dim) float32, unit rows
    labels: dict[int, Label]


class Index:
    """An index file opened for searching.  Thread-safe (one search at a time)."""

    def __init__(self, store: IndexStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._snap = self._load()
        self._postings: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cached = 0
        self._masks: dict[Reader, np.ndarray] = {}  # per reader, for this snapshot

    @property
    def path(self) -> Path:
        return self._store.path

    @property
    def model(self) -> str:
        """The embedding model the index was built with (queries must use it too)."""
        return self._snap.model

    @property
    def model_source(self) -> str:
        """What loads the embedding model: the name or GGUF path the build was given
        (``load_encoder(index.model_source, "embed")``), else the model's name."""
        return self._snap.model_source or self._snap.model

    @property
    def dim(self) -> int:
        return self._snap.dim

    @property
    def root(self) -> str:
        """The folder the index was last built over."""
        return self._snap.root

    @property
    def size(self) -> int:
        """Passages in the snapshot."""
        return len(self._snap.ids)

    def _load(self) -> _Snapshot:
        store = self._store
        generation = store.generation()
        dim = int(store.meta("dim") or 0)
        rows = store.conn.execute("SELECT id, doc_id, n_terms, vector FROM passages ORDER BY id").fetchall()
        rows = [r for r in rows if len(r[3]) == 4 * dim]
        vectors = np.frombuffer(b"".join(r[3] for r in rows), dtype="<f4").reshape(len(rows), dim)
        labels = {doc.id: doc.label for doc in store.documents().values()}
        return _Snapshot(
            generation,
            store.meta("model") or "",
            store.meta("model_source") or "",
            dim,
            store.meta("root") or "",
            np.array([r[0] for r in rows], dtype=np.int64),
            np.array([r[1] for r in rows], dtype=np.int64),
            np.array([r[2] for r in rows], dtype=np.float64),
            vectors.astype(np.float32),
            labels,
        )

    def refresh(self) -> bool:
        """Reload the snapshot if a build committed since; True if it did."""
        with self._lock:
            return self._refresh()

    def _refresh(self) -> bool:
        if self._store.generation() == self._snap.generation:
            return False
        self._snap = self._load()
        self._postings.clear()
        self._cached = 0
        self._masks.clear()
        return True

    def readable(self, reader: Reader, snap: _Snapshot | None = None) -> np.ndarray:
        """A boolean mask over the snapshot's rows: the passages `reader` may read."""
        snap = snap or self._snap
        docs = np.array([d for d, label in snap.labels.items() if reader.may_read(label)], dtype=np.int64)
        return np.isin(snap.doc_of, docs)

    def _occurrences(self, snap: _Snapshot, query: str) -> list[np.ndarray]:
        """Per query term, the snapshot row of each occurrence (from FTS5's instance table,
        cached per snapshot: common terms have many occurrences and cost the most to read)."""
        out: list[np.ndarray] = []
        for term in query_terms(query):
            rows = self._postings.get(term)
            if rows is None:
                found = self._store.conn.execute("SELECT doc FROM passages_terms WHERE term = ?", (term,))
                pids = np.fromiter((r[0] for r in found), dtype=np.int64)
                pos = np.searchsorted(snap.ids, pids)
                ok = pos < len(snap.ids)
                ok[ok] = snap.ids[pos[ok]] == pids[ok]
                rows = pos[ok]
                self._cache(term, rows)
            else:
                self._postings.move_to_end(term)
            out.append(rows)
        return out

    def _cache(self, term: str, rows: np.ndarray) -> None:
        self._postings[term] = rows
        self._cached += len(rows)
        while self._cached > POSTINGS_CACHE and len(self._postings) > 1:
            _, old = self._postings.popitem(last=False)
            self._cached -= len(old)

    def rankings(
        self, query: str, qvec: np.ndarray | None, reader: Reader, depth: int
    ) -> tuple[list[int], list[int]]:
        """(vector ranking, keyword ranking): the best `depth` rows the reader may read, by
        cosine similarity to `qvec` (empty without one) and by BM25 for `query`."""
        _, by_vector, by_keyword = self._rank(query, qvec, reader, depth)
        return by_vector, by_keyword

    def _rank(
        self, query: str, qvec: np.ndarray | None, reader: Reader, depth: int
    ) -> tuple[_Snapshot, list[int], list[int]]:
        """`rankings`, with the snapshot whose rows they number."""
        with self._lock:
            self._refresh()
            snap = self._snap
            mask = self._masks.get(reader)
            if mask is None:
                if len(self._masks) >= MASK_CACHE:
                    self._masks.clear()
                mask = self._masks[reader] = self.readable(reader, snap)
            by_vector: list[int] = []
            if qvec is not None and len(snap.ids):
                scores, rows = vector_scores(snap.vectors, np.asarray(qvec, dtype=np.float32), mask)
                by_vector = top_rows(scores, rows, depth)
            bm25, matched = bm25_scores(self._occurrences(snap, query), snap.lengths, mask)
            return snap, by_vector, top_rows(bm25, matched, depth)

    def search(
        self, query: str, qvec: np.ndarray | None, reader: Reader, *, limit: int, depth: int
    ) -> list[Hit]:
        """The best `limit` passages `reader` may read, fused from the vector and keyword
        rankings (`depth` deep each) by reciprocal rank fusion; `score` is the fused score."""
        snap, by_vector, by_keyword = self._rank(query, qvec, reader, depth)
        fused = rrf([by_vector, by_keyword])[:limit]
        # Another search may reload the snapshot between ranking and reading: the rows are
        # read in the snapshot they were ranked in, and access is checked again there.
        return self.hits([row for row, _ in fused], [score for _, score in fused], snap=snap, reader=reader)

    def hits(
        self,
        rows: list[int],
        scores: list[float],
        *,
        snap: _Snapshot | None = None,
        reader: Reader | None = None,
    ) -> list[Hit]:
        """The passages at `rows` of `snap` (default: the current snapshot) with their
        `scores`, in that order. A passage that a build has since removed or moved to another
        document is left out, and so, given a `reader`, is one whose document it may not read
        by the snapshot's labels or the index's labels now."""
        with self._lock:
            snap = snap or self._snap
            want = {int(snap.ids[r]): (int(snap.doc_of[r]), i) for i, r in enumerate(rows)}
            if reader is not None:
                now = {doc.id: doc.label for doc in self._store.documents().values()}
                want = {
                    pid: (doc, i)
                    for pid, (doc, i) in want.items()
                    if doc in snap.labels and doc in now and reader.may_read(snap.labels[doc])
                    and reader.may_read(now[doc])
                }  # fmt: skip
            found: dict[int, Hit] = {}
            for lo in range(0, len(rows), 500):
                ids = list(want)[lo : lo + 500]
                marks = ",".join("?" * len(ids))
                for pid, doc_id, text, path, start, end in self._store.conn.execute(
                    f'SELECT p.id, p.doc_id, p.text, d.path, p.start, p."end" FROM passages p '
                    f"JOIN documents d ON d.id = p.doc_id WHERE p.id IN ({marks})",
                    ids,
                ):
                    doc, i = want[pid]
                    if doc == doc_id:
                        found[i] = Hit(text, path, start, end, float(scores[i]))
        return [found[i] for i in range(len(rows)) if i in found]

    def close(self) -> None:
        with self._lock:
            self._store.close()


def open_index(path: Path | str) -> Index:
    """Open the index file at `path` for searching.  FileNotFoundError if there is none,
    NotAnIndex for a file that is not a llamay index."""
    return Index(IndexStore.open(Path(path), check_same_thread=False))
