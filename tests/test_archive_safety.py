"""Unpacking downloaded archives (``pypi:NAME==VERSION``): nothing lands outside the target.

Archives are crafted here (no committed binaries): members with absolute paths, ``..``,
backslashes and drive letters, links pointing out of the target, hard links, device files,
FIFOs, oversized content. Each is refused before anything is written; legitimate archives
unpack, links are never created, and a shipped fact cache is dropped.
"""

from __future__ import annotations

import io
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from fixture_paths import real_engine
from flowtrace.errors import UsageError
from flowtrace.sources import fetch
from flowtrace.sources.fetch import UnsafeArchive, fetch_pypi, parse_spec, safe_extract


def make_zip(path: Path, members: list[tuple[str, bytes]], symlinks: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members:
            zf.writestr(name, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return path


def make_tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tf.addfile(member)
            else:
                name, data = member
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return path


def tar_link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


def tar_special(name: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.devmajor, info.devminor = 1, 3
    return info


def snapshot(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


GOOD = ("pkg/__init__.py", b"# layers_to_capture\n")

UNSAFE_ZIPS = {
    "absolute": [("/abs/evil.py", b"x")],
    "dotdot": [("../evil.py", b"x")],
    "nested-dotdot": [("pkg/../../evil.py", b"x")],
    "backslash-dotdot": [("..\\evil.py", b"x")],
    "drive-letter": [("C:/evil.py", b"x")],
}
UNSAFE_ZIP_LINKS = {
    "symlink-absolute": {"pkg/link.py": "/etc/passwd"},
    "symlink-up": {"pkg/link.py": "../../outside.py"},
    "symlink-up-through-dot": {"pkg/link": "sub/../../.."},
}


@pytest.mark.parametrize("case", sorted(UNSAFE_ZIPS) + sorted(UNSAFE_ZIP_LINKS))
def test_unsafe_zip_members_are_refused_before_anything_is_written(tmp_path, case):
    archive = make_zip(tmp_path / "a.whl", [GOOD] + UNSAFE_ZIPS.get(case, []), UNSAFE_ZIP_LINKS.get(case))
    dest = tmp_path / "out" / "tree"
    before = snapshot(tmp_path)
    with pytest.raises(UnsafeArchive):
        safe_extract(archive, dest)
    assert snapshot(tmp_path) - before <= {"out", "out/tree"}, "nothing but the empty target appears"
    assert not any(dest.iterdir())


UNSAFE_TARS = {
    "absolute": [("/abs/evil.py", b"x")],
    "dotdot": [("../evil.py", b"x")],
    "symlink-absolute": [tar_link("pkg/link.py", "/etc/passwd", tarfile.SYMTYPE)],
    "symlink-up": [tar_link("pkg/link.py", "../../outside.py", tarfile.SYMTYPE)],
    "hardlink-absolute": [tar_link("pkg/hard.py", "/etc/passwd", tarfile.LNKTYPE)],
    "hardlink-up": [tar_link("pkg/hard.py", "../outside.py", tarfile.LNKTYPE)],
    "char-device": [tar_special("pkg/dev", tarfile.CHRTYPE)],
    "block-device": [tar_special("pkg/blk", tarfile.BLKTYPE)],
    "fifo": [tar_special("pkg/fifo.py", tarfile.FIFOTYPE)],
}


@pytest.mark.parametrize("case", sorted(UNSAFE_TARS))
def test_unsafe_tar_members_are_refused_before_anything_is_written(tmp_path, case):
    archive = make_tar(tmp_path / "a.tar.gz", [GOOD, *UNSAFE_TARS[case]])
    dest = tmp_path / "out"
    before = snapshot(tmp_path)
    with pytest.raises(UnsafeArchive):
        safe_extract(archive, dest)
    assert snapshot(tmp_path) - before <= {"out"}
    assert not any(dest.iterdir())


def test_safe_archives_unpack_without_creating_links(tmp_path):
    members = [
        GOOD,
        ("pkg/models/m.py", b"class M: pass\n"),
        ("pkg/native.so", b"\x7fELF"),
        (".flowtrace_cache/facts/aa/x.pickle", b"evil"),
    ]
    archive = make_zip(tmp_path / "ok.whl", members, {"pkg/alias.py": "models/m.py"})
    dest = safe_extract(archive, tmp_path / "zip")
    assert (dest / "pkg" / "models" / "m.py").read_bytes() == b"class M: pass\n"
    assert not (dest / "pkg" / "alias.py").exists(), "links inside the archive are skipped, never created"
    assert not (dest / "pkg" / "native.so").exists(), "compiled artefacts are not written"
    assert not (dest / ".flowtrace_cache").exists(), "a shipped fact cache is never unpacked"

    tar = make_tar(
        tmp_path / "ok.tar.gz",
        [
            GOOD,
            tar_link("pkg/hard.py", "pkg/__init__.py", tarfile.LNKTYPE),
            tar_link("pkg/sym.py", "__init__.py", tarfile.SYMTYPE),
        ],
    )
    dest = safe_extract(tar, tmp_path / "tar")
    hard = dest / "pkg" / "hard.py"
    assert hard.read_bytes() == GOOD[1] and not hard.is_symlink() and hard.stat().st_nlink == 1
    assert not (dest / "pkg" / "sym.py").exists()
    for path in dest.rglob("*"):
        assert not path.is_symlink()


def test_a_planted_link_in_the_target_is_not_written_through(tmp_path):
    outside = tmp_path / "outside.py"
    outside.write_text("original\n")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "pkg").symlink_to(tmp_path, target_is_directory=True)
    with pytest.raises(UnsafeArchive):
        safe_extract(make_zip(tmp_path / "a.whl", [("pkg/outside.py", b"pwned\n")]), dest)
    (dest / "pkg").unlink()
    (dest / "x.py").symlink_to(outside)
    with pytest.raises(UnsafeArchive):
        safe_extract(make_zip(tmp_path / "b.whl", [("x.py", b"pwned\n")]), dest)
    assert outside.read_text() == "original\n"


def test_oversized_content_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "MAX_TOTAL_BYTES", 1000)
    with pytest.raises(UnsafeArchive, match="1000"):
        safe_extract(make_zip(tmp_path / "big.whl", [("pkg/big.py", b"x" * 2000)]), tmp_path / "z")
    with pytest.raises(UnsafeArchive, match="1000"):
        safe_extract(make_tar(tmp_path / "big.tar.gz", [("pkg/big.py", b"x" * 2000)]), tmp_path / "t")
    monkeypatch.setattr(fetch, "MAX_MEMBERS", 3)
    with pytest.raises(UnsafeArchive, match="members"):
        safe_extract(make_zip(tmp_path / "many.whl", [(f"pkg/m{i}.py", b"") for i in range(5)]), tmp_path / "m")


def test_not_an_archive(tmp_path):
    junk = tmp_path / "junk.whl"
    junk.write_bytes(b"not an archive at all")
    with pytest.raises(UnsafeArchive):
        safe_extract(junk, tmp_path / "out")


# -- the pypi: source -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "sglang",
        "sglang==",
        "==1.0",
        "--index-url=http://x==1",
        "a b==1",
        "pkg==1;rm -rf /",
        "pkg>=1",
        "pkg==1.0 --pre",
    ],
)
def test_bad_specs_are_one_line_usage_errors(spec):
    with pytest.raises(UsageError) as info:
        parse_spec(spec)
    assert "expected pypi:NAME==VERSION" in str(info.value) and "\n" not in str(info.value)


