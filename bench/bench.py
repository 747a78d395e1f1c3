#!/usr/bin/env python
"""flowtrace scan benchmark: cold, warm and one-file-changed scans against an ast.parse baseline.

    python bench/bench.py                       # the SGLang 0.5.23 wheel source (downloaded once)
    python bench/bench.py --tree /path/to/vllm  # any tree
    python bench/bench.py --scale 4             # also a 4x larger tree, to show how cost grows

Everything runs on a temporary copy of the tree (so no cache lands in the source) and every
scan is a subprocess of the CLI (``python -m flowtrace scan COPY --format json``), measured
``--repeat`` times (median reported):

  (a) cold     ``--no-cache``
  (b) warm     cache present, nothing changed
  (c) touched  cache present, one model file changed (a comment appended, a new one each time)
  (e) edited   cache present, one model file edited so that its facts move (a new first line)
  (d) baseline one process reading and ``ast.parse``-ing every .py file of the tree

It prints a/d, b/d, c/d against the targets in wall time and in CPU time (user+sys of the
whole process tree: the steadier figure on a loaded machine), files parsed vs total, peak RSS
(largest single process, from wait4, and the sampled sum over the scan's process tree), and
checks that the JSON is the same (apart from timing fields) cold, warm, touched and serial.

A separate single-process pass (``STAGES`` below, workers replaced by in-process parsing)
splits the cold CPU into stages: read, prefilter, ast pre-screen (the one parse of a fully
analysed file), fact extraction, class table, the rest of the index, resolve, rules, render
(an older flowtrace measured with ``--flowtrace-src`` also shows its span selection, libcst
parse and positions); counts files per tier, the share of the tree's lines in fully analysed
files, and the share libcst parsed (none since the analysers read the stdlib tree).

Performance is judged by this script against the baseline measured in the same run, never by
a timed test. The machine's other load skews all of it: run it twice, on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

TARGETS = {"a/d": 0.5, "b/d": 0.05, "c/d": 0.1, "e/d": 0.1}  # (e): the target of (c), for an edit that moves facts
RSS_TARGET_MB = 300  # the whole process tree
SCALE_SLACK = 1.1  # --scale K: the K-times tree may take K * 1.1 times as long
# Timing fields, and counts that depend on what the cache held: ignored when comparing runs.
VOLATILE_STATS = ("seconds", "files_from_cache")
SKIP_DIRS = {".flowtrace_cache", "__pycache__", ".git"}
TOUCH_CANDIDATES = (
    "sglang/srt/models/llama.py",
    "python/sglang/srt/models/llama.py",
    "vllm/model_executor/models/llama.py",
)

BASELINE = r"""
import ast, os, sys, time
root = sys.argv[1]
skip = set(sys.argv[2].split(","))
files = 0
started = time.perf_counter()
for current, dirs, names in os.walk(root):
    dirs[:] = sorted(d for d in dirs if d not in skip)
    for name in sorted(names):
        if name.endswith(".py"):
            with open(os.path.join(current, name), "rb") as handle:
                data = handle.read()
            try:
                ast.parse(data)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pass
            files += 1
print(files, time.perf_counter() - started)
"""



# The cold scan's CPU split into stages, in one process: the worker pool is replaced by the
# in-process fallback and the stage functions are wrapped with CPU timers (exclusive time:
# a stage's callees are charged to themselves). Names that an older flowtrace lacks are
# skipped, so the same script profiles a before/after pair.
STAGES = r"""
import json, sys, time
from pathlib import Path

root = Path(sys.argv[1])
cpu = time.process_time
totals, stack, counts = {}, [], {"full": 0, "table": 0, "libcst_lines": 0, "full_lines": 0, "tree_lines": 0}

def timed(stage, fn):
    def wrapper(*args, **kwargs):
        stack.append(0.0)
        start = cpu()
        try:
            return fn(*args, **kwargs)
        finally:
            elapsed = cpu() - start
            inner = stack.pop()
            totals[stage] = totals.get(stage, 0.0) + elapsed - inner
            if stack:
                stack[-1] += elapsed
    return wrapper

