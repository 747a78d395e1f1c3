"""The index stage: files -> facts, parsing (stdlib ``ast``) only what can matter.

Selection is a fixpoint: a byte prefilter for the profile's markers picks the first files;
then any unparsed file that subclasses or constructs a class already known to matter (or
that a registry points at) is added, so inheritance and wrapping across files are not
lost. Parsing runs in a process pool (``jobs``) and results are merged in path order, so
the output does not depend on scheduling. Facts are cached by content.

How the work flows (every step is there for speed; none changes a fact):

* The walk lists files with their stat. A file whose stat matches the cache's manifest is
  not read at all: its content hash, prefilter verdict and the class names it subclasses or
  constructs come from the manifest. Others are read once, hashed, prefiltered and (when
  the prefilter does not select them) scanned for those class names.
* Selected files whose facts are cached are taken from the cache; the others are queued,
  largest first, for killable worker processes (``jobs`` of them, one with ``--jobs 1``),
  forked after the parser is imported and warmed up so they share it. A worker that passes
  the per-file wall-clock limit is killed and replaced; one that crashes is replaced; the
  file becomes a diagnostic and the scan goes on. Workers read the file themselves and
  send back pickled facts; nothing big crosses a pipe twice. The file's suppression comments
  are among them (``index/comments.py``): the lint runner does not read the file again.
* The fixpoint is incremental: each result adds its relevant class names and registry
  modules, and the files waiting on those names are queued at once, while the pool is
  still busy, instead of in rounds. The selection is the least fixpoint of a monotone rule,
  so the order results arrive in cannot change it.
* Once every file is classified this process only waits for the pool, so a caller may hand
  it work of its own for that time (``IndexOptions.meanwhile``: ``check`` imports what its
  graph needs): on a cold scan that work would otherwise wait, alone on one core, until the
  workers are done. It runs only when many files are parsed; it never touches a fact.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import os
import pickle
import re
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from flowtrace.model import facts as F
from flowtrace.index.cache import (
    FULL_MARKER,
    REGISTRATION,
    FactCache,
    FileState,
    content_hash,
    default_cache_dir,
    dumps,
)
from flowtrace.sources.discover import SourceFile, discover
from flowtrace.index.comments import flowtrace_comments
from flowtrace.index.syntax import module_name
from flowtrace.index.lifetime import keep_until_exit
from flowtrace.index.packages import ancestors, distributions, read_package
from flowtrace.index.parse import DEFAULT_MAX_BYTES, DEFAULT_TIMEOUT_S, matters, quiet_allocations, run_test_hook
from flowtrace.engines.profiles import Conventions, Profile, root_package

if TYPE_CHECKING:  # the pool (and multiprocessing) is imported only when a scan parses
    from flowtrace.index.workers import Lost, WorkerPool


@dataclass(frozen=True, slots=True)
class IndexOptions:
    jobs: int | None = None  # None: one per core this process may run on
    use_cache: bool = True
    cache_dir: Path | None = None
    excludes: tuple[str, ...] = ()
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S
    progress: bool | None = None  # None: when stderr is a terminal
    method: str | None = None  # the speculative method ([methods.<name>]); None: the profiles' default
    # The caller's own work for this process while the workers parse many files (a warm-up of
    # the stages after the index, such as their imports), as steps (an iterable: each item is
    # one step done): started once, when this process has nothing left to do but wait, with new
    # work handed to the workers between steps, since a worker that finishes its file during a
    # long step would wait for it. It must not change a fact; the index never reads what it does.
    meanwhile: Callable[[], Iterable[object]] | None = field(default=None, compare=False)


FULL, TABLE, PACKAGE = "full", "table", "package"  # PACKAGE: a package __init__'s imports only

_DONE = object()  # what next() gives for a meanwhile with no step left

# At most this many files to read (changed since the last scan): the parent does not import
# the parser before forking (see ``_Parser.warm_parent``).
_FEW_TO_PARSE = 32

# Files (count, bytes) classified between two hand-overs to the pool, whichever comes first:
# few enough that a worker done with its file soon gets the next (the big files come first, a
# hundred milliseconds of reading 16 of them), enough that polling the pool costs nothing.
_BATCH = (16, 256 * 1024)

# How a task's size counts when ordering the queue (largest first): a class-table file costs
# about a fifth of what the full analysis costs per byte.
_TABLE_WEIGHT = 0.2


def available_cores() -> int:
    """The cores this process may run on (affinity and cgroup cpusets), not the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# -- the work one file takes (in a worker) ---------------------------------------------
