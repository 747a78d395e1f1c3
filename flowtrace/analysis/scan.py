"""The pipeline up to the model matrix: index a tree and resolve one row per model class.

What every consumer of a scan starts from (the rules, the lint runner, the renderers, the
API); it sits in the analysis stage so that none of them has to import the API above them.
``flowtrace.api`` re-exports :class:`ScanResult` and :func:`scan`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from flowtrace.errors import UsageError
from flowtrace.model import facts as F
from flowtrace.index.build import IndexOptions, build_index
from flowtrace.engines.family import ProfileChoice, choose
from flowtrace.engines.drafts import DraftCatalogue, load_catalogue, shipped_catalogue
from flowtrace.engines.methods import SpecMethod
from flowtrace.engines.profiles import Conventions, Profile

if TYPE_CHECKING:
    import networkx as nx  # built lazily (graph.py): a warm scan answered from the memo never imports it

    from flowtrace.analysis.resolve import ModelRow, Project  # imported by scan() after the index: workers start sooner


@dataclass(frozen=True)
class ScanResult:
    root: Path
    profiles: tuple[Profile, ...]
    index: F.IndexResult
    project: Project
    choice: ProfileChoice | None = None  # which profiles were applied, how and why
    # The published drafts and trainers' defaults the grading measures ids against (the shipped
    # catalogue plus the user's --drafts files).
    drafts: DraftCatalogue = field(default_factory=shipped_catalogue)
    # ``--method all``: the outputs carry every served method's answer beside this one's.
    every_method: bool = False
    # The same scan for another method (the index and the analysis per method: its setters,
    # id keys and getters are other names); None for a result built by hand.
    again: Callable[[str], ScanResult] | None = field(default=None, repr=False, compare=False)

    @property
    def rows(self) -> tuple[ModelRow, ...]:
        return self.project.rows

    @property
    def files(self) -> tuple[F.FileFacts, ...]:
        return self.index.files

    @property
    def engine(self) -> str:
        return ",".join(p.name for p in self.profiles)

    @property
    def method(self) -> SpecMethod | None:
        """The speculative method this scan answers for (None: a profile set that declares none)."""
        return self.project.conv.method

    @property
    def method_asked(self) -> str | None:
        """The method's name when it is not the profiles' default (what ``--method`` changed)."""
        chosen = self.method
        return chosen.name if chosen is not None and not chosen.default else None

    @cached_property
    def method_results(self) -> dict[str, ScanResult]:
        """Every other method the profiles serve, scanned for it (name -> result), in the
        profiles' order; empty for a result that cannot scan again."""
        served = self.project.conv.methods_served
        own = self.method.name if self.method is not None else None
        if self.again is None:
            return {}
        return {m.name: self.again(m.name) for m in served if m.name != own}

    @cached_property
    def method_rows(self) -> tuple[ModelRow, ...]:
        """The rows with ``method_chains`` filled: each class's chain under every other served
        method (:attr:`method_results`) that gives it one, each naming its method."""
        by_method = {name: {r.qualname: r for r in other.rows} for name, other in self.method_results.items()}
        out = []
        for row in self.rows:
            chains = tuple(
                other.chain
                for rows in by_method.values()
                if (other := rows.get(row.qualname)) is not None and other.chain is not None
            )
            out.append(replace(row, method_chains=chains) if chains else row)
        return tuple(out)

    @property
    def engine_keys(self) -> tuple[str, ...]:
        """Where the engine reads the draft's layer ids, in the order it tries them."""
        if self.method_asked:
            return self.project.conv.layer_id_keys
        return tuple(dict.fromkeys(k for p in self.profiles for k in p.layer_id_keys))

    @cached_property
    def graph(self) -> nx.MultiDiGraph:
        """The repo's data-flow graph (built once; rules and the report read it)."""
        from flowtrace.analysis.graph import build_graph

        return build_graph(self.project, self.engine_keys)

    def model(self, name: str) -> ModelRow:
        row = self.project.row(name)
        if row is None:
            close = sorted(r.name for r in self.rows if name.lower() in r.name.lower())[:8]
            hint = f" (similar: {', '.join(close)})" if close else ""
            raise UsageError(f"no model class or architecture named {name!r} in {self.root}{hint}")
        return row