def patch(module, name, stage, count=None):
    fn = getattr(module, name, None)
    if fn is None:
        return
    wrapped = timed(stage, fn)
    if count is not None:
        inner = wrapped
        def wrapped(*args, **kwargs):
            count(*args, **kwargs)
            return inner(*args, **kwargs)
    setattr(module, name, wrapped)

from flowtrace.index import build, class_table, parse, syntax, visitors
libcst = None
if "libcst" in open(visitors.__file__).read():  # an older flowtrace, whose analysers read libcst trees
    import libcst
from flowtrace.engines.profiles import Conventions, select_profiles

STUB = (b"\x22" * 3, b"...")  # a triple quote, spelled so as not to end this string

def lines_of(data):
    # lines of code: not blank, and not a span stub (which stands on lines of its body)
    if isinstance(data, str):
        data = data.encode("utf-8", "replace")
    return sum(1 for line in data.splitlines() if line.strip() and line.strip() not in STUB)

def count_libcst(source, *a, **k):
    counts["libcst_lines"] += lines_of(source)

def count_tree(data, *a, **k):  # the prefilter sees every file read once
    counts["tree_lines"] += lines_of(data)

if hasattr(build, "_Parser") and hasattr(build._Parser, "_start"):
    def local_start(self):
        self.local = True
    build._Parser._start = local_start
build.POOL_MIN_WORK = float("inf")  # older flowtrace: parse in place
patch(build, "_read", "read")
patch(build, "_verdict", "prefilter", count_tree)
for name in ("mentions", "content_hash"):
    patch(build, name, "prefilter")
patch(parse, "_screen", "ast pre-screen")
patch(parse, "select_spans", "span selection")
if libcst is not None:
    patch(libcst, "parse_module", "libcst parse", count_libcst)
patch(visitors, "Positions", "positions")
patch(visitors.FileAnalyzer, "facts", "fact extraction")
init = visitors.FileAnalyzer.__init__
visitors.FileAnalyzer.__init__ = timed("fact extraction", init)
def count_full(path, data, *a, **k):
    counts["full"] += 1
    counts["full_lines"] += lines_of(data)
def count_table(*a, **k):
    counts["table"] += 1
patch(parse, "analyze_bytes", "parse glue", count_full)
patch(class_table, "table_facts", "class table", count_table)

from flowtrace import api
from flowtrace.analysis.resolve import Project
from flowtrace.render.scan_json import dumps, scan_document

profiles = select_profiles(root, None)
start = cpu()
index = timed("index: rest", build.build_index)(
    root, profiles, build.IndexOptions(jobs=1, use_cache=False, progress=False)
)
project = timed("resolve", Project)(index.files, Conventions.merge(profiles))
result = api.ScanResult(root=root, profiles=tuple(profiles), index=index, project=project)
findings = timed("rules", api.findings)(result)
text = timed("render", lambda: dumps(scan_document(result, findings)))()
total = cpu() - start
counts["files_total"] = index.stats.files_total
counts["files_skipped"] = index.stats.files_skipped
print(json.dumps({"total": total, "stages": totals, "counts": counts}))
"""


# -- the tree -------------------------------------------------------------------------
def fetch_sglang(version: str, cache: Path) -> Path:
    """The SGLang wheel's source: ``pip download --no-deps`` into ``cache``, unzipped once."""
    target = cache / f"sglang-{version}"
    if (target / ".unpacked").exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not wheels:
        print(f"downloading sglang=={version} into {cache} ...", file=sys.stderr)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"sglang=={version}", "-d", str(cache)],
            check=True,
        )
        wheels = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not wheels:
        raise SystemExit(f"pip download left no sglang-{version} wheel in {cache}")
    shutil.rmtree(target, ignore_errors=True)
    with zipfile.ZipFile(wheels[0]) as archive:
        archive.extractall(target)
    (target / ".unpacked").write_text(wheels[0].name)
    return target


