"""CONTRIBUTING.md's recipes, followed in a temporary copy: its code blocks are the inputs.

The rule recipe: copy the repository's tracked files to a temporary folder, follow the steps
with the recipe's blocks (the ProblemKind member and its usual consequence, the rule module,
its snapshot), run the commands the recipe gives to refresh the generated files, then run the
rule suite in the copy (discovery, every example, the snapshots, the rule metadata, the
freshness of docs/rules.md and reports/example.html): a rule made by following the recipe
passes what every bundled rule passes, and the recipe names every file to refresh. The
profile recipe: the recipe's TOML, given as a profile file and also dropped into a copy of
``rules/engines/``, is selected for a small engine tree written with its names, and the
tree's model row captures through the setter it names.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path


from flowtrace import api
from flowtrace.engines.profiles import rules_directory
from flowtrace.index.build import IndexOptions

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def _blocks(section: str, language: str) -> list[str]:
    """The ``language`` code blocks under the ``## section`` heading of CONTRIBUTING.md."""
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", body, re.S)


def _block(section: str, language: str) -> str:
    """The first ``language`` code block under the ``## section`` heading."""
    return _blocks(section, language)[0]


def _for_file(section: str, path: str) -> str:
    """The python block of ``section`` whose first line is ``# <path>...``, without that line."""
    (found,) = [b for b in _blocks(section, "python") if b.startswith(f"# {path}")]
    return found.split("\n", 1)[1]


def _rule_text() -> str:
    (found,) = [b for b in _blocks("Add a rule", "python") if b.startswith('"""FT')]
    return found


def _copy_of_the_repository(target: Path) -> Path:
    """The files a clone holds (git's list when there is one, else the tree less build output)."""
    try:
        listed = (
            subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
            .stdout.decode()
            .split("\0")
        )
    except (OSError, subprocess.CalledProcessError):
        listed = [
            p.relative_to(REPO).as_posix()
            for p in REPO.rglob("*")
            if p.is_file() and not {".git", ".venv", "__pycache__"} & set(p.parts)
        ]
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / rel)
    return target


def _insert_after(path: Path, anchor: re.Pattern[str], text: str) -> None:
    """Insert ``text`` after the first line ``anchor`` matches."""
    source = path.read_text(encoding="utf-8")
    match = anchor.search(source)
    assert match, (path, anchor.pattern)
    end = source.index("\n", match.end()) + 1
    path.write_text(source[:end] + text + source[end:], encoding="utf-8")


# The rule suite: every test of a property all rules share, then the new rule's own cases.
RULE_SUITE = (
    "tests/test_rule_discovery.py",
    "tests/test_rule_examples.py::test_every_invalid_example_pins_line_kind_and_message",
    "tests/test_rule_examples.py::test_every_invalid_example_pins_consequence_and_severity",
    "tests/test_rule_examples.py::test_every_rule_has_both_kinds_of_example",
    "tests/test_rule_snapshots.py::test_every_rule_has_a_snapshot",
    "tests/test_rules.py",
    "tests/test_rule_fixtures.py",
    "tests/test_check_contract.py::test_committed_rules_doc_is_fresh",
    "tests/test_html_report.py::test_example_report_is_fresh",
)
OWN_CASES = ("tests/test_rule_examples.py", "tests/test_rule_snapshots.py")


def _pytest(copy: Path, env: dict[str, str], *args: str) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return run.stdout