def analyze(path: str, data: bytes, tier: str, conv: Conventions, limits: tuple[int, float]) -> F.FileFacts:
    """Full analysis for files naming a capture marker; the class table otherwise."""
    run_test_hook(data)
    if tier == TABLE:
        if len(data) > limits[0]:
            return F.FileFacts.unparsed(
                path,
                module_name(path, conv.package),
                f"file is larger than the {limits[0]}-byte limit; not parsed",
                F.DiagnosticKind.TOO_LARGE,
            )
        from flowtrace.index.class_table import table_facts

        return table_facts(path, data, conv)
    from flowtrace.index.parse import analyze_bytes

    return analyze_bytes(path, data, conv, max_bytes=limits[0], timeout_s=limits[1])


def _read(absolute: str, size: int, max_bytes: int) -> bytes:
    with open(absolute, "rb") as handle:
        return handle.read(max_bytes + 1) if size > max_bytes else handle.read()


# A task: (path, absolute path, size, tier, content hash when classified, "" without a cache).
# Its outcome: (path, content hash of what was parsed, "" without a cache, pickled facts), or
# (path, None, error text) when it could not be read.
_Task = tuple[str, str, int, str, str]
_Outcome = tuple[str, str | None, bytes | str]


def _run_task(task: _Task, conv: Conventions, limits: tuple[int, float]) -> _Outcome:
    path, absolute, size, tier, classified = task
    try:
        data = _read(absolute, size, limits[0])
    except OSError as exc:
        return path, None, f"cannot read: {exc.strerror or exc}"
    try:
        facts = analyze(path, data, tier, conv, limits)
    except Exception as exc:  # noqa: BLE001 - one file's analyser bug must not end the scan
        facts = F.FileFacts.unparsed(
            path,
            module_name(path, conv.package),
            f"internal error while analysing ({type(exc).__name__}: {exc})",
            F.DiagnosticKind.INTERNAL,
        )
    if len(data) <= limits[0]:  # the whole file: its suppression comments, read here once for the lint runner
        facts = dataclasses.replace(facts, flowtrace_comments=flowtrace_comments(data))
    # What was read, hashed: it keys the cache and vouches for the fingerprint. A scan without a
    # cache (its files classified with no digest) has neither, and nothing reads the hash.
    return path, content_hash(data) if classified else "", dumps(facts)


# -- what the fixpoint matches on ----------------------------------------------------
# A file's base-class and constructor names, read with anchored regexes. The class regex
# starts with its literal (fast to search) and checks the line start itself, which finds
# exactly what ``^[ \t]*class[ \t]+\w+[ \t]*\(([^)]*)\)`` (re.M) finds.
_CLASS_HEAD = re.compile(rb"class[ \t]+\w+[ \t]*\(([^)]*)\)")
_IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# ``\b([A-Z][A-Za-z0-9_]*)\(`` read over the reversed bytes: there it starts with the literal
# ``(``, which the regex engine finds with a fast search instead of trying a character class
# at every byte (a third of the time over a whole tree); the identifier run is taken whole
# (greedy, then not followed by another identifier byte) and must end, i.e. start in the
# file, with a capital.
_REVERSED_CONSTRUCTOR = re.compile(rb"\(([A-Za-z0-9_]*[A-Z])(?![A-Za-z0-9_])")


def mentions(data: bytes) -> frozenset[str]:
    """Names a file lists as base classes (``class X(A, b.B)``) or calls like a class (``Foo(``)."""
    found: set[bytes] = set()
    search = _CLASS_HEAD.search
    pos = 0
    while True:
        match = search(data, pos)
        if match is None:
            break
        start = match.start()
        if data[data.rfind(b"\n", 0, start) + 1 : start].strip(b" \t"):
            pos = start + 1  # not at a line start: look again just past it
            continue
        found.update(_IDENT.findall(match.group(1)))
        pos = match.end()
    found.update(name[::-1] for name in _REVERSED_CONSTRUCTOR.findall(data[::-1]))
    return frozenset(name.decode("ascii") for name in found)


def _suffixes(path: str, package: str = "") -> set[str]:
    parts = module_name(path, package).split(".")
    return {".".join(parts[i:]) for i in range(len(parts))}