def copy_tree(source: Path, dest: Path, scale: int) -> int:
    """Copy ``source`` to ``dest``; with ``scale`` K, K-1 more copies of every top-level
    package under distinct names (``pkg_x2`` ...). Returns the number of .py files."""
    ignore = shutil.ignore_patterns(*SKIP_DIRS)
    shutil.copytree(source, dest, ignore=ignore, symlinks=True)
    for k in range(2, scale + 1):
        for entry in sorted(source.iterdir()):
            if entry.is_dir() and entry.name not in SKIP_DIRS and not entry.name.endswith(".dist-info"):
                shutil.copytree(entry, dest / f"{entry.name}_x{k}", ignore=ignore, symlinks=True)
    return sum(1 for _ in python_files(dest))


def python_files(root: Path):
    for current, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for name in names:
            if name.endswith(".py"):
                yield Path(current) / name


def pick_touch(root: Path, wanted: str | None) -> Path:
    for rel in ([wanted] if wanted else []) + list(TOUCH_CANDIDATES):
        if (root / rel).is_file():
            return root / rel
    models = sorted(p for p in python_files(root) if p.parent.name == "models" and not p.name.startswith("__"))
    if not models:
        raise SystemExit("no model file to touch; pass --touch REL")
    return models[len(models) // 2]


# -- measuring one subprocess ------------------------------------------------------------
def _tree_memory_kb(pid: int) -> tuple[int, int]:
    """(RSS, PSS) summed over ``pid`` and its descendants. The RSS sum counts pages that forked
    workers share with their parent once per process (an upper bound); PSS splits them."""
    rss = pss = 0
    stack, seen = [pid], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/smaps_rollup") as handle:
                for line in handle:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
            with open(f"/proc/{current}/task/{current}/children") as handle:
                stack.extend(int(x) for x in handle.read().split())
        except (OSError, ValueError):
            pass
    return rss, pss


def run(cmd: list[str], stdout_path: Path, env: dict[str, str]) -> dict:
    """Run ``cmd``; wall seconds, CPU seconds (with children), peak RSS (largest process, from
    wait4) and the sampled peak RSS summed over its process tree."""
    peak = [0, 0]
    with open(stdout_path, "wb") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, env=env, cwd=env["FLOWTRACE_BENCH_SRC"])
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.05):
                rss, pss = _tree_memory_kb(proc.pid)
                peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        stderr = proc.stderr.read()  # type: ignore[union-attr]
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        done.set()
        sampler.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr.decode(errors='replace')}")
    return {
        "wall": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
        "tree_rss_mb": max(peak[0], usage.ru_maxrss) / 1024,
        "tree_pss_mb": max(peak[1], usage.ru_maxrss) / 1024,
    }


def scan(root: Path, out: Path, extra: list[str], env: dict[str, str]) -> tuple[dict, dict]:
    cmd = [sys.executable, "-m", "flowtrace", "scan", str(root), "--format", "json", *extra]
    measured = run(cmd, out, env)
    doc = json.loads(out.read_text())
    measured["stats"] = dict(doc.get("stats", {}))
    return measured, doc


def normalised(doc: dict) -> str:
    doc = json.loads(json.dumps(doc))
    stats = doc.get("stats", {})
    for key in VOLATILE_STATS:
        stats.pop(key, None)
    return json.dumps(doc, sort_keys=True)


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


