"""The index stage: files -> facts, parsing with libcst only what can matter.

Selection is a fixpoint: a byte prefilter for the profile's markers picks the first files;
then any unparsed file that subclasses or constructs a class already known to matter (or
that a registry points at) is added, so inheritance and wrapping across files are not
lost. Parsing runs in a process pool (``jobs``) and results are merged in path order, so
the output does not depend on scheduling. Facts are cached by content.
"""

from __future__ import annotations

import os
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from flowtrace import facts as F
from flowtrace.index.class_table import table_facts
from flowtrace.index.cache import FactCache, content_hash, default_cache_dir
from flowtrace.index.discover import SourceFile, discover
from flowtrace.index.parse import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, analyze_bytes, matters
from flowtrace.index.syntax import module_name
from flowtrace.profiles import Conventions, Profile


@dataclass(frozen=True, slots=True)
class IndexOptions:
    jobs: int | None = None  # None: one per core
    use_cache: bool = True
    cache_dir: Path | None = None
    excludes: tuple[str, ...] = ()
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S
    progress: bool | None = None  # None: when stderr is a terminal


_CONV: Conventions | None = None
_LIMITS: tuple[int, float] = (DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S)


def _init_worker(conv: Conventions, limits: tuple[int, float]) -> None:
    global _CONV, _LIMITS
    _CONV, _LIMITS = conv, limits


FULL, TABLE = "full", "table"


def analyze(path: str, data: bytes, tier: str, conv: Conventions, limits: tuple[int, float]) -> F.FileFacts:
    """Full libcst analysis for files naming a capture marker; the class table otherwise."""
    if tier == TABLE:
        if len(data) > limits[0]:
            return F.FileFacts(path, module_name(path), diagnostics=(F.Diagnostic(path, 0, f"file is {len(data)} bytes, over the {limits[0]}-byte limit; not parsed", "too-large"),))
        return table_facts(path, data, conv)
    return analyze_bytes(path, data, conv, max_bytes=limits[0], timeout_s=limits[1])


def _work(item: tuple[str, bytes, str]) -> F.FileFacts:
    assert _CONV is not None
    return analyze(item[0], item[1], item[2], _CONV, _LIMITS)


_CLASS_LINE = re.compile(rb"^[ \t]*class[ \t]+\w+[ \t]*\(([^)]*)\)", re.M)
_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_CONSTRUCTOR = re.compile(rb"\b([A-Z][A-Za-z0-9_]*)\(")


def _relevant_names(files: list[F.FileFacts]) -> set[str]:
    """Simple names of classes that take part in capture, and of their subclasses."""
    names: set[str] = set()
    for ff in files:
        owners = {s.class_qualname for s in ff.setters} | {s.class_qualname for s in ff.capture_sites}
        owners |= {u.class_qualname for u in ff.attribute_uses} | {g.class_qualname for g in ff.default_getters}
        for cls in ff.classes:
            if cls.qualname in owners:
                names.add(cls.name)
        for reg in ff.registry:
            names.add(reg.target.rsplit(".", 1)[-1])
    changed = True
    while changed:
        changed = False
        for ff in files:
            for cls in ff.classes:
                if cls.name not in names and any(b.rsplit(".", 1)[-1] in names for b in cls.bases):
                    names.add(cls.name)
                    changed = True
    return names