def test_spec_names_are_normalised():
    assert parse_spec("SGLang_Router.X==0.5.23") == ("sglang-router-x", "0.5.23")


def wheel(folder: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A minimal wheel pip accepts (found through --find-links; never installed)."""
    dist = f"{name}-{version}.dist-info"
    members = list(files.items()) + [
        (f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()),
        (
            f"{dist}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: flowtrace-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        (f"{dist}/RECORD", b""),
    ]
    folder.mkdir(parents=True, exist_ok=True)
    return make_zip(folder / f"{name}-{version}-py3-none-any.whl", members)


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    links = tmp_path / "links"
    links.mkdir()
    monkeypatch.setenv("FLOWTRACE_PIP_ARGS", f"--no-index --find-links {links}")
    return links


def test_a_wheel_with_a_traversal_member_is_refused(tmp_path, local_index):
    wheel(local_index, "evilzip", "1.0", {"evilzip/__init__.py": b"", "../../escaped.py": b"pwned"})
    cache = tmp_path / "cache"
    with pytest.raises(UsageError, match="unsafe archive") as info:
        fetch_pypi("evilzip==1.0", cache_dir=cache)
    assert "\n" not in str(info.value)
    assert not (cache / "pypi" / "evilzip-1.0").exists()
    assert not list(tmp_path.rglob("escaped.py"))
    assert [p.name for p in (cache / "pypi").iterdir()] == [], "no half-unpacked leftovers"


def test_a_wheel_is_fetched_once_and_reused(tmp_path, local_index, monkeypatch):
    wheel(local_index, "goodpkg", "2.0", {"goodpkg/__init__.py": b"# layers_to_capture\n"})
    cache = tmp_path / "cache"
    root = fetch_pypi("goodpkg==2.0", cache_dir=cache)
    assert root == cache / "pypi" / "goodpkg-2.0"
    assert (root / "goodpkg" / "__init__.py").read_bytes() == b"# layers_to_capture\n"

    def no_pip(*args, **kwargs):
        raise AssertionError("an unpacked tree in the cache must be reused")

    monkeypatch.setattr(subprocess, "run", no_pip)
    assert fetch_pypi("GoodPkg==2.0", cache_dir=cache) == root


def test_xdg_cache_home_is_the_default_cache(tmp_path, local_index, monkeypatch):
    wheel(local_index, "xdgpkg", "1.0", {"xdgpkg/__init__.py": b""})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fetch_pypi("xdgpkg==1.0") == tmp_path / "xdg" / "flowtrace" / "pypi" / "xdgpkg-1.0"


def test_a_missing_package_is_a_usage_error(tmp_path, local_index):
    with pytest.raises(UsageError, match="no wheel could be downloaded") as info:
        fetch_pypi("no-such-package-xyz==9.9", cache_dir=tmp_path / "cache")
    assert "\n" not in str(info.value)


def test_scan_of_a_pypi_source_through_the_cli(tmp_path, local_index):
    from click.testing import CliRunner

    from flowtrace.cli.main import main

    wheel(
        local_index,
        "clipkg",
        "1.0",
        {
            "clipkg/models/m.py": (
                b"class M:\n    def set_eagle3_layers_to_capture(self, layer_ids=None):\n        self.layers_to_capture"
                b" = layer_ids\n"
            )
        },
    )
    res = CliRunner().invoke(
        main, ["scan", "pypi:clipkg==1.0", "--format", "json", "--cache-dir", str(tmp_path / "cache")]
    )
    assert res.exit_code == 0, res.output
    assert "clipkg/models/m.py" in res.stdout
    bad = CliRunner().invoke(main, ["scan", "pypi:clipkg"])
    assert bad.exit_code == 2 and "expected pypi:NAME==VERSION" in bad.stderr and "Traceback" not in bad.output


@pytest.mark.real_engine
def test_the_real_sglang_wheel_unpacks_offline(tmp_path, monkeypatch):
    """The unpacked release (FLOWTRACE_REAL_ENGINES, see fixture_paths.real_engine) zipped back
    into a wheel, fetched through pip and unpacked by the safe extractor: a real-size archive."""
    tree = real_engine("sglang-0.5.23")
    links = tmp_path / "links"
    links.mkdir()
    with zipfile.ZipFile(links / "sglang-0.5.23-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        for path in sorted(tree.rglob("*")):
            if path.is_file() and not path.is_symlink():
                zf.write(path, path.relative_to(tree).as_posix())
    monkeypatch.setenv("FLOWTRACE_PIP_ARGS", f"--no-index --find-links {links}")
    root = fetch_pypi("sglang==0.5.23", cache_dir=tmp_path / "cache")
    assert (root / "sglang" / "srt" / "models" / "llama.py").read_bytes() == (
        tree / "sglang" / "srt" / "models" / "llama.py"
    ).read_bytes()


def test_a_release_with_wheels_only_for_another_python_is_still_read(tmp_path, local_index, capfd, monkeypatch):
    """Reading needs any wheel, not an installable one (issue 27): a cp39 manylinux-only release
    on a newer interpreter is fetched through the retry for other targets, with progress lines
    on a terminal (faked here)."""
    import sys

    import flowtrace.sources.fetch as fetch

    monkeypatch.setattr(fetch, "_interactive", lambda: True)

    assert sys.version_info >= (3, 10)  # the project's floor: a cp39 wheel never fits here
    dist = "oldeng-1.0.dist-info"
    members = [
        ("oldeng/models/m.py", b"class M:\n    pass\n"),
        (f"{dist}/METADATA", b"Metadata-Version: 2.1\nName: oldeng\nVersion: 1.0\nRequires-Python: <3.10\n"),
        (
            f"{dist}/WHEEL",
            (
                b"Wheel-Version: 1.0\nGenerator: flowtrace-tests\nRoot-Is-Purelib: false\nTag:"
                b" cp39-cp39-manylinux_2_17_x86_64\n"
            ),
        ),
        (f"{dist}/RECORD", b""),
    ]
    make_zip(local_index / "oldeng-1.0-cp39-cp39-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", members)
    root = fetch_pypi("oldeng==1.0", cache_dir=tmp_path / "cache")
    assert (root / "oldeng" / "models" / "m.py").read_bytes() == b"class M:\n    pass\n"
    err = capfd.readouterr().err
    assert "flowtrace: downloading the oldeng==1.0 wheel" in err
    assert (
        "read the one built for Python 3.9" in err
        and "flowtrace: downloaded oldeng-1.0-cp39-cp39-manylinux_2_17_x86_64" in err
    )


def test_no_progress_lines_outside_a_terminal(tmp_path, local_index, capfd):
    wheel(local_index, "quietpkg", "1.0", {"quietpkg/__init__.py": b""})
    fetch_pypi("quietpkg==1.0", cache_dir=tmp_path / "cache")
    assert capfd.readouterr().err == ""
