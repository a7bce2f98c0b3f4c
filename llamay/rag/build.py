"""Building and updating an index over a folder (`llamay index build`).

The folder is walked (hidden files and folders skipped) for text, Markdown, HTML and PDF files
(see `llamay.rag.extract.KINDS`).  Each file is hashed (sha256): a file whose hash the index
already holds is not read again (only its access label is brought up to date); a new or
changed file is extracted, chunked and its passages embedded; a file no longer there (or no
longer readable) leaves the index.  Everything is embedded again when the embedding model or
the chunking rules differ from the ones the index was built with.  Each document is written in
one transaction, and the build's ``generation`` is committed last.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .access import AccessResolver, Label
from .chunk import MAX_WORDS, MIN_WORDS, Passage, chunk
from .embedder import Embedder
from .extract import extract_file, kind_of
from .extracted import NotExtractable
from .progress import Progress
from .store import IndexStore

__all__ = ["CHUNKER", "BuildReport", "SourceFile", "build_index", "scan"]

#: The chunking rules an index was built with; other rules mean every file is chunked again.
CHUNKER = f"paragraphs-1:{MIN_WORDS}-{MAX_WORDS}"
BATCH = 64


@dataclass(frozen=True)
class SourceFile:
    """A file to index: `rel` (POSIX path under the folder), `path`, `kind`, `label`."""

    rel: str
    path: Path
    kind: str
    label: Label


@dataclass
class BuildReport:
    """What a build did: paths `added`, `changed` (re-embedded), `removed`, `relabelled`;
    `unchanged` files; `skipped` (path, reason); `embedded` passages; totals after the build."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    relabelled: list[str] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)
    embedded: int = 0
    documents: int = 0
    passages: int = 0
    seconds: float = 0.0


@dataclass
class _Pending:
    file: SourceFile
    sha256: str
    size: int
    passages: list[Passage]
    vectors: list[np.ndarray] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return sum(len(v) for v in self.vectors) == len(self.passages)


def scan(root: Path) -> list[SourceFile]:
    """The indexable files under `root`, sorted by path, with their access labels."""
    resolver = AccessResolver(root)
    found: list[SourceFile] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(folder, name)
            kind = kind_of(path)
            # A symbolic link may point anywhere (a restricted folder, the keys file): its
            # target's access is not what the folder it sits in says, so it is not indexed.
            # (os.walk does not descend into linked folders either.)
            if name.startswith(".") or kind is None or path.is_symlink() or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            found.append(SourceFile(rel, path, kind, resolver.label(rel)))
    return found


def _read(path: Path) -> bytes:
    """The file's bytes, refusing (OSError) a path that became a symbolic link since the
    scan: the bytes hashed and the bytes indexed are the same read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        return f.read()


ProgressFactory = Callable[[int], Progress | None]


def build_index(
    root: Path,
    index_path: Path,
    embedder: Embedder,
    *,
    progress: ProgressFactory | None = None,
    model_source: str | None = None,
) -> BuildReport:
    """Build or update the index at `index_path` over the folder `root` (see the module
    docstring).  `progress(total_passages)` may give a `Progress` to advance while embedding.
    `model_source` is recorded as what loads the embedding model again (a name, or a GGUF
    path when the model's name does not find it; see `Index.model_source`); without it, the
    one recorded for the same model is kept.  Raises
    NotADirectoryError for a `root` that is not a folder, NotAnIndex for an `index_path` that
    is another kind of file."""
    t0 = time.monotonic()
    root = root.resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a folder")
    report = BuildReport()
    store = IndexStore.open(index_path, create=True)
    try:
        if model_source is None:  # keep what loads the same model
            same = store.meta("model") == embedder.name
            model_source = (store.meta("model_source") if same else None) or embedder.name
        _update(store, root, embedder, report, progress, model_source)
        report.documents, report.passages = store.counts()
    finally:
        store.close()
    report.seconds = time.monotonic() - t0
    return report


def _update(
    store: IndexStore,
    root: Path,
    embedder: Embedder,
    report: BuildReport,
    progress: ProgressFactory | None,
    model_source: str,
) -> None:
    settings = {"model": embedder.name, "dim": str(embedder.dim), "chunker": CHUNKER}
    if any(store.meta(k) not in (None, v) for k, v in settings.items()):
        with store.transaction():  # another model or chunker: nothing stored can be kept
            for doc in store.documents().values():
                store.delete_document(doc.id)
            for k, v in settings.items():
                store.set_meta(k, v)
    existing = store.documents()
    files = scan(root)
    todo: list[_Pending] = []
    relabel: list[tuple[int, Label]] = []
    for f in files:
        try:
            raw = _read(f.path)
        except OSError as exc:
            report.skipped.append((f.rel, str(exc)))
            continue
        sha, size = hashlib.sha256(raw).hexdigest(), len(raw)
        old = existing.get(f.rel)
        if old is not None and old.sha256 == sha:
            report.unchanged += 1
            if old.label != f.label:
                relabel.append((old.id, f.label))
                report.relabelled.append(f.rel)
            continue
        try:
            passages = chunk(extract_file(f.path, f.kind, raw))
        except (NotExtractable, OSError) as exc:
            report.skipped.append((f.rel, str(exc)))
            continue
        (report.added if old is None else report.changed).append(f.rel)
        todo.append(_Pending(f, sha, size, passages))
    kept = {p.file.rel for p in todo} | {f.rel for f in files if f.rel in existing}
    kept -= {rel for rel, _ in report.skipped}
    gone = [doc for path, doc in sorted(existing.items()) if path not in kept]
    report.removed = [doc.path for doc in gone]

    total = sum(len(p.passages) for p in todo)
    bar = progress(total) if progress is not None and total else None
    try:
        _embed_and_write(store, embedder, todo, report, bar)
    finally:
        if bar is not None:
            bar.close()
    with store.transaction():
        for doc in gone:
            store.delete_document(doc.id)
        for doc_id, label in relabel:
            store.set_label(doc_id, label)
        for k, v in settings.items():
            store.set_meta(k, v)
        store.set_meta("root", str(root))
        store.set_meta("model_source", model_source)
        store.set_meta("built_at", str(int(time.time())))
        store.set_meta("generation", str(store.generation() + 1))


def _embed_and_write(
    store: IndexStore, embedder: Embedder, todo: list[_Pending], report: BuildReport, bar: Progress | None
) -> None:
    """Embed every pending passage in batches of `BATCH` across documents; write each document
    (in its own transaction) as soon as all its passages have vectors."""
    queue = [(doc, i) for doc in todo for i in range(len(doc.passages))]
    written = 0
    for lo in range(0, len(queue) + 1, BATCH):
        batch = queue[lo : lo + BATCH]
        if batch:
            vectors = np.asarray(embedder.embed([doc.passages[i].text for doc, i in batch]), dtype=np.float32)
            for row, (doc, _) in enumerate(batch):
                doc.vectors.append(vectors[row : row + 1])
            report.embedded += len(batch)
            if bar is not None:
                bar.advance(len(batch))
        while written < len(todo) and todo[written].ready:
            _write(store, todo[written], embedder.dim)
            written += 1


def _write(store: IndexStore, doc: _Pending, dim: int) -> None:
    vectors = np.concatenate(doc.vectors) if doc.vectors else np.zeros((0, dim), dtype=np.float32)
    with store.transaction():
        store.add_document(
            doc.file.rel, doc.sha256, doc.size, doc.file.kind, doc.file.label, doc.passages, vectors
        )
    doc.vectors = []
    doc.passages = []
