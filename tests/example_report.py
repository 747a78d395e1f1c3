"""The committed example report, ``reports/example.html``: a scan of the sglang-like fixture.

``python tests/example_report.py`` rewrites it; ``tests/test_html_report.py`` fails when it is stale.
It lives with the tests (not in the package) because it reads the checkout's fixtures.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from flowtrace import api  # noqa: E402
from flowtrace.index.build import IndexOptions  # noqa: E402
from flowtrace.render.html import render_html  # noqa: E402
from flowtrace.render.report_data import report_document  # noqa: E402

EXAMPLE_FIXTURE = "tests/fixtures/engines/sglang_like"
EXAMPLE_REPORT = "reports/example.html"


def example_document() -> dict[str, Any]:
    """The scan of the sglang-like fixture with every machine-dependent value pinned: a
    relative root and zero seconds, so the example is the same bytes on every machine."""
    result = api.scan(REPO_ROOT / EXAMPLE_FIXTURE, options=IndexOptions(use_cache=False, jobs=1))
    # The same document `flowtrace report` / api.html_report render: scan + paths, examples,
    # graph, rule texts and snippets.
    doc = report_document(result, api.findings(result))
    doc["root"] = EXAMPLE_FIXTURE
    doc["stats"] = {**doc["stats"], "seconds": 0, "files_from_cache": 0}
    return doc


def render_example(doc: dict[str, Any] | None = None) -> str:
    return render_html(
        doc if doc is not None else example_document(), title="flowtrace example report — sglang-like fixture"
    )


def regenerate_example(path: str | Path | None = None) -> Path:
    """Rewrite ``reports/example.html``; run after changing the report or the fixture."""
    from flowtrace.sources.output import write_atomic

    target = Path(path) if path else REPO_ROOT / EXAMPLE_REPORT
    write_atomic(target, render_example())
    return target



if __name__ == "__main__":
    print(regenerate_example(sys.argv[1] if len(sys.argv) > 1 else None), file=sys.stderr)