def test_a_rule_made_by_following_the_recipe_passes_the_rule_suite(tmp_path):
    rule_text = _rule_text()
    code, name = re.search(r'code = "(FT\d{3})"\n    name = "([a-z-]+)"', rule_text).groups()
    copy = _copy_of_the_repository(tmp_path / "repo")
    # step 1: the ProblemKind member (after the enum's first member); the rule declares its
    # consequence itself (step 2)
    facts = copy / "flowtrace/model/facts.py"
    _insert_after(
        facts,
        re.compile(r"^class ProblemKind\(.*?^    [A-Z_]+ = \".*?\"$", re.M | re.S),
        _for_file("Add a rule", "flowtrace/model/facts.py"),
    )
    # steps 2 and 3: the rule module, named after its code and name, with its examples
    (copy / "flowtrace/checks" / f"{code.lower()}_{name.replace('-', '_')}.py").write_text(rule_text, encoding="utf-8")
    # step 4: the snapshot
    snapshot = f"tests/fixtures/rules/codes/{code.lower()}.py"
    (copy / snapshot).write_text(_for_file("Add a rule", snapshot), encoding="utf-8")
    # step 5: the recipe's own commands refresh the generated files
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLOWTRACE_RULES")}
    env["PYTHONPATH"] = str(copy)  # the copy's flowtrace, not the installed one
    for command in _block("Add a rule", "bash").strip().splitlines():
        argv = command.split()
        assert argv[0] == "python", command
        run = subprocess.run([sys.executable, *argv[1:]], cwd=copy, env=env, capture_output=True, text=True)
        assert run.returncode == 0, (command, run.stdout[-2000:], run.stderr[-2000:])
    assert code in (copy / "docs/rules.md").read_text(encoding="utf-8")
    assert code in (copy / "reports/example.html").read_text(encoding="utf-8")
    # the rule suite, in the copy
    out = _pytest(copy, env, "-x", *RULE_SUITE)
    assert "passed" in out and "failed" not in out
    own = _pytest(copy, env, "-k", code, *OWN_CASES)
    counts = re.search(r"(\d+) passed", own)
    # one VALID and one INVALID example, and the snapshot
    assert counts and int(counts.group(1)) == 3, own[-2000:]


TOY_MODEL = '''\
class Module:
    def __call__(self, *args):
        return self.forward(*args)


class ToyModel(Module):
    def __init__(self, config):
        self.layers = []
        self.aux_layers = []

    def forward(self, hidden_states):
        aux = []
        for i in range(len(self.layers)):
            if i in self.aux_layers:
                aux.append(hidden_states)
            hidden_states = self.layers[i](hidden_states)
        return hidden_states, aux


class ToyForCausalLM(Module):
    def __init__(self, config):
        self.model = ToyModel(config)

    def forward(self, hidden_states):
        return self.model(hidden_states)

    def set_aux_layers(self, layer_ids):
        self.model.aux_layers = [i + 1 for i in layer_ids]


EntryClass = ToyForCausalLM
'''


def _toy_tree(root: Path) -> Path:
    models = root / "toyengine" / "models"
    models.mkdir(parents=True)
    (root / "toyengine" / "__init__.py").write_text("")
    (models / "__init__.py").write_text("")
    (models / "toy.py").write_text(TOY_MODEL)
    return root


def _toy_row(result):
    (row,) = [r for r in result.rows if r.name == "ToyForCausalLM"]
    return row


def test_profile_recipe_as_a_profile_file(tmp_path):
    profile = tmp_path / "toyengine.toml"
    profile.write_text(_block("Add an engine profile", "toml"))
    result = api.scan(
        _toy_tree(tmp_path / "tree"), profile_files=(profile,), options=IndexOptions(use_cache=False, jobs=1)
    )
    assert "toyengine" in [p.name for p in result.profiles]
    row = _toy_row(result)
    # read from TOY_MODEL: set_aux_layers adds one, ToyModel records before layer i
    assert row.registered and row.capture is not None
    assert row.capture.setter.method == "set_aux_layers"
    assert row.capture.effective_transform == "plus_one"


def test_profile_recipe_dropped_into_rules_engines(tmp_path, monkeypatch):
    rules = tmp_path / "rules"
    shutil.copytree(rules_directory(), rules)
    (rules / "engines" / "toyengine.toml").write_text(_block("Add an engine profile", "toml"))
    monkeypatch.setenv("FLOWTRACE_RULES", str(rules))
    result = api.scan(_toy_tree(tmp_path / "tree"), options=IndexOptions(use_cache=False, jobs=1))
    assert [p.name for p in result.profiles] == ["toyengine"]
    assert _toy_row(result).capture.setter.method == "set_aux_layers"
