"""Do two flowtrace checkouts write the same JSON for the same trees? (timing and stats aside)

    python bench/json_identity.py --before OLD_SRC                       # the fixture engines
    python bench/json_identity.py --before OLD_SRC --engines DIR sglang-0.5.23 vllm-0.33.0
    python bench/json_identity.py --before OLD_SRC --after NEW_SRC --engines DIR --no-fixtures

A refactoring that must not change any answer (one capture model instead of two, one reader
per fact) is checked here on real trees before it lands. Each checkout (a source folder: a
``git worktree`` or an unpacked ``git archive``) runs in its own subprocess, its own code first
on the import path, and for every tree writes, through the CLI itself:

- ``scan --format json``, ``check --output-format json`` and ``graph --format json`` (no cache);
- ``trace --format json`` of every row with a capture path, with ``--layer-ids default`` and
  each ``--ids`` list, and of every other registered row with the first ``--ids`` list (the
  runner's verdict on a class without a setter), all at ``-L --layers``;
- ``compat --format json`` for each registered architecture of a row with a capture path: a
  target config with that architecture, ``--layers`` layers and ``--hidden`` hidden size, and
  a SpecForge draft config naming ``--draft-ids``.

The invocations are chosen from each checkout's own scan, so a row that appears or vanishes
shows as a missing output. Within one checkout the tree is scanned once for all traces and
compats (``flowtrace.api.scan`` is memoised in the subprocess; each command still runs its
own argument parsing, analysis and rendering). Outputs are compared after dropping timing and
statistics fields (``stats``, ``elapsed``, ``seconds``...); the script prints one line per
output kind and tree, the first differing JSON paths of each differing output, and exits 1
when anything differs.

``--engines DIR`` is a folder of unpacked releases named ``NAME-VERSION`` (the layout of
``FLOWTRACE_REAL_ENGINES``); name the ones to run after it (default: every folder in it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The fixture engines: the ones the tests scan, and the probe's agreement trees.
FIXTURES = (HERE.parent / "tests" / "fixtures" / "engines", HERE.parent / "tests" / "probe" / "agreement_engines")

# Keys whose values measure the run, not the answer.
VOLATILE = frozenset(
    {"stats", "statistics", "elapsed", "elapsed_s", "seconds", "duration", "timing", "timings", "wall_s", "cpu_s"}
)


# -- the driver: runs inside one checkout's subprocess ------------------------------------------


def _cli(args: list[str], out: Path) -> object:
    """Run one CLI command in-process, writing its JSON to ``out``; its document (or the error)."""
    from flowtrace.cli.main import main

    if out.exists():
        out.unlink()
    code: object = 0
    try:
        main.main([*args, "-o", str(out)], prog_name="flowtrace", standalone_mode=False)
    except SystemExit as exc:
        code = exc.code
    except Exception as exc:  # noqa: BLE001 - a crash is an output too, and must match
        return {"<error>": f"{type(exc).__name__}: {exc}"}
    if not out.exists():
        return {"<no output>": code}
    return {"exit": code, "json": json.loads(out.read_text(encoding="utf-8"))}


def _memoise_scan() -> None:
    """One scan per tree for all the trace / compat commands of the driver."""
    from flowtrace import api

    plain, memo = api.scan, {}

    def scan(path, **kwargs):  # noqa: ANN001, ANN003, ANN202
        key = str(path)
        if key not in memo:
            memo[key] = plain(path, **kwargs)
        return memo[key]

    api.scan = scan  # type: ignore[assignment]


def _invocations(scan_doc: dict, layers: int, id_lists: list[str]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(trace name, extra args) per trace, and the architectures to run compat for."""
    traces: list[tuple[str, list[str]]] = []
    archs: list[str] = []
    for m in scan_doc.get("models", []):
        qualname = m["qualname"]
        if m.get("capture"):
            for ids in ["default", *id_lists]:
                traces.append((f"{qualname} ids={ids}", ["-m", qualname, "--layer-ids", ids, "-L", str(layers)]))
            if m.get("registered"):
                archs += [a for a in m.get("architectures", []) if a not in archs]
        elif m.get("registered"):
            traces.append(
                (f"{qualname} ids={id_lists[0]}", ["-m", qualname, "--layer-ids", id_lists[0], "-L", str(layers)])
            )
    return traces, archs


