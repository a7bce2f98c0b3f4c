"""native/: the patch series is applied exactly or not at all, the source tarball is checked
against its pinned sha256, and a llama.cpp without the series' marker is refused when llamay
loads it (tested on stub libraries compiled here, so without the engine build)."""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from llamay.backend import patchlevel
from llamay.backend.patchlevel import PATCH_LEVEL, UnpatchedEngine, check_patch_level

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native"


def _load_series() -> ModuleType:
    spec = importlib.util.spec_from_file_location("native_series", NATIVE / "series.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


series = _load_series()

SOURCE = [f"line {i}\n" for i in range(1, 21)]

# Two hunks on one file: line 3 replaced, a line added after line 15.
FIRST = """Description of the change; this text is not part of the diff.

--- a/pkg/a.c
+++ b/pkg/a.c
@@ -1,5 +1,5 @@
 line 1
 line 2
-line 3
+line three
 line 4
 line 5
@@ -13,5 +13,6 @@
 line 13
 line 14
 line 15
+line 15 and a half
 line 16
 line 17
"""

# Written against the source with FIRST applied: line 18 is line 19 there; and a new file.
SECOND = """Second change.

--- a/pkg/a.c
+++ b/pkg/a.c
@@ -18,4 +18,3 @@
 line 17
 line 18
-line 19
 line 20
--- /dev/null
+++ b/pkg/new.h
@@ -0,0 +1,2 @@
+#pragma once
+int added(void);
"""

EXPECTED_A = (
    "line 1\nline 2\nline three\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\n"
    "line 11\nline 12\nline 13\nline 14\nline 15\nline 15 and a half\nline 16\nline 17\n"
    "line 18\nline 20\n"
)


def _tree(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.c").write_text("".join(SOURCE))
    return src


def _patches(tmp_path: Path, first: str = FIRST, second: str = SECOND) -> list[Path]:
    folder = tmp_path / "patches"
    folder.mkdir(exist_ok=True)
    paths = [folder / "0001-first.patch", folder / "0002-second.patch"]
    paths[0].write_text(first)
    paths[1].write_text(second)
    return paths


def _snapshot(tree: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tree)): p.read_bytes() for p in sorted(tree.rglob("*")) if p.is_file()}


# -- applying the series ------------------------------------------------------------------