# -- one scale --------------------------------------------------------------------------
def bench_tree(source: Path, work: Path, scale: int, args: argparse.Namespace, env: dict[str, str]) -> dict:
    root = work / f"tree-x{scale}"
    t = time.perf_counter()
    total = copy_tree(source, root, scale)
    print(f"[x{scale}] copied {total} .py files to {root} ({time.perf_counter() - t:.1f}s)", file=sys.stderr)
    cache = work / f"cache-x{scale}"
    jobs = ["--jobs", str(args.jobs)] if args.jobs else []
    out = work / "out.json"
    docs: dict[str, str] = {}
    result: dict = {"scale": scale, "files_total": total}

    def log(label: str, m: dict) -> None:
        st = m.get("stats", {})
        print(
            f"[x{scale}] {label:<9} {m['wall']:6.2f}s wall {m['cpu']:6.2f}s cpu {m['rss_mb']:5.0f}MB rss"
            + (
                f"  parsed {st.get('files_parsed', 0) - st.get('files_from_cache', 0)}, cached"
                f" {st.get('files_from_cache', 0)}"
                if st
                else ""
            ),
            file=sys.stderr,
        )

    # (d) baseline and (a) cold, no cache: interleaved, so that a change in the machine's
    # other load hits both alike
    base, cold = [], []
    for _ in range(args.repeat):
        m = run([sys.executable, "-c", BASELINE, str(root), ",".join(SKIP_DIRS)], work / "baseline.txt", env)
        log("baseline", m)
        base.append(m)
        m, doc = scan(root, out, ["--no-cache", *jobs], env)
        log("cold", m)
        cold.append(m)
        docs.setdefault("cold", normalised(doc))
    # seed the cache (cold, writing it), then (b) warm
    seed, doc = scan(root, out, ["--cache-dir", str(cache), *jobs], env)
    log("seed", seed)
    docs["cold+cache"] = normalised(doc)
    warm = []
    for _ in range(args.repeat):
        m, doc = scan(root, out, ["--cache-dir", str(cache), *jobs], env)
        log("warm", m)
        warm.append(m)
        docs.setdefault("warm", normalised(doc))
    # (c) one model file changed (a new comment each time, so each run really re-parses it)
    touched_file = pick_touch(root, args.touch)
    touched = []
    for i in range(args.repeat):
        with open(touched_file, "a") as handle:
            handle.write(f"\n# flowtrace bench touch {i} {time.time_ns()}\n")
        m, doc = scan(root, out, ["--cache-dir", str(cache), *jobs], env)
        log("touched", m)
        touched.append(m)
        docs.setdefault("touched", normalised(doc))
    # (e) one model file edited so that its facts move (a new first line each time): what (c)
    # costs when the change is not a comment, every later stage recomputed. Not in the
    # identity check: the answer moves with the lines (a cold scan of it is another tree).
    edited = []
    before_edits = touched_file.read_bytes()
    for i in range(args.repeat):
        touched_file.write_bytes(
            f"import os  # flowtrace bench edit {i} {time.time_ns()}\n".encode() + touched_file.read_bytes()
        )
        m, _ = scan(root, out, ["--cache-dir", str(cache), *jobs], env)
        log("edited", m)
        edited.append(m)
    touched_file.write_bytes(before_edits)  # the serial run below compares with the cold answer
    # serial, for the identity check and the parallel speed-up
    if not args.no_serial:
        m, doc = scan(root, out, ["--no-cache", "--jobs", "1"], env)
        log("serial", m)
        result["serial"] = m["wall"]
        docs["serial"] = normalised(doc)

    # the cold scan's CPU per stage, in one process (x1 only: it is a breakdown, not a ratio)
    if scale == 1 and not args.no_stages:
        profiles = []
        for _ in range(args.stage_repeat):
            done = subprocess.run(
                [sys.executable, "-c", STAGES, str(root)],
                capture_output=True,
                text=True,
                env=env,
                cwd=env["FLOWTRACE_BENCH_SRC"],
            )
            if done.returncode not in (0, 1):
                raise SystemExit(f"stage profile failed:\n{done.stderr[-3000:]}")
            profiles.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"[x{scale}] stages    {profiles[-1]['total']:6.2f}s cpu (one process)", file=sys.stderr)
        result["stages"] = _median_profile(profiles)

    d = median(base, "wall")
    stats = cold[0]["stats"]
    result.update(
        baseline=d,
        cold=median(cold, "wall"),
        warm=median(warm, "wall"),
        touched=median(touched, "wall"),
        edited=median(edited, "wall"),
        edited_cpu=median(edited, "cpu"),
        cold_cpu=median(cold, "cpu"),
        warm_cpu=median(warm, "cpu"),
        touched_cpu=median(touched, "cpu"),
        baseline_cpu=median(base, "cpu"),
        touched_file=str(touched_file.relative_to(root)),
        files_selected=stats.get("files_parsed"),
        touched_parsed=touched[-1]["stats"].get("files_parsed", 0) - touched[-1]["stats"].get("files_from_cache", 0),
        rss_mb=max(r["rss_mb"] for r in cold + warm + touched + [seed]),
        tree_rss_mb=max(r["tree_rss_mb"] for r in cold + warm + touched + [seed]),
        tree_pss_mb=max(r["tree_pss_mb"] for r in cold + warm + touched + [seed]),
        identical=len(set(docs.values())) == 1,
        runs={"baseline": base, "cold": cold, "seed": seed, "warm": warm, "touched": touched, "edited": edited},
    )
    if not result["identical"]:
        first = next(iter(docs.values()))
        result["differing"] = [k for k, v in docs.items() if v != first]
    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    return result


