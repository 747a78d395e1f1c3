"""Where the fixture engines live (importable from any test module)."""

from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures" / "engines"
SGLANG_LIKE = FIXTURES / "sglang_like"
VLLM_LIKE = FIXTURES / "vllm_like"
LMDEPLOY_LIKE = FIXTURES / "lmdeploy_like"
TRTLLM_LIKE = FIXTURES / "trtllm_like"

REAL_ENGINES_VARIABLE = "FLOWTRACE_REAL_ENGINES"


def line_of(path: Path, text: str, after: str = "") -> int:
    """The line of the first ``text`` in ``path`` (after the first ``after``): expectations
    name the fixture's own lines."""
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line) if after else 0
    return next(i for i, line in enumerate(lines) if i >= start and text in line) + 1


def real_engine(tree: str):
    """An unpacked real engine release, for the opt-in real-engine tests.

    ``FLOWTRACE_REAL_ENGINES=DIR`` (the one meaning of the variable): ``DIR`` holds unpacked
    engine wheels, one folder per release named ``NAME-VERSION`` (``DIR/sglang-0.5.23/sglang/...``,
    made by ``unzip -q sglang-0.5.23-*.whl -d DIR/sglang-0.5.23``). Skips the test when the
    variable is unset or the tree is not there.
    """
    import os

    import pytest

    root = os.environ.get(REAL_ENGINES_VARIABLE)
    if not root:
        pytest.skip(f"opt in with {REAL_ENGINES_VARIABLE}=DIR (DIR holding unpacked engine trees such as {tree}/)")
    path = Path(root) / tree
    if not path.is_dir():
        pytest.skip(f"{REAL_ENGINES_VARIABLE}={root} has no {tree}/ folder")
    return path
RULE_FIXTURES = Path(__file__).parent / "fixtures" / "rules"  # static rule fixtures (see its README)
