"""The index never serves what a reader may not read: symbolic links are not followed out
of (or across) the folder, and a search racing a rebuild reads its rows in the snapshot it
ranked them in, with access checked again."""

from __future__ import annotations

from pathlib import Path

from llamay.rag import Reader, build_index, open_index
from tests.unit.test_rag_build import FakeEmbedder, docs, paragraphs  # noqa: F401  (fixture)

OUTSIDER = Reader(frozenset())


def test_links_to_restricted_or_outside_files_are_not_indexed(docs: Path, tmp_path: Path) -> None:  # noqa: F811
    keys = tmp_path / "keys.json"
    keys.write_text('{"keys": [{"key": "sk-secret-admin-key", "principal": "root", "role": "admin"}]}')
    (docs / "public/keys.txt").symlink_to(keys)
    (docs / "public/q3.txt").symlink_to(docs / "finance/q3.txt")
    (docs / "public/fin").symlink_to(docs / "finance", target_is_directory=True)
    index_path = tmp_path / "i.sqlite"
    fake = FakeEmbedder()
    report = build_index(docs, index_path, fake)
    assert not any(
        "keys" in rel or rel.startswith("public/q3") or rel.startswith("public/fin") for rel in report.added
    )
    index = open_index(index_path)
    for query in ("sk-secret-admin-key", "merger stays secret"):
        hits = index.search(query, fake.embed([query])[0], OUTSIDER, limit=100, depth=100)
        linked = ("public/keys", "public/q3", "public/fin", "finance/")
        assert hits and not any(h.source.startswith(linked) or "secret" in h.text for h in hits), hits
    index.close()


def test_a_search_racing_a_rebuild_reads_the_snapshot_it_ranked(docs: Path, tmp_path: Path) -> None:  # noqa: F811
    index_path = tmp_path / "i.sqlite"
    fake = FakeEmbedder()
    build_index(docs, index_path, fake)
    index = open_index(index_path)
    query = "guide1 guide2 forking"
    qvec = fake.embed([query])[0]
    snap, by_vector, by_keyword = index._rank(query, qvec, OUTSIDER, 100)  # a search, mid-way
    rows = sorted(set(by_vector) | set(by_keyword))
    assert rows
    # Meanwhile a rebuild replaces the public guide with restricted text and moves it behind
    # an access file, and another search loads the new snapshot.
    (docs / "public/guide.md").unlink()
    (docs / "finance/guide.md").write_text("Merger with Acme closes Friday.\n\n" + paragraphs("guide", 3))
    build_index(docs, index_path, fake)
    assert index.refresh()
    # Reading those row numbers in the new snapshot, unchecked, would leak:
    leaked = index.hits(rows, [1.0] * len(rows))
    assert any(h.source.startswith("finance/") for h in leaked)
    got = index.hits(rows, [1.0] * len(rows), snap=snap, reader=OUTSIDER)
    assert all(h.source.startswith("public/") or h.source == "notes.txt" for h in got), got
    assert not any("Merger" in h.text or "ledger" in h.text for h in got)
    # The whole search, after the rebuild, sees no restricted passage either.
    hits = index.search(query, qvec, OUTSIDER, limit=100, depth=100)
    assert hits and all(not h.source.startswith("finance/") for h in hits)
    index.close()