class _Progress:
    def __init__(self, enabled: bool, total: int) -> None:
        self.bar = None
        if enabled and total:
            try:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="file", desc="flowtrace: parsing", file=sys.stderr, leave=False)
            except ImportError:  # pragma: no cover
                self.bar = None

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def build_index(root: Path, profiles: list[Profile], options: IndexOptions | None = None) -> F.IndexResult:
    options = options or IndexOptions()
    started = time.perf_counter()
    conv = Conventions.merge(profiles)
    sources, diagnostics = discover(root, options.excludes)
    cache = None
    if options.use_cache:
        cache = FactCache(options.cache_dir or default_cache_dir(root), conv.digest)
        if not cache.usable:
            cache = None

    contents: dict[str, bytes] = {}
    hashes: dict[str, str] = {}
    by_path: dict[str, SourceFile] = {}
    for src in sources:
        try:
            with open(src.absolute, "rb") as handle:
                data = handle.read(options.max_bytes + 1) if src.size > options.max_bytes else handle.read()
        except OSError as exc:
            diagnostics.append(F.Diagnostic(src.path, 0, f"cannot read: {exc.strerror or exc}", "unreadable"))
            continue
        contents[src.path] = data
        by_path[src.path] = src

    full = {p for p, data in contents.items() if matters(data, conv.markers)}
    registration = tuple(v.encode() for v in conv.entry_variables)
    selected: set[str] = set(full)
    selected |= {p for p, data in contents.items() if registration and matters(data, registration)}
    selected |= {p for p in contents if any(p.endswith(d) for d in conv.dict_files)}
    results: dict[str, F.FileFacts] = {}
    parsed = cached = 0
    progress = _Progress(options.progress if options.progress is not None else sys.stderr.isatty(), 0)

    def run(paths: list[str]) -> None:
        nonlocal parsed, cached
        todo: list[tuple[str, bytes, str]] = []
        keys: dict[str, str] = {}
        for path in paths:
            data = contents[path]
            src = by_path[path]
            digest = None
            if cache is not None:
                digest = cache.known_hash(path, src.size, src.mtime_ns)
            if digest is None:
                digest = content_hash(data)
            hashes[path] = digest
            if cache is not None:
                cache.remember(path, src.size, src.mtime_ns, digest)
                key = cache.key(path, digest + (FULL if path in full else TABLE))
                keys[path] = key
                hit = cache.get(key)
                if hit is not None:
                    results[path] = hit
                    cached += 1
                    continue
            todo.append((path, data, FULL if path in full else TABLE))
        if progress.bar is not None:
            progress.bar.total = (progress.bar.total or 0) + len(todo)
        for facts in _parse_all(todo, conv, options, progress):
            results[facts.path] = facts
            parsed += 1
            if cache is not None and not any(d.kind in {"timeout", "internal"} for d in facts.diagnostics):
                cache.put(keys[facts.path], facts)

    if progress.bar is None and (options.progress if options.progress is not None else sys.stderr.isatty()):
        progress = _Progress(True, 1)
    run(sorted(selected))
    # Fixpoint: follow subclasses, wrappers and registry targets into unselected files.
    # Each file's base-class and constructor names are read once with two anchored regexes;
    # the loop itself is set arithmetic.
    mentions: dict[str, set[bytes]] = {}
    for path, data in contents.items():
        if path not in results:
            found = set()
            for bases in _CLASS_LINE.findall(data):
                found.update(_IDENT.findall(bases))
            found.update(_CONSTRUCTOR.findall(data))
            mentions[path] = found
    while True:
        names = {n.encode() for n in _relevant_names(list(results.values()))}
        modules = {r.target.rpartition(".")[0] for ff in results.values() for r in ff.registry}
        new = []
        for path, found in mentions.items():
            if path in results:
                continue
            parts = module_name(path).split(".")
            if any(".".join(parts[i:]) in modules for i in range(len(parts))) or found & names:
                new.append(path)
        if not new:
            break
        run(sorted(new))
    progress.close()
    if cache is not None:
        cache.save()

    files = tuple(results[p] for p in sorted(results))
    for ff in files:
        diagnostics.extend(ff.diagnostics)
    diagnostics.sort(key=lambda d: (d.file, d.line, d.reason))
    errors = sum(1 for d in diagnostics if d.kind in {"parse-error", "timeout", "too-large", "internal"})
    stats = F.IndexStats(
        files_total=len(sources),
        files_parsed=parsed,
        files_cached=cached,
        files_skipped=len(sources) - len(results),
        parse_errors=errors,
        seconds=round(time.perf_counter() - started, 3),
    )
    return F.IndexResult(root=str(root), files=files, diagnostics=tuple(diagnostics), stats=stats, profiles=tuple(p.name for p in profiles))


def _parse_all(todo: list[tuple[str, bytes, str]], conv: Conventions, options: IndexOptions, progress: _Progress) -> list[F.FileFacts]:
    jobs = options.jobs if options.jobs is not None else (os.cpu_count() or 1)
    limits = (options.max_bytes, options.timeout_s)
    if jobs <= 1 or len(todo) < 4:
        return _serial(todo, conv, limits, progress.advance)
    import multiprocessing

    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    # Largest files first so one big file does not become the tail of the scan.
    order = sorted(range(len(todo)), key=lambda i: (todo[i][2] != FULL, -len(todo[i][1])))
    out: list[F.FileFacts | None] = [None] * len(todo)
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=context, initializer=_init_worker, initargs=(conv, limits)) as pool:
            for i, facts in zip(order, pool.map(_work, [todo[i] for i in order], chunksize=4)):
                out[i] = facts
                progress.advance()
    except (BrokenProcessPool, OSError) as exc:
        # A worker died (a crash or the OOM killer): finish serially, and say so.
        remaining = [todo[i] for i in range(len(todo)) if out[i] is None]
        redo = iter(_serial(remaining, conv, limits, progress.advance, note=f"worker process failed ({type(exc).__name__}); parsed serially"))
        out = [x if x is not None else next(redo) for x in out]
    return [x for x in out if x is not None]


def _serial(todo, conv, limits, advance: Callable[[int], None], note: str | None = None) -> list[F.FileFacts]:
    out = []
    for path, data, tier in todo:
        facts = analyze(path, data, tier, conv, limits)
        out.append(facts)
        advance(1)
    return out
