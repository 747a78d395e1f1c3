"""Compare the facts two flowtrace checkouts extract from the same trees, field by field.

    python bench/facts_diff.py --before ../flowtrace-before TREE [TREE ...]
    python bench/facts_diff.py --before A --after B --show 5 TREE ...

For a change that must not move any fact (a faster analyser, a new parser), run this on
real engine trees before landing it: each checkout indexes every tree in a subprocess
(no cache, one job, its own code first on the import path), and every selected file's
``FileFacts`` and the diagnostics are compared. Differences are counted per field path
(``.classes[].assignments``) with a few examples each; the exit status is 1 when any differ.
``--after`` defaults to this checkout.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

_DUMP = r"""
import pickle, sys
from pathlib import Path
from flowtrace.engines.profiles import select_profiles
from flowtrace.index.build import IndexOptions, build_index
out, trees = sys.argv[1], sys.argv[2:]
found = {}
for tree in trees:
    root = Path(tree)
    index = build_index(root, select_profiles(root, None), IndexOptions(jobs=1, use_cache=False, progress=False))
    for facts in index.files:
        found[(tree, facts.path)] = facts
    found[(tree, "<diagnostics>")] = index.diagnostics
with open(out, "wb") as handle:
    pickle.dump(found, handle)
"""


def dump(checkout: Path, trees: list[str], out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(x for x in (str(checkout), os.environ.get("PYTHONPATH")) if x))
    subprocess.run([sys.executable, "-c", _DUMP, str(out), *trees], check=True, env=env, cwd=checkout)
    with open(out, "rb") as handle:
        return pickle.load(handle)  # noqa: S301 - written by the line above


def differences(before: dict, after: dict) -> dict[str, list[tuple[object, object, object]]]:
    """Field path -> [(key, before value, after value)], tuples of equal length compared
    item by item, so one changed fact shows as its field, not as its whole file."""
    found: dict[str, list] = collections.defaultdict(list)

    def walk(x: object, y: object, path: str, key: object) -> None:
        if x == y:
            return
        if dataclasses.is_dataclass(x) and type(x) is type(y):
            for f in dataclasses.fields(x):
                walk(getattr(x, f.name), getattr(y, f.name), f"{path}.{f.name}", key)
        elif isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y):
            for u, v in zip(x, y):
                walk(u, v, path + "[]", key)
        else:
            found[path or "<file>"].append((key, x, y))

    for key in sorted(set(before) | set(after), key=str):
        walk(before.get(key), after.get(key), "", key)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", help="trees to index (unpacked engine wheels, checkouts)")
    parser.add_argument("--before", type=Path, required=True, help="the reference checkout")
    parser.add_argument(
        "--after",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout under test (default: this one)",
    )
    parser.add_argument("--show", type=int, default=3, help="examples per differing field (default 3)")
    args = parser.parse_args()
    trees = [str(Path(t).resolve()) for t in args.trees]
    with tempfile.TemporaryDirectory() as tmp:
        before = dump(args.before.resolve(), trees, Path(tmp) / "before.pickle")
        after = dump(args.after.resolve(), trees, Path(tmp) / "after.pickle")
    found = differences(before, after)
    print(f"{len(before)} / {len(after)} entries (files and diagnostics) before / after")
    for path, items in sorted(found.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(items):6d}  {path}")
        for key, x, y in items[: args.show]:
            print(
                f"        {key[1] if isinstance(key, tuple) else key}\n"
                f"          - {repr(x)[:300]}\n"
                f"          + {repr(y)[:300]}"
            )
    print("no differences" if not found else f"{sum(map(len, found.values()))} differing values")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