def drive(
    out_file: str, trees: list[str], layers: int, hidden: int, id_lists: list[str], draft_ids: list[int], jobs: str
) -> None:
    """Write {tree: {output name: document}} for every tree (the subprocess's job)."""
    import flowtrace

    _memoise_scan()
    found: dict[str, dict[str, object]] = {"<flowtrace>": {"file": flowtrace.__file__}}
    out_dir = Path(out_file).resolve().parent
    work = Path(tempfile.mkdtemp(prefix="json-identity-"))
    os.chdir(work)  # config paths below are relative: outputs that name them match across runs
    common = ["--no-cache", "--jobs", jobs, "-q"]
    for tree in trees:
        outputs: dict[str, object] = {}
        outputs["scan"] = _cli(["scan", tree, "--format", "json", *common], work / "out.json")
        outputs["check"] = _cli(["check", tree, "--output-format", "json", "--exit-zero", *common], work / "out.json")
        outputs["graph"] = _cli(["graph", tree, "--format", "json", *common], work / "out.json")
        scan_doc = outputs["scan"].get("json", {}) if isinstance(outputs["scan"], dict) else {}
        traces, archs = _invocations(scan_doc if isinstance(scan_doc, dict) else {}, layers, id_lists)
        for name, args in traces:
            outputs[f"trace {name}"] = _cli(["trace", tree, *args, "--format", "json", *common], work / "out.json")
        Path("draft").mkdir(exist_ok=True)
        Path("draft/config.json").write_text(
            json.dumps(
                {
                    "architectures": ["LlamaForCausalLMEagle3"],
                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": draft_ids},
                }
            )
        )
        for n, arch in enumerate(archs):
            target = Path(f"target-{n}.json")
            target.write_text(json.dumps({"architectures": [arch], "num_hidden_layers": layers, "hidden_size": hidden}))
            outputs[f"compat {arch}"] = _cli(
                [
                    "compat",
                    tree,
                    "--target-config",
                    str(target),
                    "--draft-config",
                    "draft/config.json",
                    "--format",
                    "json",
                    *common,
                ],
                work / "out.json",
            )
        found[tree] = outputs
    Path(out_file).write_text(json.dumps(found), encoding="utf-8")
    os.chdir(out_dir)
    shutil.rmtree(work, ignore_errors=True)


# -- the comparison ---------------------------------------------------------------------------


