"""Index builds with a fake embedder that counts its calls: incremental rebuilds embed only
new and changed files; deleted files leave the index; searches see readable passages only."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from llamay.rag import ADMIN, Reader, build_index, open_index
from llamay.rag.progress import Progress
from llamay.rag.store import IndexStore, NotAnIndex, query_terms

FINANCE = Reader(frozenset({"finance"}))
STAFF = Reader(frozenset({"eng"}))


class FakeEmbedder:
    """Hashed bag-of-words vectors; counts calls and texts."""

    def __init__(self, name: str = "fake", dim: int = 32) -> None:
        self.name, self.dim = name, dim
        self.calls = 0
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts += texts
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, int(hashlib.sha256(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        out[:, 0] += 1e-3
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def paragraphs(topic: str, n: int) -> str:
    return "\n\n".join(
        f"{topic} paragraph {i}: " + " ".join(f"{topic}{j}" for j in range(120)) for i in range(n)
    )


@pytest.fixture()
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    files = {
        "public/guide.md": "# Guide\n\nForking a context is cheap.\n\n" + paragraphs("guide", 3),
        "public/caf\u00e9.txt": "Caf\u00e9 cr\u00e8me costs 3 \u20ac. 日本語のテキスト。\n",
        "notes.txt": "Plain notes about the quarterly revenue meeting.\n",
        "finance/.llamay-access": "finance\n",
        "finance/q3.txt": "Quarterly revenue grew 12 percent; the merger stays secret.\n\n"
        + paragraphs("ledger", 2),
        "finance/page.html": "<html><body><p>Merger &amp; revenue plan</p></body></html>",
        ".hidden/skip.txt": "never indexed",
        "image.png": "not a document",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def sources(index_path: Path, query: str, reader: Reader, embedder: FakeEmbedder) -> list[str]:
    index = open_index(index_path)
    try:
        hits = index.search(query, embedder.embed([query])[0], reader, limit=100, depth=100)
    finally:
        index.close()
    return [h.source for h in hits]


def test_first_build_embeds_every_passage(docs: Path, tmp_path: Path) -> None:
    fake = FakeEmbedder()
    totals: list[int] = []

    def progress(total: int) -> Progress:
        totals.append(total)
        return Progress(total, "embedding", live=False, stream=open(tmp_path / "bar", "w"))  # noqa: SIM115

    report = build_index(docs, tmp_path / "i.sqlite", fake, progress=progress)
    assert sorted(report.added) == [
        "finance/page.html",
        "finance/q3.txt",
        "notes.txt",
        "public/caf\u00e9.txt",
        "public/guide.md",
    ]
    assert report.documents == 5 and report.passages == report.embedded == len(fake.texts) == totals[0]
    assert "embedding [" in (tmp_path / "bar").read_text()
    index = open_index(tmp_path / "i.sqlite")
    assert (index.model, index.dim, index.root) == ("fake", 32, str(docs.resolve()))
    index.close()


def test_rebuild_embeds_only_changed_files(docs: Path, tmp_path: Path) -> None:
    index_path = tmp_path / "i.sqlite"
    build_index(docs, index_path, FakeEmbedder())
    again = FakeEmbedder()
    report = build_index(docs, index_path, again)
    assert again.calls == 0 and report.embedded == 0 and report.unchanged == 5

    (docs / "public/guide.md").write_text("# Guide\n\nForking is now free.\n", encoding="utf-8")
    (docs / "notes.txt").unlink()
    (docs / "public/new.md").write_text("A brand new page about forks.\n")
    edited = FakeEmbedder()
    report = build_index(docs, index_path, edited)
    assert report.changed == ["public/guide.md"] and report.added == ["public/new.md"]
    assert report.removed == ["notes.txt"] and report.unchanged == 3
    assert sorted(edited.texts) == ["# Guide\n\nForking is now free.", "A brand new page about forks."]
    assert "notes.txt" not in sources(index_path, "quarterly revenue meeting", ADMIN, edited)
    with sqlite3.connect(index_path) as conn:  # the keyword index forgot the old text
        assert conn.execute("SELECT count(*) FROM passages_terms WHERE term = 'guide0'").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM passages_terms WHERE term = 'free'").fetchone() == (1,)


def test_access_change_relabels_without_embedding(docs: Path, tmp_path: Path) -> None:
    index_path = tmp_path / "i.sqlite"
    build_index(docs, index_path, FakeEmbedder())
    assert "finance/q3.txt" not in sources(index_path, "merger", STAFF, FakeEmbedder())
    (docs / "finance/.llamay-access").write_text("finance\neng\n")
    fake = FakeEmbedder()
    report = build_index(docs, index_path, fake)
    assert fake.calls == 0 and sorted(report.relabelled) == ["finance/page.html", "finance/q3.txt"]
    assert "finance/q3.txt" in sources(index_path, "merger", STAFF, fake)


def test_another_model_embeds_everything_again(docs: Path, tmp_path: Path) -> None:
    index_path = tmp_path / "i.sqlite"
    first = FakeEmbedder()
    build_index(docs, index_path, first)
    other = FakeEmbedder("other", 16)
    report = build_index(docs, index_path, other)
    assert len(other.texts) == len(first.texts) == report.passages
    index = open_index(index_path)
    assert index.dim == 16
    index.close()


def test_readers_see_only_what_they_may_read(docs: Path, tmp_path: Path) -> None:
    index_path = tmp_path / "i.sqlite"
    fake = FakeEmbedder()
    build_index(docs, index_path, fake)
    for reader in (Reader(), STAFF):
        assert not [
            s for s in sources(index_path, "revenue merger secret", reader, fake) if s.startswith("finance/")
        ]
    assert "finance/q3.txt" in sources(index_path, "revenue merger secret", FINANCE, fake)
    assert "finance/page.html" in sources(index_path, "revenue merger secret", ADMIN, fake)


def test_hidden_documents_change_no_score(docs: Path, tmp_path: Path) -> None:
    """An outsider's results equal those of an index that never held the restricted files."""
    index_path = tmp_path / "i.sqlite"
    fake = FakeEmbedder()
    build_index(docs, index_path, fake)
    public_only = tmp_path / "public-only.sqlite"
    shutil.copy(index_path, public_only)
    store = IndexStore.open(public_only)
    with store.transaction():
        for doc in store.documents().values():
            if not doc.label.public:
                store.delete_document(doc.id)
    store.close()
    full, public = open_index(index_path), open_index(public_only)
    for query in ("quarterly revenue", "merger secret revenue", "guide7 guide8 forking", "caf\u00e9"):
        q = fake.embed([query])[0]
        got = full.search(query, q, STAFF, limit=100, depth=100)
        want = public.search(query, q, ADMIN, limit=100, depth=100)
        assert got == want and got
        assert full.rankings(query, q, STAFF, 100) != full.rankings(query, q, ADMIN, 100)


