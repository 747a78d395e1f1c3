"""CONTRIBUTING.md's recipes, followed in a temporary copy: its code blocks are the inputs.

The rule recipe: copy ``flowtrace/`` to a temporary folder, add the ProblemKind member the
recipe's rule needs and drop the recipe's rule file into ``checks/``, then, in a fresh
interpreter that imports the copy, the rule is discovered and its examples behave (INVALID
fires with its pinned line, kind and message; VALID stays silent), through the same harness as
every bundled rule. The profile recipe: the recipe's TOML, given as a profile file and also
dropped into a copy of ``rules/engines/``, is selected for a small engine tree written with its
names, and the tree's model row captures through the setter it names.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import flowtrace
from flowtrace import api
from flowtrace.checks.base import all_rules
from flowtrace.engines.profiles import rules_directory
from flowtrace.index.build import IndexOptions

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def _block(section: str, language: str) -> str:
    """The first ``language`` code block under the ``## section`` heading of CONTRIBUTING.md."""
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{language}\n(.*?)```", body, re.S).group(1)


def test_rule_recipe_in_a_copy_of_the_package(tmp_path):
    rule_text = _block("Add a rule", "python")
    code, name = re.search(r'code = "(FT\d{3})"\n    name = "([a-z-]+)"', rule_text).groups()
    copy = tmp_path / "flowtrace"
    shutil.copytree(Path(flowtrace.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    # step 1: the new ProblemKind member
    facts = copy / "model" / "facts.py"
    anchor = '    UNUSED_SUPPRESSION = "unused_suppression"\n'
    assert anchor in facts.read_text()
    facts.write_text(facts.read_text().replace(anchor, anchor + '    SETTER_IGNORES_IDS = "setter_ignores_ids"\n'))
    # step 2: the rule module, named after code and name
    (copy / "checks" / f"{code.lower()}_{name.replace('-', '_')}.py").write_text(rule_text)
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = [{str(tmp_path)!r}, {str(TESTS)!r}]
        import flowtrace
        assert flowtrace.__file__.startswith({str(tmp_path)!r}), flowtrace.__file__
        from pathlib import Path
        from flowtrace.checks.base import all_rules
        from test_rule_examples import HEADER_LINES, _findings
        (rule,) = [r for r in all_rules() if r.code == {code!r}]
        for i, ex in enumerate(rule.invalid):
            found = _findings(Path({str(tmp_path)!r}) / f"invalid{{i}}", ex.code, rule.code, ex.profile)
            line = ex.line + HEADER_LINES[ex.profile]
            assert [f for f in found if f.line == line and f.kind == ex.kind and ex.message in f.message], [(f.line, f.kind, f.message) for f in found]
        for i, ex in enumerate(rule.valid):
            assert not _findings(Path({str(tmp_path)!r}) / f"valid{{i}}", ex.code, rule.code, ex.profile)
        print("ok", rule.code, len(all_rules()))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["FLOWTRACE_RULES"] = str(rules_directory())  # the copy has no rules/ beside it
    out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["ok", code, str(len(all_rules()) + 1)]


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
    result = api.scan(_toy_tree(tmp_path / "tree"), profile_files=(profile,), options=IndexOptions(use_cache=False, jobs=1))
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