def scrub(value: object) -> object:
    """The document without timing and statistics fields."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def differing_paths(x: object, y: object, path: str = "", limit: int = 5) -> list[str]:
    """The first ``limit`` JSON paths where ``x`` and ``y`` differ, with both values."""
    out: list[str] = []

    def walk(a: object, b: object, p: str) -> None:
        if len(out) >= limit or a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for k in list(a) + [k for k in b if k not in a]:
                walk(a.get(k, "<absent>"), b.get(k, "<absent>"), f"{p}.{k}")
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for n, (u, v) in enumerate(zip(a, b)):
                walk(u, v, f"{p}[{n}]")
        else:
            out.append(f"{p or '<root>'}: {json.dumps(a)[:200]} -> {json.dumps(b)[:200]}")

    walk(x, y, path)
    return out


def run_checkout(src: Path, trees: list[str], args: argparse.Namespace, out: Path) -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(x for x in (str(src), os.environ.get("PYTHONPATH")) if x),
        PYTHONHASHSEED="0",
    )
    env.pop("FLOWTRACE_RULES", None)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--drive",
        str(out),
        "--layers",
        str(args.layers),
        "--hidden",
        str(args.hidden),
        "--draft-ids",
        args.draft_ids,
        "--jobs",
        str(args.jobs),
        *[f"--ids={i}" for i in args.ids],
        *trees,
    ]
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=src)
    print(f"{src}: {time.perf_counter() - started:.0f}s", file=sys.stderr)
    found = json.loads(out.read_text(encoding="utf-8"))
    used = Path(found.pop("<flowtrace>")["file"]).resolve()
    if src.resolve() not in used.parents:
        raise SystemExit(f"{src}: the subprocess imported flowtrace from {used}, not from this checkout")
    return found


def compare(before: dict, after: dict, show: int) -> int:
    """Print one line per (tree, output kind) and the first differences; the number differing."""
    differing = 0
    for tree in sorted(set(before) | set(after)):
        b, a = before.get(tree, {}), after.get(tree, {})
        names = sorted(set(b) | set(a))
        kinds: dict[str, list[str]] = {}
        for name in names:
            kinds.setdefault(name.split(" ", 1)[0], []).append(name)
        for kind, members in kinds.items():
            bad = [n for n in members if scrub(b.get(n, "<absent>")) != scrub(a.get(n, "<absent>"))]
            differing += len(bad)
            print(
                f"{Path(tree).name:<24} {kind:<7} {len(members):>5} output(s): "
                + ("identical" if not bad else f"{len(bad)} differ")
            )
            for name in bad[:show]:
                print(f"    {name}")
                for line in differing_paths(scrub(b.get(name, "<absent>")), scrub(a.get(name, "<absent>"))):
                    print(f"        {line}")
    return differing


def trees_of(args: argparse.Namespace) -> list[str]:
    trees = [] if args.no_fixtures else [str(p) for folder in FIXTURES for p in sorted(folder.iterdir()) if p.is_dir()]
    if args.engines is not None:
        names = args.trees or sorted(p.name for p in args.engines.iterdir() if p.is_dir() and "-" in p.name)
        for name in names:
            path = args.engines / name
            if not path.is_dir():
                raise SystemExit(f"{path}: no such tree (give NAME-VERSION folders of --engines)")
            trees.append(str(path.resolve()))
    elif args.trees:
        raise SystemExit("tree names go with --engines DIR")
    return trees


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", help="NAME-VERSION folders of --engines (default: all of them)")
    parser.add_argument("--before", type=Path, help="the reference checkout (a source folder)")
    parser.add_argument("--after", type=Path, default=HERE.parent, help="the checkout under test (default: this one)")
    parser.add_argument("--engines", type=Path, help="a folder of unpacked releases named NAME-VERSION")
    parser.add_argument(
        "--no-fixtures",
        action="store_true",
        help="skip the fixture engines (tests/fixtures/engines, tests/probe/agreement_engines)",
    )
    parser.add_argument("--layers", type=int, default=32, help="L for every trace and compat (default 32)")
    parser.add_argument("--hidden", type=int, default=4096, help="the target's hidden size in compat (default 4096)")
    parser.add_argument(
        "--ids", action="append", help="explicit --layer-ids lists to trace (repeatable; default -1,1,15,31)"
    )
    parser.add_argument("--draft-ids", default="1,15,28", help="the draft config's ids in compat (default 1,15,28)")
    parser.add_argument("--jobs", type=int, default=2, help="parser processes per scan (default 2)")
    parser.add_argument("--show", type=int, default=5, help="differing outputs shown per kind (default 5)")
    parser.add_argument("--keep", type=Path, help="also write both checkouts' outputs to this folder")
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.ids = args.ids or ["-1,1,15,31"]
    if args.drive:
        drive(
            args.drive,
            args.trees,
            args.layers,
            args.hidden,
            args.ids,
            [int(x) for x in args.draft_ids.split(",")],
            str(args.jobs),
        )
        return 0
    if args.before is None:
        parser.error("--before SRC is required")
    trees = trees_of(args)
    with tempfile.TemporaryDirectory() as tmp:
        before = run_checkout(args.before, trees, args, Path(tmp) / "before.json")
        after = run_checkout(args.after, trees, args, Path(tmp) / "after.json")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        (args.keep / "before.json").write_text(json.dumps(before, indent=1, sort_keys=True))
        (args.keep / "after.json").write_text(json.dumps(after, indent=1, sort_keys=True))
    differing = compare(before, after, args.show)
    print("all outputs identical" if not differing else f"{differing} output(s) differ")
    return 1 if differing else 0


if __name__ == "__main__":
    raise SystemExit(main())