def test_open_index_reloads_after_a_build(docs: Path, tmp_path: Path) -> None:
    index_path = tmp_path / "i.sqlite"
    fake = FakeEmbedder()
    build_index(docs, index_path, fake)
    index = open_index(index_path)
    before = index.size
    # "zebra" is looked up (and its empty postings cached) before the build adds it.
    assert index.rankings("zebra", None, ADMIN, 10) == ([], [])
    (docs / "public/more.txt").write_text("zebra crossing")
    build_index(docs, index_path, fake)
    hits = index.search("zebra", fake.embed(["zebra"])[0], ADMIN, limit=1, depth=10)
    assert index.size == before + 1 and hits[0].source == "public/more.txt"
    assert index.rankings("the zebra", None, ADMIN, 10)[1] == index.rankings("zebra", None, ADMIN, 10)[1]
    index.close()


def test_unreadable_files_are_skipped_and_leave_the_index(docs: Path, tmp_path: Path) -> None:
    index_path = tmp_path / "i.sqlite"
    build_index(docs, index_path, FakeEmbedder())
    (docs / "notes.txt").write_bytes("caf\u00e9 in latin-1".encode("latin-1"))
    report = build_index(docs, index_path, FakeEmbedder())
    assert report.skipped == [("notes.txt", "not UTF-8 text (byte 3)")] and report.removed == ["notes.txt"]


def test_empty_file_is_stored_without_passages(docs: Path, tmp_path: Path) -> None:
    (docs / "empty.txt").write_text("  \n")
    report = build_index(docs, tmp_path / "i.sqlite", FakeEmbedder())
    assert "empty.txt" in report.added
    assert build_index(docs, tmp_path / "i.sqlite", FakeEmbedder()).unchanged == 6


def test_query_terms_drop_stop_words_unless_nothing_else_is_left() -> None:
    assert query_terms("What is the Caf\u00e9's revenue, and who_knows?") == [
        "caf\u00e9",
        "s",
        "revenue",
        "knows",
    ]
    assert query_terms("To be or not to be") == ["to", "be", "or", "not"]
    assert query_terms(" ".join(f"w{i}" for i in range(100)))[-1] == "w63"


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        build_index(tmp_path / "missing", tmp_path / "i.sqlite", FakeEmbedder())
    with pytest.raises(FileNotFoundError):
        open_index(tmp_path / "none.sqlite")
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(NotAnIndex):
        open_index(tmp_path / "junk.sqlite")
    sqlite3.connect(tmp_path / "other.sqlite").execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(NotAnIndex):
        open_index(tmp_path / "other.sqlite")
