"""Report source links that work in a browser or a CI artifact (issue 27): the web base is
inferred from a git checkout's origin remote and commit, or from an unpacked release's project
URL, and ``--link-base`` overrides both."""

from __future__ import annotations

import re
import shutil

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE
from flowtrace.cli import main
from flowtrace.sources.weblinks import infer_link_base, web_repository

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("remote", "web"),
    [
        ("git@github.com:sgl-project/sglang.git", "https://github.com/sgl-project/sglang"),
        ("https://github.com/vllm-project/vllm.git", "https://github.com/vllm-project/vllm"),
        ("https://token@gitlab.com/group/sub/repo", "https://gitlab.com/group/sub/repo"),
        ("ssh://git@github.com/o/r.git", "https://github.com/o/r"),
        ("/srv/git/repo.git", None),
        ("https://example.org/o/r.git", None),  # an unknown forge: no guessed URL scheme
    ],
)
def test_remote_urls_become_web_repositories(remote, web):
    assert web_repository(remote) == web


def _git_checkout(tmp_path, packed: bool = False):
    repo = tmp_path / "repo"
    tree = repo / "python" / "engine"
    shutil.copytree(SGLANG_LIKE, tree, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    git = repo / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "config").write_text(
        '[core]\n\tbare = false\n[remote "origin"]\n\turl = git@github.com:owner/engine.git\n\tfetch ='
        " +refs/heads/*:refs/remotes/origin/*\n",
        encoding="utf-8",
    )
    (git / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    if packed:
        (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{SHA} refs/heads/main\n", encoding="utf-8")
    else:
        (git / "refs" / "heads" / "main").write_text(SHA + "\n", encoding="utf-8")
    return tree


@pytest.mark.parametrize("packed", [False, True])
def test_a_git_checkout_links_to_the_commit_and_the_scanned_subfolder(tmp_path, packed):
    base = infer_link_base(_git_checkout(tmp_path, packed))
    assert base is not None and base.exact
    assert base.url == f"https://github.com/owner/engine/blob/{SHA}/python/engine"


def test_a_release_links_to_its_project_url_at_the_version_tag_marked_as_a_guess(tmp_path):
    dist = tmp_path / "eng-1.2.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\n"
        "Name: eng\n"
        "Version: 1.2\n"
        "Project-URL: Homepage, https://github.com/owner/eng\n"
        "Project-URL: Docs, https://docs.example\n",
        encoding="utf-8",
    )
    base = infer_link_base(tmp_path)
    assert base is not None and not base.exact
    assert base.url == "https://github.com/owner/eng/blob/v1.2" and "--link-base" in base.origin


def test_scan_html_links_are_web_links_and_link_base_overrides(tmp_path):
    tree = _git_checkout(tmp_path)
    report = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["scan", str(tree), "--no-cache", "--html", str(report)])
    assert res.exit_code == 0, res.output
    html = report.read_text(encoding="utf-8")
    hrefs = re.findall(r'<a class="src[^"]*" href="([^"]+)"', html)
    assert hrefs and all(
        h.startswith(f"https://github.com/owner/engine/blob/{SHA}/python/engine/sglang/") for h in hrefs
    )
    assert "vscode://" not in html
    res = CliRunner().invoke(
        main, ["scan", str(tree), "--no-cache", "--html", str(report), "--link-base", "https://mirror.example/src"]
    )
    hrefs = re.findall(r'<a class="src[^"]*" href="([^"]+)"', report.read_text(encoding="utf-8"))
    assert hrefs and all(h.startswith("https://mirror.example/src/sglang/") for h in hrefs)


def _release(tmp_path, profile_subdir: str | None):
    """sglang_like unpacked as a release whose project URL is a GitHub repository; with
    ``profile_subdir``, a user profile copied from the bundled sglang one with that
    ``[source] repository_subdir`` (None: the bundled profile as it ships)."""
    from flowtrace.engines.profiles import available_profiles

    tree = tmp_path / "eng-0.9"
    shutil.copytree(SGLANG_LIKE, tree)
    dist = tree / "eng-0.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: eng\nVersion: 0.9\nProject-URL: Repository, https://github.com/owner/eng\n",
        encoding="utf-8",
    )
    args = ["--profile", "sglang"]
    if profile_subdir is not None:
        text = available_profiles()["sglang"].read_text(encoding="utf-8")
        text = re.sub(r'repository_subdir = "[^"]*"', f'repository_subdir = "{profile_subdir}"', text)
        assert f'repository_subdir = "{profile_subdir}"' in text
        (tmp_path / "sglang.toml").write_text(text, encoding="utf-8")
        args += ["--profile-file", str(tmp_path / "sglang.toml")]
    return tree, args


def _hrefs(path) -> list[str]:
    return re.findall(r'<a class="src[^"]*" href="([^"]+)"', path.read_text(encoding="utf-8"))


def test_a_release_in_a_repository_subfolder_links_below_that_folder(tmp_path):
    # The bundled sglang profile says the package lives under python/ in its repository.
    tree, args = _release(tmp_path, None)
    report = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["scan", str(tree), "--no-cache", "--html", str(report), *args])
    assert res.exit_code == 0, res.output
    hrefs = _hrefs(report)
    assert hrefs and all(
        h.startswith("https://github.com/owner/eng/blob/v0.9/python/sglang/srt/") for h in hrefs
    ), hrefs[:3]
    # `report` from the saved scan infers the same base from the document's profiles.
    doc = tmp_path / "scan.json"
    res = CliRunner().invoke(main, ["scan", str(tree), "--no-cache", "--format", "json", "-o", str(doc), *args])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["report", "--scan", str(doc), "-o", str(tmp_path / "r2.html")])
    assert res.exit_code == 0, res.output
    assert _hrefs(tmp_path / "r2.html") and all(
        h.startswith("https://github.com/owner/eng/blob/v0.9/python/sglang/srt/") for h in _hrefs(tmp_path / "r2.html")
    )
    # --link-base still overrides.
    res = CliRunner().invoke(
        main, ["scan", str(tree), "--no-cache", "--html", str(report), "--link-base", "https://mirror.example/x", *args]
    )
    assert _hrefs(report) and all(h.startswith("https://mirror.example/x/sglang/srt/") for h in _hrefs(report))


def test_a_profile_without_a_subfolder_links_at_the_tag_root(tmp_path):
    tree, args = _release(tmp_path, "")
    report = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["scan", str(tree), "--no-cache", "--html", str(report), *args])
    assert res.exit_code == 0, res.output
    assert _hrefs(report) and all(
        h.startswith("https://github.com/owner/eng/blob/v0.9/sglang/srt/") for h in _hrefs(report)
    )


@pytest.mark.parametrize(
    ("subdir", "url"),
    [("python", "python"), ("/python/", "python"), ("src/pkg/", "src/pkg"), ("../elsewhere", ""), ("", "")],
)
def test_the_subfolder_never_leaves_the_repository(tmp_path, subdir, url):
    dist = tmp_path / "eng-1.2.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: eng\nVersion: 1.2\nHome-page: https://github.com/owner/eng\n", encoding="utf-8"
    )
    base = infer_link_base(tmp_path, subdir)
    assert base is not None and base.url == "https://github.com/owner/eng/blob/v1.2" + (f"/{url}" if url else "")