def _median_profile(profiles: list[dict]) -> dict:
    stages = sorted({k for p in profiles for k in p["stages"]})
    return {
        "total": statistics.median(p["total"] for p in profiles),
        "stages": {k: statistics.median(p["stages"].get(k, 0.0) for p in profiles) for k in stages},
        "counts": profiles[0]["counts"],
    }


def args_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def verdict(value: float, target: float) -> str:
    return "ok" if value <= target else "MISSED"


STAGE_ORDER = (
    "read", "prefilter", "ast pre-screen", "span selection", "libcst parse", "positions", "fact extraction",
    "parse glue", "class table", "index: rest", "resolve", "rules", "render",
)


def report_stages(r: dict) -> None:
    prof = r["stages"]
    counts = prof["counts"]
    print(f"cold CPU by stage, one process ({prof['total']:.2f}s in all):")
    for name in STAGE_ORDER + tuple(k for k in prof["stages"] if k not in STAGE_ORDER):
        if name in prof["stages"]:
            print(f"    {name:<18} {prof['stages'][name]:7.2f}s")
    full, table = counts["full"], counts["table"]
    print(
        f"files per tier: full analysis {full}, class table {table}, not parsed {counts['files_skipped']} (of"
        f" {counts['files_total']})"
    )
    tree = max(counts["tree_lines"], 1)
    if "full_lines" in counts:
        print(
            f"lines of code in fully analysed files (blank lines not counted): {counts['full_lines']} of the tree's"
            f" {counts['tree_lines']} ({100 * counts['full_lines'] / tree:.1f}%)"
        )
    print(
        "lines of code parsed by libcst (blank lines and span stubs not counted):"
        f" {counts['libcst_lines']} ({100 * counts['libcst_lines'] / tree:.1f}%)"
    )


