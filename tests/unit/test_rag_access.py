"""Access labels: the nearest .llamay-access file or public/ folder rules a document."""

from __future__ import annotations

from pathlib import Path

from llamay.auth import Principal
from llamay.rag.access import ADMIN, PUBLIC, AccessResolver, Label, Reader, parse_access, reader_of


def tree(root: Path, files: dict[str, str]) -> AccessResolver:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return AccessResolver(root)


def test_nearest_access_file_wins(tmp_path: Path) -> None:
    r = tree(
        tmp_path,
        {
            "a.txt": "",
            "finance/.llamay-access": "finance\n# auditors too\nauditors  \n\n",
            "finance/q3.txt": "",
            "finance/board/.llamay-access": "board",
            "finance/board/minutes/m.txt": "",
            "finance/deep/er/x.txt": "",
            "finance/public/notice.txt": "",
            "finance/public/.llamay-access-not": "",
            "hr/public/.llamay-access": "hr",
            "hr/public/p.txt": "",
            "open/.llamay-access": "public",
            "open/secret/s.txt": "",
            "nobody/.llamay-access": "# no groups\n",
            "nobody/n.txt": "",
        },
    )
    finance = Label(False, frozenset({"finance", "auditors"}))
    assert r.label("a.txt") == PUBLIC
    assert r.label("finance/q3.txt") == finance
    assert r.label("finance/deep/er/x.txt") == finance
    assert r.label("finance/board/minutes/m.txt") == Label(False, frozenset({"board"}))
    # A public/ folder inside a restricted one does not widen it (it lifts only the root's label).
    assert r.label("finance/public/notice.txt") == finance
    assert r.label("hr/public/p.txt") == Label(False, frozenset({"hr"}))  # its own file rules it
    assert r.label("open/secret/s.txt") == PUBLIC
    assert r.label("nobody/n.txt") == Label(False, frozenset())


def test_public_folders_lift_only_the_roots_label(tmp_path: Path) -> None:
    r = tree(tmp_path, {
        ".llamay-access": "staff",
        "public/a.txt": "",
        "docs/public/b.txt": "",  # docs/ has the root's label: public/ lifts it
        "hr/.llamay-access": "hr",
        "hr/public/c.txt": "",
        "hr/x/y/public/d.txt": "",
        "hr/open/.llamay-access": "*",
        "hr/open/public/e.txt": "",
    })  # fmt: skip
    hr = Label(False, frozenset({"hr"}))
    assert r.label("public/a.txt") == PUBLIC and r.label("docs/public/b.txt") == PUBLIC
    assert r.label("hr/public/c.txt") == hr and r.label("hr/x/y/public/d.txt") == hr
    assert r.label("hr/open/public/e.txt") == PUBLIC


def test_root_access_file_applies_to_everything(tmp_path: Path) -> None:
    r = tree(tmp_path, {".llamay-access": "staff", "x/y.txt": "", "public/z.txt": ""})
    assert r.label("x/y.txt") == Label(False, frozenset({"staff"}))
    assert r.label("y.txt") == Label(False, frozenset({"staff"}))
    assert r.label("public/z.txt") == PUBLIC


def test_parse_access() -> None:
    assert parse_access("") == Label(False, frozenset())
    assert parse_access("a\nb # the b team\n*\n") == PUBLIC
    assert parse_access("  sales \r\nops\n") == Label(False, frozenset({"sales", "ops"}))


def test_readers() -> None:
    finance = Label(False, frozenset({"finance"}))
    nobody = Label(False, frozenset())
    alice = Reader(frozenset({"finance", "eng"}))
    bob = Reader(frozenset({"eng"}))
    assert alice.may_read(finance) and alice.may_read(PUBLIC) and not alice.may_read(nobody)
    assert not bob.may_read(finance) and bob.may_read(PUBLIC)
    assert ADMIN.may_read(finance) and ADMIN.may_read(nobody)
    assert reader_of(Principal("a", ("finance",))) == Reader(frozenset({"finance"}))
    assert reader_of(Principal("root", (), "admin")).admin