def test_a_series_applies_in_order(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    series.apply(src, _patches(tmp_path))
    assert (src / "pkg" / "a.c").read_text() == EXPECTED_A
    assert (src / "pkg" / "new.h").read_text() == "#pragma once\nint added(void);\n"


def test_a_broken_context_line_fails_naming_the_patch_and_hunk_and_writes_nothing(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    before = _snapshot(src)
    broken = FIRST.replace(" line 14\n", " line fourteen\n")
    with pytest.raises(series.SeriesError) as err:
        series.apply(src, _patches(tmp_path, first=broken))
    message = str(err.value)
    assert "0001-first.patch: hunk 2 of pkg/a.c (@@ -13,5 +13,6 @@" in message
    assert "line 14 is 'line 14', the patch expects 'line fourteen'" in message
    # Hunk 1 matched, and the second patch would too: still nothing is written.
    assert _snapshot(src) == before


def test_a_hunk_at_another_line_is_refused_although_its_text_matches(tmp_path: Path) -> None:
    """No offsets: the tarball is pinned, so a hunk's line numbers must be right."""
    src = _tree(tmp_path)
    shifted = FIRST.replace("@@ -13,5 +13,6 @@", "@@ -12,5 +12,6 @@")
    with pytest.raises(series.SeriesError) as err:
        series.apply(src, _patches(tmp_path, first=shifted))
    assert "hunk 2 of pkg/a.c (@@ -12,5 +12,6 @@" in str(err.value)
    assert "its text is at line 13 instead" in str(err.value)


def test_a_patch_written_against_other_lines_is_refused(tmp_path: Path) -> None:
    """SECOND applied without FIRST before it: its text is one line up from where it says."""
    src = _tree(tmp_path)
    _, second = _patches(tmp_path)
    with pytest.raises(series.SeriesError) as err:
        series.apply(src, [second])
    assert "0002-second.patch: hunk 1 of pkg/a.c" in str(err.value)
    assert "its text is at line 17 instead" in str(err.value)


def test_a_hunk_longer_than_its_header_is_refused(tmp_path: Path) -> None:
    src = _tree(tmp_path)
    longer = FIRST.replace(" line 17\n", " line 17\n line 18\n")
    with pytest.raises(series.SeriesError, match=r"0001-first.patch, line 19: expected a hunk .* got . line 18.$"):
        series.apply(src, _patches(tmp_path, first=longer))


def test_setup_sh_gets_a_clear_failure_from_the_command_line(tmp_path: Path) -> None:
    """As setup.sh runs it: exit status 1 and the message on stderr, the tree untouched."""
    src = _tree(tmp_path)
    before = _snapshot(src)
    paths = _patches(tmp_path, second=SECOND.replace(" line 18\n", " line 18 \n"))
    run = subprocess.run(
        [sys.executable, str(NATIVE / "series.py"), "apply", str(src), *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert "0002-second.patch: hunk 1 of pkg/a.c" in run.stderr
    assert "does not apply exactly" in run.stderr
    assert _snapshot(src) == before


# -- the source tarball -------------------------------------------------------------------


def test_the_tarball_must_have_the_pinned_sha256(tmp_path: Path) -> None:
    tarball = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    tarball.write_bytes(b"not the release")
    pinned = hashlib.sha256(b"the release").hexdigest()
    with pytest.raises(series.SeriesError) as err:
        series.verify(tarball, pinned)
    assert hashlib.sha256(b"not the release").hexdigest() in str(err.value)
    assert f"not the pinned {pinned}" in str(err.value)
    series.verify(tarball, hashlib.sha256(b"not the release").hexdigest().upper())  # its own: fine


def test_setup_sh_pins_a_sha256_and_verifies_before_unpacking() -> None:
    setup = (ROOT / "setup.sh").read_text()
    assert re.search(r"^LLAMA_CPP_SHA256=[0-9a-f]{64}$", setup, re.M)
    verify_at = setup.index('native/series.py verify "$SDIST" "$LLAMA_CPP_SHA256"')
    assert verify_at < setup.index('tar xzf "$SDIST"') < setup.index("native/series.py apply")


# -- the real series ----------------------------------------------------------------------


def test_the_real_series_is_numbered_described_and_parses() -> None:
    patches = series.series(NATIVE)
    assert [p.name[:4] for p in patches] == [f"{i:04d}" for i in range(1, len(patches) + 1)]
    for patch in patches:
        text = patch.read_text()
        description = text[: text.index("\n--- a/")]
        for part in ("What:", "Why:", "Checked by:"):
            assert part in description, f"{patch.name} has no '{part}'"
        # The tests a description names exist.
        for path, name in re.findall(r"(tests/[\w/]+\.py)(?:::(\w+))?", description):
            assert (ROOT / path).is_file(), f"{patch.name} names {path}"
            if name:
                assert f"def {name}(" in (ROOT / path).read_text(), f"{patch.name} names {path}::{name}"
        assert all(section.hunks for section in series.parse(patch.name, patch.read_bytes()))


def test_the_marker_level_is_the_number_of_patches() -> None:
    patches = series.series(NATIVE)
    marker = next(p for p in patches if p.name.endswith("-patch-level.patch")).read_text()
    returned = re.findall(r"^\+int32_t llamay_patch_level\(void\) \{\n\+    return (\d+);$", marker, re.M)
    assert [int(n) for n in returned] == [len(patches)] == [PATCH_LEVEL]


# -- the marker, checked when llamay loads llama.cpp ---------------------------------------


def _stub(tmp_path: Path, source: str) -> ctypes.CDLL:
    """A shared library compiled from `source` (C)."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    assert compiler, "a C compiler is needed (setup.sh needs one too)"
    c_file, lib = tmp_path / "stub.c", tmp_path / "libstub.so"
    c_file.write_text(source)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(c_file)], check=True)
    return ctypes.CDLL(str(lib))


def test_a_library_without_the_marker_is_refused_with_the_fix(tmp_path: Path) -> None:
    lib = _stub(tmp_path, "int llama_backend_init(void) { return 0; }\n")
    assert patchlevel.patch_level(lib) is None
    with pytest.raises(UnpatchedEngine) as err:
        check_patch_level(lib, allow_unpatched=False)
    message = str(err.value)
    assert lib._name in message
    assert "does not export llamay_patch_level()" in message
    assert "Run ./setup.sh" in message
    assert "LLAMAY_ALLOW_UNPATCHED=1" in message
    assert isinstance(err.value, RuntimeError)  # the CLI prints it as `llamay: ...`


def test_a_library_of_another_series_is_refused(tmp_path: Path) -> None:
    lib = _stub(tmp_path, f"int llamay_patch_level(void) {{ return {PATCH_LEVEL - 1}; }}\n")
    with pytest.raises(UnpatchedEngine, match=f"built with {PATCH_LEVEL - 1} of llamay's native/ patches"):
        check_patch_level(lib, allow_unpatched=False)


def test_the_environment_lets_an_unpatched_library_run_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lib = _stub(tmp_path, "int llama_backend_init(void) { return 0; }\n")
    monkeypatch.setenv("LLAMAY_ALLOW_UNPATCHED", "1")
    with caplog.at_level(logging.WARNING, logger="llamay"):
        assert check_patch_level(lib) is None
    assert any("determinism off" in r.getMessage() and lib._name in r.getMessage() for r in caplog.records)
    monkeypatch.setenv("LLAMAY_ALLOW_UNPATCHED", "0")
    with pytest.raises(UnpatchedEngine):
        check_patch_level(lib)


def test_a_library_with_the_series_level_passes_quietly(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lib = _stub(tmp_path, f"int llamay_patch_level(void) {{ return {PATCH_LEVEL}; }}\n")
    with caplog.at_level(logging.DEBUG, logger="llamay"):
        assert check_patch_level(lib, allow_unpatched=False) == PATCH_LEVEL
    assert caplog.records == []