def report(results: list[dict], load: tuple[float, float, float]) -> None:
    after = os.getloadavg()
    print(
        f"machine: {os.cpu_count()} cpus, {args_cores()} usable; load average before:"
        f" {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, after: {after[0]:.2f} {after[1]:.2f} {after[2]:.2f}"
    )
    for r in results:
        d, dc = r["baseline"], r["baseline_cpu"]
        print(f"\n== scale x{r['scale']}: {r['files_total']} .py files")
        print(f"(d) baseline ast.parse, one process  {d:7.2f}s wall {dc:7.2f}s cpu")
        rows = (
            ("cold", "a/d", "(a) cold, --no-cache"),
            ("warm", "b/d", "(b) warm, nothing changed"),
            ("touched", "c/d", "(c) warm, one file changed"),
            ("edited", "e/d", "(e) warm, one file's facts changed"),
        )
        for key, name, label in rows:
            ratio, cpu_ratio = r[key] / d, r[f"{key}_cpu"] / dc
            print(
                f"{label:<36} {r[key]:7.2f}s wall {r[f'{key}_cpu']:7.2f}s cpu   {name} = {ratio:5.3f} wall,"
                f" {cpu_ratio:5.3f} cpu  (target <= {TARGETS[name]}: {verdict(ratio, TARGETS[name])} wall,"
                f" {verdict(cpu_ratio, TARGETS[name])} cpu)"
            )
        if "serial" in r:
            print(
                f"    cold --jobs 1                    {r['serial']:7.2f}s   (parallel speed-up"
                f" {r['serial'] / r['cold']:.2f}x)"
            )
        cores = args_cores()
        print(
            f"    cold cpu / ({cores} x baseline cpu)      {r['cold_cpu'] / (cores * dc):5.3f}  (a/d on"
            f" {cores} otherwise idle cores, if the work spread perfectly)"
        )
        print(
            f"files parsed: {r['files_selected']} of"
            f" {r['files_total']} ({100 * r['files_selected'] / max(r['files_total'], 1):.1f}%); after touching"
            f" {r['touched_file']}: {r['touched_parsed']} re-parsed"
        )
        print(
            f"peak memory of the process tree: {r['tree_pss_mb']:.0f} MB PSS (target <= {RSS_TARGET_MB}:"
            f" {verdict(r['tree_pss_mb'], RSS_TARGET_MB)}), {r['tree_rss_mb']:.0f} MB RSS summed (shared pages counted"
            f" per process); {r['rss_mb']:.0f} MB largest process"
        )
        print(
            "same JSON cold / cold+cache / warm / touched"
            + (" / serial" if "serial" in r else "")
            + f": {'yes' if r['identical'] else 'NO: ' + ', '.join(r['differing'])}"
        )
        if "stages" in r:
            report_stages(r)
    if len(results) > 1:
        one, big = results[0], results[-1]
        k = big["scale"]
        ratio, cpu_ratio = big["cold"] / one["cold"], big["cold_cpu"] / one["cold_cpu"]
        print(
            "\n"
            f"x{k} cold / x1 cold = {ratio:.2f} wall, {cpu_ratio:.2f} cpu  (target <= {k * SCALE_SLACK:.1f}:"
            f" {verdict(ratio, k * SCALE_SLACK)} wall, {verdict(cpu_ratio, k * SCALE_SLACK)} cpu); baseline grew"
            f" {big['baseline'] / one['baseline']:.2f}x wall, {big['baseline_cpu'] / one['baseline_cpu']:.2f}x cpu"
        )
        print(f"x{k} warm / x1 warm = {big['warm'] / one['warm']:.2f}; touched {big['touched'] / one['touched']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", type=Path, help="tree to scan (default: the SGLang wheel source)")
    parser.add_argument("--sglang-version", default="0.5.23")
    parser.add_argument(
        "--download-dir",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "flowtrace-bench",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median reported)")
    parser.add_argument(
        "--scale", type=int, default=1, help="also measure a K-times larger tree (copies under distinct package names)"
    )
    parser.add_argument("--jobs", type=int, default=None, help="pass --jobs to the scans (default: flowtrace's own)")
    parser.add_argument("--touch", help="file (relative to the tree) to change for (c)")
    parser.add_argument("--no-serial", action="store_true", help="skip the --jobs 1 run")
    parser.add_argument("--no-stages", action="store_true", help="skip the per-stage CPU profile")
    parser.add_argument("--stage-repeat", type=int, default=1, help="runs of the stage profile (median reported)")
    parser.add_argument(
        "--flowtrace-src",
        type=Path,
        help="measure the flowtrace checkout here (default: this one), e.g. a 'before' copy",
    )
    parser.add_argument("--workdir", type=Path, help="where the copies go (default: a temp dir)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    source = args.tree.resolve() if args.tree else fetch_sglang(args.sglang_version, args.download_dir)
    env = dict(os.environ)
    repo = args.flowtrace_src.resolve() if args.flowtrace_src else Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(repo), env.get("PYTHONPATH")) if x)
    # every subprocess runs in the measured checkout: ``-m``/``-c`` put the working folder first
    # on sys.path, which would otherwise pick whatever flowtrace the caller stands in
    env["FLOWTRACE_BENCH_SRC"] = str(repo)
    env.pop("FORCE_COLOR", None)
    # An installed wheel has its bytecode compiled (pip does it); a checkout compiles it on the
    # first import, unless PYTHONDONTWRITEBYTECODE is set, when every scan would compile
    # flowtrace again (~0.1 s). Compile it once, so that every scan starts as an installed one.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(repo / "flowtrace")], check=False, stdout=subprocess.DEVNULL
    )
    load = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(prefix="flowtrace-bench-", dir=args.workdir) as tmp:
        for scale in sorted({1, args.scale}):
            results.append(bench_tree(source, Path(tmp), scale, args, env))
    report(results, load)
    if args.json:
        args.json.write_text(json.dumps({"tree": str(source), "load": load, "results": results}, indent=2, default=str))


if __name__ == "__main__":
    main()