class _Fixpoint:
    """The selection rule, incrementally: a file is selected when one of the names it
    mentions is relevant (owns capture facts, is a registry target, or subclasses a relevant
    class, transitively), or when a registry target lives in its module."""

    def __init__(self, select: Callable[[str], None], package: str = "") -> None:
        self.select, self.package = select, package
        self.names: set[str] = set()
        self.modules: set[str] = set()
        self.children: dict[str, set[str]] = {}
        self.waiting_on_name: dict[str, list[str]] = {}
        self.waiting_on_module: dict[str, list[str]] = {}

    def watch(self, path: str, names: frozenset[str]) -> None:
        """A file the prefilter did not select: select it if it matches now, else wait."""
        suffixes = _suffixes(path, self.package)
        if not names.isdisjoint(self.names) or not suffixes.isdisjoint(self.modules):
            self.select(path)
            return
        for name in names:
            self.waiting_on_name.setdefault(name, []).append(path)
        for suffix in suffixes:
            self.waiting_on_module.setdefault(suffix, []).append(path)

    def add(self, ff: F.FileFacts) -> None:
        owners = {s.class_qualname for s in ff.setters} | {s.class_qualname for s in ff.capture_sites}
        owners |= {u.class_qualname for u in ff.attribute_uses} | {g.class_qualname for g in ff.default_getters}
        for cls in ff.classes:
            if cls.qualname in owners:
                self._name(cls.name)
        for reg in ff.registry:
            self._name(reg.target.rsplit(".", 1)[-1])
            self._module(reg.target.rpartition(".")[0])
        for cls in ff.classes:
            for base in cls.bases:
                last = base.rsplit(".", 1)[-1]
                self.children.setdefault(last, set()).add(cls.name)
                if last in self.names:
                    self._name(cls.name)

    def _name(self, name: str) -> None:
        stack = [name]
        while stack:
            current = stack.pop()
            if current in self.names:
                continue
            self.names.add(current)
            for path in self.waiting_on_name.pop(current, ()):
                self.select(path)
            stack.extend(self.children.get(current, ()))

    def _module(self, module: str) -> None:
        if module not in self.modules:
            self.modules.add(module)
            for path in self.waiting_on_module.pop(module, ()):
                self.select(path)


