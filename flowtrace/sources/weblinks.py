"""Where a scanned tree's files live on the web, so report links work in a browser or a CI
artifact, not only in a local editor (``vscode://``).

Two sources, read from files (nothing is executed, no network):

* a git checkout: the ``origin`` remote (``.git/config``) and the checked-out commit
  (``.git/HEAD``, a loose or packed ref) give ``https://HOST/OWNER/REPO/blob/SHA/SUBDIR``,
  SUBDIR being the scanned root's place in the repository: exact;
* an unpacked release: the dist-info ``METADATA``'s GitHub/GitLab project URL and version give
  ``.../blob/vVERSION`` (the tag most projects use). The package may sit in a subfolder of its
  repository, which a wheel does not record: the engine's profile says which (``[source]
  repository_subdir``, e.g. ``python`` for a repository holding ``python/PKG/...``). That base
  is marked as a guess and ``--link-base`` overrides it.
"""

from __future__ import annotations

import configparser
import re
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

_FORGES = ("github.com", "gitlab.com")
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


@dataclass(frozen=True, slots=True)
class LinkBase:
    url: str  # prefix; a file's link is url + "/" + its path relative to the scanned root
    origin: str  # how it was found, said in the report's footer
    exact: bool  # False: a guess (a release's tag and layout)


def web_repository(remote: str) -> str | None:
    """``git@github.com:o/r.git`` / ``https://github.com/o/r(.git)`` -> ``https://github.com/o/r``."""
    remote = remote.strip()
    m = re.match(r"^(?:ssh://)?git@([^:/]+)[:/](.+?)(?:\.git)?/?$", remote) or re.match(
        r"^https?://(?:[^@/]+@)?([^/]+)/(.+?)(?:\.git)?/?$", remote
    )
    if not m or m.group(1).lower() not in _FORGES or m.group(2).count("/") < 1:
        return None
    return f"https://{m.group(1).lower()}/{m.group(2)}"


def _git_dir(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / ".git").is_dir():
            return folder
    return None


def _head_commit(git: Path) -> str | None:
    try:
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    if _SHA.match(head):
        return head
    if not head.startswith("ref: "):
        return None
    ref = head[5:].strip()
    try:
        value = (git / ref).read_text(encoding="utf-8").strip()
        return value if _SHA.match(value) else None
    except OSError:
        pass
    try:
        for line in (git / "packed-refs").read_text(encoding="utf-8").splitlines():
            sha, _, name = line.partition(" ")
            if name.strip() == ref and _SHA.match(sha):
                return sha
    except OSError:
        return None
    return None


def _from_git(root: Path) -> LinkBase | None:
    top = _git_dir(root)
    if top is None:
        return None
    config = configparser.ConfigParser(strict=False, interpolation=None)
    try:
        config.read(top / ".git" / "config", encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return None
    section = 'remote "origin"'
    web = web_repository(config.get(section, "url", fallback="")) if config.has_section(section) else None
    sha = _head_commit(top / ".git")
    if web is None or sha is None:
        return None
    sub = root.relative_to(top).as_posix()
    return LinkBase(
        f"{web}/blob/{sha}" + (f"/{sub}" if sub != "." else ""), f"git remote origin at commit {sha[:12]}", True
    )


def _from_release(root: Path, subdir: str = "") -> LinkBase | None:
    sub = clean_subdir(subdir)
    for meta in sorted(root.glob("*.dist-info/METADATA"))[:4]:
        try:
            headers = HeaderParser().parsestr(meta.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            continue
        version = headers.get("Version", "").strip()
        urls = [v.split(",", 1)[-1].strip() for v in headers.get_all("Project-URL") or []] + [
            headers.get("Home-page", "").strip()
        ]
        for url in urls:
            web = web_repository(url)
            if web and version:
                where = f", package folder {sub}/ (the profile's [source] repository_subdir)" if sub else ""
                return LinkBase(
                    f"{web}/blob/v{version}" + (f"/{sub}" if sub else ""),
                    f"the release's project URL {web}, tag v{version}{where} (a guess: pass --link-base if the tag or"
                    " the package's folder differs)",
                    False,
                )
    return None


def clean_subdir(subdir: str) -> str:
    """A repository subfolder as a URL path (``python``, ``/src/pkg/`` -> ``src/pkg``); "" for
    none or for one that would climb out of the repository (``..``)."""
    parts = [p for p in subdir.replace("\\", "/").split("/") if p not in ("", ".")]
    return "" if ".." in parts else "/".join(parts)


def infer_link_base(root: str | Path, subdir: str = "") -> LinkBase | None:
    """The web base for a scanned tree's files, or None (then links open the local editor).

    ``subdir``: where the package sits in its repository, used for a release only (a git
    checkout knows the scanned root's place itself)."""
    path = Path(root)
    folder = (path if path.is_dir() else path.parent).resolve()
    return _from_git(folder) or _from_release(folder, subdir)
