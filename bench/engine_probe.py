"""Time and memory of ``flowtrace probe engine`` per architecture, on the real engine.

    python bench/engine_probe.py [--engine vllm|sglang] [--method NAME] [--engine-python PY]
                                 [--only llama,qwen3] [--json out.json]

For each target config in tests/probe/engine_configs/ it runs one engine process with the cases
the engine-probe tests use (two explicit id sets, then the draft config without ids, which may
raise and so goes last) and prints one table row per case: architecture | ids | static | runtime |
agree | seconds | peak RSS. The targets: one architecture in under 60 s and 3 GB peak RSS.
Measured numbers belong in the issue note, not in a timed test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from flowtrace.probe.engine import Case, probe_engine  # noqa: E402

CONFIGS = ROOT / "tests" / "probe" / "engine_configs"
CASES = [Case("ids-1-2-3", "draft", (1, 2, 3)), Case("ids-0-2-4", "draft", (0, 2, 4)), Case("no-ids", "draft", None)]


def parse_cases(text: str) -> list[Case]:
    cases = []
    for n, part in enumerate(p for p in text.split(";") if p.strip()):
        mode, _, ids = part.strip().partition(":")
        if mode not in ("draft", "direct"):
            raise SystemExit(f"--cases {part!r}: expected draft:IDS or direct:IDS")
        parsed = None if ids.strip() in ("", "none") else tuple(int(x) for x in ids.split(","))
        cases.append(Case(f"{n}-{mode}-{ids.strip() or 'none'}", mode, parsed))
    return cases


def row(doc: dict) -> str:
    st, ob = doc["static"], doc["observed"]
    static = (
        str(st["boundaries"]) if st["outcome"] == "captures" else f"{st['outcome']} {st.get('raises_at') or ''}".strip()
    )
    runtime = str([s["boundary"] for s in ob["slots"]]) if ob["slots"] else ob["outcome"]
    if ob["outcome"] == "raises":
        runtime += f" + raises at {ob['raised_at']}"
    fc = ob.get("fc_input")
    if fc and not fc["matches"]:
        runtime += f" (fc fed {fc['width']}, expects {fc['expected']})"
    ids = doc["layer_ids"] if doc["layer_ids"] is not None else "none"
    ids = f"{ids} ({'draft config' if doc['mode'] == 'draft' else 'setter'})"
    return (
        f"| {doc['architecture']} | {ids} | {static} | {runtime} | {'yes' if doc['agree'] else 'NO'} |"
        f" {doc['seconds']} | {doc['peak_rss_mb']:.0f} MB |"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="vllm", help="a profile with a [probe] table (default: vllm)")
    ap.add_argument("--engine-python")
    ap.add_argument("--method", help="the speculative method whose draft runs (default: the profile's default)")
    ap.add_argument("--only", help="comma-separated config names (file stems)")
    ap.add_argument("--extra-ids", help="one more id set, e.g. 1,2,9 (out of range)")
    ap.add_argument("--cases", help="the cases instead of the default three: MODE:IDS;... with MODE draft (through the "
                                    "draft config) or direct (the setter), IDS comma-separated or none, e.g. "
                                    "'draft:1,2,3;direct:none;draft:none'")
    ap.add_argument("--json")
    a = ap.parse_args()
    names = a.only.split(",") if a.only else sorted(p.stem for p in CONFIGS.glob("*.json"))
    cases = parse_cases(a.cases) if a.cases else list(CASES)
    if a.extra_ids:
        cases.insert(2, Case("extra", "draft", tuple(int(x) for x in a.extra_ids.split(","))))
    docs = []
    print("| architecture | ids | static boundaries / outcome | runtime | agree | seconds | peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        t0 = time.time()
        results = probe_engine(
            engine=a.engine, target_config=CONFIGS / f"{name}.json", cases=cases, engine_python=a.engine_python,
            method=a.method,
        )
        for r in results:
            print(row(r.doc), flush=True)
            docs.append(r.doc)
        print(f"<!-- {name}: {time.time() - t0:.1f} s wall including the static scan -->", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(docs, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