class _Progress:
    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar = None

    def grow(self, n: int = 1) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            try:
                from tqdm import tqdm

                # Indeterminate (a count, no percentage): the fixpoint selects more files as it
                # learns, so a total known up front would be a guess that moves the bar backwards.
                self.bar = tqdm(total=None, unit="file", desc="flowtrace: parsing", file=sys.stderr, leave=False)
            except ImportError:  # pragma: no cover
                self.enabled = False

    def advance(self, n: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _Parser:
    """Runs tasks largest first in killable worker processes (:mod:`flowtrace.index.workers`):
    ``jobs`` of them, one with ``jobs=1``, so that no file can hang or crash the scan. Only
    when no process can be started at all are files parsed here (and the scan says so)."""

    def __init__(self, conv: Conventions, limits: tuple[int, float], jobs: int) -> None:
        self.conv, self.limits, self.jobs = conv, limits, jobs
        self.heap: list[tuple[int, float, str, _Task]] = []
        self.pool: WorkerPool | None = None
        self.local = False  # no worker process could be started: parse in this process
        self.failure: str | None = None
        # Import the parser here before forking, so that the workers share it. Worth it when
        # many files wait; for a few (one file changed since the last scan) the workers import
        # it themselves while this process classifies the rest, instead of after it.
        self.warm_parent = True

    def add(self, task: _Task) -> None:
        path, _, size, tier, _ = task
        work = size if tier == FULL else size * _TABLE_WEIGHT
        heapq.heappush(self.heap, (tier != FULL, -work, path, task))

    @property
    def busy(self) -> bool:
        return self.pool is not None and self.pool.in_flight > 0

    def pump(self) -> None:
        """Hand queued tasks to idle workers (starting them as needed), largest first."""
        if self.pool is None and self.heap and not self.local:
            self._start()
        while self.pool is not None and self.heap and self.pool.has_room():
            task = heapq.heappop(self.heap)[3]
            try:
                self.pool.submit(task)
            except OSError as exc:
                self.add(task)
                self._fall_back(exc)

    def _start(self) -> None:
        from flowtrace.index.parse import warm_up

        if self.warm_parent:
            warm_up(self.conv)  # import the analysers once, before forking
        from flowtrace.index.workers import WorkerPool

        self.pool = WorkerPool(self.jobs, _run_task, (self.conv, self.limits), hard_limit(self.limits[1]))

    def _fall_back(self, exc: BaseException) -> None:
        self.failure = f"cannot start worker processes ({exc}); parsed in this process, unprotected"
        self.local = True
        if self.pool is not None:
            for task in self.pool.pending:
                self.add(task)
            self.pool.pending.clear()

    def next_local(self) -> _Outcome | None:
        """Run the largest queued task here (only when no worker process can start)."""
        if not self.local or not self.heap:
            return None
        return _run_task(heapq.heappop(self.heap)[3], self.conv, self.limits)

    def wait(self) -> list[_Outcome]:
        """Block for at least one finished task (or a deadline); return every finished one."""
        return self._collect(block=True)

    def ready(self) -> list[_Outcome]:
        """Every finished task, without blocking."""
        return self._collect(block=False)

    def _collect(self, block: bool) -> list[_Outcome]:
        if self.pool is None:
            return []
        try:
            finished = self.pool.wait(block)
        except OSError as exc:  # a dead worker could not be replaced
            self._fall_back(exc)
            return []
        from flowtrace.index.workers import Lost

        return [_lost_outcome(item, self.conv.package) if isinstance(item, Lost) else item[1] for item in finished]

    def close(self, cancel: bool = False) -> None:
        if self.pool is not None:
            self.pool.close(cancel=cancel)
            self.pool = None


def hard_limit(timeout_s: float) -> float:
    """The wall-clock limit after which a worker is killed: the in-process limit (which a
    parse stuck in native code never notices) plus a grace for a loaded machine."""
    return timeout_s + max(1.0, timeout_s / 4) if timeout_s > 0 else 0.0


def _rooted(conv: Conventions, root: Path) -> Conventions:
    """The conventions with the package the scanned folder is (module names get its prefix;
    the digest changes with it, so cached facts of the unprefixed names are not reused)."""
    package = root_package(root) if root.is_dir() else ""
    if not package:
        return conv
    digest = hashlib.sha256(f"{conv.digest}\0{package}".encode()).hexdigest()[:16]
    return dataclasses.replace(conv, package=package, digest=digest)


def _largest_first(src: SourceFile) -> tuple[int, str]:
    return -src.size, src.path


def _lost_outcome(lost: Lost, package: str = "") -> _Outcome:
    """A task whose worker was killed or crashed: the file becomes one counted diagnostic."""
    path, _, _, _, digest = lost.task
    kind = F.DiagnosticKind.TIMEOUT if lost.kind == "timeout" else F.DiagnosticKind.INTERNAL
    facts = F.FileFacts.unparsed(path, module_name(path, package), lost.reason, kind)
    return path, digest, dumps(facts)


def _verdict(data: bytes, markers: tuple[bytes, ...], registration: tuple[bytes, ...]) -> int:
    """The byte prefilter: names a capture marker (full analysis), a registration variable
    (the class table at least), or neither (parsed only if the fixpoint asks)."""
    verdict = FULL_MARKER if matters(data, markers) else 0
    if registration and matters(data, registration):
        verdict |= REGISTRATION
    return verdict


def build_index(root: Path, profiles: list[Profile], options: IndexOptions | None = None) -> F.IndexResult:
    """Index a tree: discover, classify by the byte prefilter, parse until the fixpoint closes
    (the facts it gathers are acyclic: no cyclic GC meanwhile, see ``quiet_allocations``)."""
    with quiet_allocations():
        result = _IndexRun(root, profiles, options or IndexOptions()).run()
        keep_until_exit()
        return result


class _IndexRun:
    """One scan's index build, in named phases: open the cache, classify what the manifest
    vouches for, read and classify the rest a batch at a time (the pool parses meanwhile),
    parse until the fixpoint closes, then assemble the result."""

    def __init__(self, root: Path, profiles: list[Profile], options: IndexOptions) -> None:
        self.root, self.profiles, self.options = root, profiles, options
        self.started = time.perf_counter()
        # The index extracts the facts of one speculative method (its setters, getters, id keys):
        # another method is another index, cached under its own digest.
        self.conv = _rooted(Conventions.merge(profiles, options.method), root)
        self.sources, self.diagnostics = discover(root, options.excludes)
        self.cache = self._open_cache()
        self.by_path: dict[str, SourceFile] = {s.path: s for s in self.sources}
        self.states: dict[str, FileState] = {}
        self.results: dict[str, F.FileFacts] = {}
        self.selected: set[str] = set()
        self.to_dispatch: deque[str] = deque()
        self.keys: dict[str, str] = {}
        self.parsed_digests: dict[str, str] = {}  # content hash of what each parse read
        self.fact_digests: dict[str, str] = {}  # hash of each result's pickled facts
        self.parsed = self.cached = 0
        jobs = options.jobs if options.jobs is not None else available_cores()
        self.parser = _Parser(self.conv, (options.max_bytes, options.timeout_s), jobs)
        self.progress = _Progress(options.progress if options.progress is not None else sys.stderr.isatty())
        self.fixpoint = _Fixpoint(self.select, self.conv.package)
        # Registration variables and registering decorators (``@register("Arch")``): a file
        # naming one registers a model, which gets a row even without a capture marker.
        self.registration = tuple(v.encode() for v in sorted(self.conv.entry_variables | self.conv.registry_decorators))

    def _open_cache(self) -> FactCache | None:
        if not self.options.use_cache:
            return None
        cache = FactCache(
            self.options.cache_dir or default_cache_dir(self.root),
            self.conv.digest,
            root=self.root,
            variant=f"max_bytes={self.options.max_bytes}",
        )
        return cache if cache.usable else None

    # ------------------------------------------------------------------ selection and parsing

    def select(self, path: str) -> None:
        if path not in self.selected:
            self.selected.add(path)
            self.to_dispatch.append(path)

    def tier_of(self, path: str) -> str:
        return FULL if self.states[path].verdict & FULL_MARKER else TABLE

    def accept(self, path: str, facts: F.FileFacts) -> None:
        self.results[path] = facts
        self.fixpoint.add(facts)

    def dispatch(self) -> None:
        """Take newly selected files from the cache, or queue them for parsing."""
        while self.to_dispatch:
            path = self.to_dispatch.popleft()
            state, src, tier = self.states[path], self.by_path[path], self.tier_of(path)
            if self.cache is not None:
                self.keys[path] = self.cache.key(path, state.digest + tier)
                hit, payload = self.cache.get(self.keys[path])
                if hit is not None:
                    self.cached += 1
                    self.fact_digests[path] = content_hash(payload)
                    self.accept(path, hit)
                    continue
            self.parser.add((path, src.absolute, src.size, tier, state.digest))
            self.progress.grow()
        self.parser.pump()

    def finish(self, outcome: _Outcome) -> None:
        path, digest, payload = outcome
        self.progress.advance()
        if digest is None:
            self.diagnostics.append(F.Diagnostic(path, 0, str(payload), F.DiagnosticKind.UNREADABLE))
            if self.cache is not None:
                self.cache.forget(path)
            return
        facts = pickle.loads(payload)  # type: ignore[arg-type]
        self.parsed += 1
        self.parsed_digests[path] = digest
        if self.cache is not None:  # what the fingerprint hashes; without a cache there is none
            self.fact_digests[path] = content_hash(payload)  # type: ignore[arg-type]
        self.accept(path, facts)
        if self.cache is not None:
            self._store(path, digest, facts, payload)  # type: ignore[arg-type]

    def _store(self, path: str, digest: str, facts: F.FileFacts, payload: bytes) -> None:
        assert self.cache is not None
        if digest != self.states[path].digest:  # changed while scanning: key by what was parsed
            self.cache.forget(path)
            self.keys[path] = self.cache.key(path, digest + self.tier_of(path))
        if not any(d.kind in {"timeout", "internal"} for d in facts.diagnostics):
            self.cache.put(self.keys[path], facts, payload)

    def drain(self, block: bool = False) -> None:
        for outcome in self.parser.wait() if block else self.parser.ready():
            self.finish(outcome)

    # ------------------------------------------------------------------ classification

    def _selected_up_front(self, path: str, verdict: int) -> bool:
        return bool(verdict) or self.conv.is_dict_file(path)

    def classify(self, src: SourceFile, state: FileState, names: frozenset[str] | None = None) -> None:
        """Record ``state`` and select the file or watch it; ``names``: its mentions as a set,
        when the caller has them already."""
        self.states[src.path] = state
        if self.cache is not None:
            self.cache.remember(src.path, state)
        if self._selected_up_front(src.path, state.verdict):
            self.select(src.path)
        else:
            assert state.mentions is not None
            self.fixpoint.watch(src.path, names if names is not None else state.mentioned())

    def partition(self) -> tuple[list[tuple[SourceFile, FileState]], list[SourceFile]]:
        """``(known, unknown)``: files the manifest vouches for (no I/O) with their states, and
        the ones that must be read."""
        known: list[tuple[SourceFile, FileState]] = []
        unknown: list[SourceFile] = []
        for src in self.sources:
            state = self.cache.known(src.path, src.size, src.mtime_ns, src.ctime_ns) if self.cache is not None else None
            if state is None or (state.mentions is None and not self._selected_up_front(src.path, state.verdict)):
                unknown.append(src)
            else:
                known.append((src, state))
        return known, unknown

    def classify_known(self, known: list[tuple[SourceFile, FileState]]) -> None:
        for src, state in known:
            self.classify(src, state)

    def reuse_selection(self, known: list[tuple[SourceFile, FileState]]) -> bool:
        """When nothing changed since the last scan (every file known, none added or gone),
        take its selection as it stands: the fixpoint would close on the same files."""
        if self.cache is None or len(known) != len(self.sources):
            return False
        states = {src.path: state for src, state in known}
        selection = self.cache.selection_for(states)
        if selection is None:
            return False
        self.states = states
        for path, state in states.items():
            self.cache.remember(path, state)
        for path in selection:
            self.select(path)
        return True

    def classify_read(self, src: SourceFile) -> None:
        try:
            data = _read(src.absolute, src.size, self.options.max_bytes)
        except OSError as exc:
            self.diagnostics.append(
                F.Diagnostic(src.path, 0, f"cannot read: {exc.strerror or exc}", F.DiagnosticKind.UNREADABLE)
            )
            return
        verdict = _verdict(data, self.conv.markers, self.registration)
        names = None if self._selected_up_front(src.path, verdict) else mentions(data)
        watched = None if names is None else FileState.joined(names)
        digest = content_hash(data) if self.cache is not None else ""  # content keys the cache only
        self.classify(src, FileState(src.size, src.mtime_ns, src.ctime_ns, digest, verdict, watched), names)

    def classify_unknown(self, unknown: list[SourceFile]) -> None:
        """Read and classify ``unknown``, handing what they select to the pool every few files
        (:data:`_BATCH`): a worker that finishes its file waits for the next hand-over."""
        files = size = 0
        for src in unknown:
            self.classify_read(src)
            files, size = files + 1, size + src.size
            if files == _BATCH[0] or size >= _BATCH[1]:
                self.dispatch()
                self.drain()
                files = size = 0

    def close_fixpoint(self) -> None:
        """Parse until the fixpoint closes: pool results, or local work when no pool runs.
        The caller's ``meanwhile`` starts the first time this process waits on a pool that many
        files keep busy (a few are parsed before it would be done), a step at a time, the workers
        handed new files between steps; what is left of it when the pool is done is left."""
        meanwhile = self.options.meanwhile if self.parser.warm_parent else None
        steps: Iterator[object] | None = None
        while True:
            self.dispatch()
            if self.parser.busy:
                if meanwhile is not None:  # every file is classified: the pool's turn, and the caller's
                    steps, meanwhile = iter(meanwhile()), None
                if steps is not None and next(steps, _DONE) is not _DONE:
                    self.drain()  # what finished during the step, so that dispatch refills the pool
                    continue
                steps = None
                self.drain(block=True)
                continue
            outcome = self.parser.next_local()
            if outcome is not None:
                self.finish(outcome)
                continue
            if not self.to_dispatch:
                break

    # ------------------------------------------------------------------ the run

    def run(self) -> F.IndexResult:
        # The files the manifest does not vouch for are read and classified first, a batch at a
        # time, so the pool starts on what changed while this process classifies the rest (the
        # selection is a least fixpoint: the order files are classified in cannot change it).
        # Largest first: the files worth parsing are mostly the big ones, so the first batch
        # already gives the workers work, and the longest parses start earliest.
        completed = False
        try:
            known, unknown = self.partition()
            if not self.reuse_selection(known):
                self.parser.warm_parent = len(unknown) > _FEW_TO_PARSE
                unknown.sort(key=_largest_first)
                self.classify_unknown(unknown)
                self.classify_known(known)
            self.close_fixpoint()
            completed = True
        finally:
            self.parser.close(cancel=not completed)  # an interrupted scan does not wait for its queue
            self.progress.close()
        if self.parser.failure:
            self.diagnostics.append(F.Diagnostic(".", 0, self.parser.failure, F.DiagnosticKind.SKIPPED))
        packages = self.read_packages()
        if self.cache is not None and any(facts.engine_code for facts in self.results.values()):
            # a tree without engine code is refused by every command: nothing is left in it
            self.cache.select(tuple(sorted(self.selected)))
            self.cache.save()
        return self.result(packages)

    def read_packages(self) -> tuple[F.PackageFacts, ...]:
        """The package ``__init__.py`` files above the indexed files (index/packages.py): a
        selected one's imports come with its facts; the others are small and read here, once,
        cached by content like any file."""
        wanted = sorted({init for path in self.results for init in ancestors(path) if init in self.by_path})
        out = []
        for init in wanted:
            facts = self.results.get(init) or self._package_facts(init)
            if facts is not None:
                out.append(F.PackageFacts(init, facts.module, facts.package_imports))
        return tuple(out)

    def _package_facts(self, init: str) -> F.FileFacts | None:
        state = self.states.get(init)
        if state is None:
            return None
        key = self.cache.key(init, state.digest + PACKAGE) if self.cache is not None else ""
        if self.cache is not None:
            hit, _ = self.cache.get(key)
            if hit is not None:
                return hit
        src = self.by_path[init]
        try:
            data = _read(src.absolute, src.size, self.options.max_bytes)
        except OSError:
            return None
        if self.cache is not None and content_hash(data) != state.digest:
            return None  # changed since it was classified: read it next time
        module = module_name(init, self.conv.package)
        package = read_package(init, module, data)
        facts = F.FileFacts(init, module, package_imports=package.imports)
        if self.cache is not None:
            self.cache.put(key, facts)
        return facts

    def result(self, packages: tuple[F.PackageFacts, ...] = ()) -> F.IndexResult:
        files = tuple(self.results[p] for p in sorted(self.results))
        diagnostics = list(self.diagnostics)
        for ff in files:
            diagnostics.extend(ff.diagnostics)
        diagnostics.sort(key=lambda d: (d.file, d.line, d.reason))
        errors = sum(1 for d in diagnostics if d.kind in {"parse-error", "timeout", "too-large", "internal"})
        dists = distributions(self.root)
        stats = F.IndexStats(
            files_total=len(self.sources),
            files_parsed=self.parsed,
            files_cached=self.cached,
            files_skipped=len(self.sources) - len(self.results),
            parse_errors=errors,
            seconds=round(time.perf_counter() - self.started, 3),
        )
        return F.IndexResult(
            root=str(self.root),
            files=files,
            diagnostics=tuple(diagnostics),
            stats=stats,
            profiles=tuple(p.name for p in self.profiles),
            fingerprint=self.fingerprint(diagnostics, packages, dists),
            file_digests=tuple((p, self.states[p].digest) for p in sorted(self.results)),
            packages=packages,
            distributions=dists,
        )

    def fingerprint(
        self, diagnostics: list[F.Diagnostic], packages: tuple[F.PackageFacts, ...] = (), dists: tuple[str, ...] = ()
    ) -> str:
        """What the index holds (see :attr:`IndexResult.fingerprint`): the cache salt, the root,
        the diagnostics, each selected file's pickled facts, and the package imports and
        distribution names read beside them. Empty without a cache, or when a
        file was parsed from other bytes than it was classified by. Facts rather than content:
        an edit that leaves a file's facts as they were (a comment, a function no fact is
        about) leaves the fingerprint, and so what later stages derived from it, as it was."""
        if self.cache is None or any(self.states[p].digest != d for p, d in self.parsed_digests.items()):
            return ""
        h = hashlib.sha256(
            f"{self.cache.salt}\0{self.root.resolve()}\0{sorted(self.results)}\0{diagnostics}\n".encode()
        )
        for path in sorted(self.results):
            h.update(f"{path}\0{self.fact_digests[path]}\n".encode())
        h.update(dumps((packages, dists)))  # what the grading reads beside the files' facts
        return h.hexdigest()