# ``--method all``: answer for the default method and carry every other served method's answers.
ALL_METHODS = "all"


def resolve_root(path: str | Path) -> Path:
    root = Path(path)
    if not root.exists():
        raise UsageError(f"{path}: no such file or directory")
    return root


def scan(
    path: str | Path,
    *,
    profile: str | None = None,
    options: IndexOptions | None = None,
    profile_files: tuple[str | Path, ...] = (),
    drafts_files: tuple[str | Path, ...] = (),
    method: str | None = None,
) -> ScanResult:
    """Index a tree and resolve its model matrix (``profile_files``: the user's own profiles,
    merged with the bundled ones; ``drafts_files``: the user's own draft catalogue files, added
    to the shipped one; ``method``: the speculative method the matrix answers for, a profile's
    ``[methods.<name>]`` by name or label, None: the profiles' default)."""
    source = str(path)
    if source.startswith("pypi:"):
        from flowtrace.sources.fetch import fetch_pypi

        root = fetch_pypi(source[5:], cache_dir=(options.cache_dir if options else None))
    else:
        root = resolve_root(path)
    # The user's catalogue files are refused before the index; the shipped one is read after it
    # (while nothing waits on it: a cold scan's workers start sooner).
    drafts = load_catalogue(drafts_files) if drafts_files else None
    profiles, choice = choose(root, profile, extra=tuple(Path(f) for f in profile_files))
    every_method = method == ALL_METHODS
    # an unknown method fails here, before the index
    conv = Conventions.merge(profiles, None if every_method else method)
    chosen = conv.method.name if conv.method is not None and method is not None and not every_method else None
    options = replace(options or IndexOptions(), method=chosen)
    index = build_index(root, profiles, options)
    if drafts is None:
        drafts = shipped_catalogue()
    from flowtrace.analysis.resolve import Project

    project = Project(index.files, conv)

    def again(name: str) -> ScanResult:
        return scan(
            root,
            profile=profile,
            options=replace(options, progress=False),
            profile_files=profile_files,
            drafts_files=drafts_files,
            method=name,
        )

    return ScanResult(
        root=root,
        profiles=tuple(profiles),
        index=index,
        project=project,
        choice=choice,
        drafts=drafts,
        every_method=every_method,
        again=again,
    )


def require_engine_code(result: ScanResult, source: str | Path) -> None:
    """Refuse a path without engine code (a README, a lone script, the wrong folder): every
    command answers it with this one line and exit 2, never a green "0 findings", an empty
    matrix or "72 classes lost". Engine code is what the profiles recognise
    (:attr:`flowtrace.model.facts.FileFacts.engine_code`)."""
    if any(ff.engine_code for ff in result.files):
        return
    total, unread = result.index.stats.files_total, result.index.stats.parse_errors
    what = "no Python files, so no" if total == 0 else f"{total} Python file{'s' if total != 1 else ''}, none with a"
    if unread:  # say why, when the engine code may be in a file that could not be read
        first = next((d for d in result.index.diagnostics if d.kind != F.DiagnosticKind.SKIPPED), None)
        what = (
            f"{unread} of {total} Python file{'s' if total != 1 else ''} unreadable"
            + (f" ({first.file}:{first.line}: {first.reason})" if first else "")
            + ", none with a"
        )
    engines = " or ".join(p.name for p in result.profiles) or "any known engine"
    looked = ", ".join(dict.fromkeys(p.detect_paths[0] for p in result.profiles if p.detect_paths))
    raise UsageError(
        f"{source}: no engine code ({what} model registry, capture setter or decoder-layer loop of {engines}); give an"
        " engine checkout, an unpacked wheel or"
        f" pypi:NAME==VERSION{f', e.g. the folder holding {looked}' if looked else ''}"
    )
