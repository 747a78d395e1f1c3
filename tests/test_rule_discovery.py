"""Rules are found by walking ``flowtrace.checks``: one rule per ``ftNNN_<name>.py`` module.

A rule module that is not imported anywhere used to be silently never run; now a file in the
package is imported because it is there, and these tests fail when a rule module defines no rule
(or a rule of another code), when a helper module defines one, or when a registered rule comes
from outside the walked modules.
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import flowtrace
import flowtrace.checks as checks
from flowtrace.checks.base import Rule, all_rules

RULE_MODULE = re.compile(r"^ft(\d{3})_([a-z0-9_]+)$")


def _rules_defined_in(module_name: str) -> list[type[Rule]]:
    module = importlib.import_module(module_name)
    return [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, Rule) and v is not Rule and v.__module__ == module_name
    ]


def test_each_rule_module_defines_exactly_its_rule():
    for full in checks.module_names():
        short = full.rsplit(".", 1)[1]
        m = RULE_MODULE.match(short)
        defined = _rules_defined_in(full)
        if m is None:
            assert not defined, f"{short} is not named ftNNN_<rule name> but defines {[r.code for r in defined]}"
            continue
        assert len(defined) == 1, f"{short} must define exactly one rule, defines {[r.__name__ for r in defined]}"
        rule = defined[0]
        assert rule.code == f"FT{m.group(1)}", (short, rule.code)
        assert rule.name.replace("-", "_") == m.group(2), (short, rule.name)


def test_every_registered_rule_comes_from_a_walked_module():
    walked = set(checks.module_names())
    rules = all_rules()
    assert len(rules) == len({r.code for r in rules})
    for rule in rules:
        assert rule.__module__ in walked, f"{rule.code} registered from {rule.__module__}, outside the package walk"
    assert len(rules) == sum(1 for m in walked if RULE_MODULE.match(m.rsplit(".", 1)[1]))


NEW_RULE = '''\
"""FT099 example-new-rule: a rule added by dropping a file into the package."""

from __future__ import annotations

from flowtrace.checks.base import Rule


class ExampleNewRule(Rule):
    code = "FT099"
    name = "example-new-rule"
    summary = "Added by the discovery test."
    rationale = "A new file in flowtrace/checks is a new rule, with no list to edit."
    fix = "Nothing."

    def check(self, result):
        return iter(())
'''


def test_a_new_rule_file_is_discovered_without_other_edits(tmp_path):
    copy = tmp_path / "flowtrace"
    shutil.copytree(Path(flowtrace.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "checks" / "ft099_example_new_rule.py").write_text(NEW_RULE)
    script = textwrap.dedent(
        """
        import flowtrace
        from flowtrace.checks.base import all_rules
        assert flowtrace.__file__.startswith(%r), flowtrace.__file__
        print(",".join(r.code for r in all_rules()))
        """ % str(tmp_path)
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n{script}"],
        capture_output=True,
        text=True,
        check=True,
    )
    codes = out.stdout.strip().split(",")
    assert "FT099" in codes
    assert len(codes) == len(all_rules()) + 1


def test_rule_codes_are_read_from_module_names_without_importing_a_rule():
    """The selection is checked before the index runs; a cold scan imports the rules later, while
    its workers parse. So the codes come from the module names (which the tests above tie to the
    rules they define), and asking for them imports no rule module."""
    program = (
        "import sys\n"
        "from flowtrace.lint.config import rule_codes\n"
        "print(','.join(rule_codes()))\n"
        "print(sorted(m for m in sys.modules if m.startswith('flowtrace.checks.ft')))\n"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout
    codes, imported = out.splitlines()
    assert imported == "[]"
    assert codes.split(",") == [r.code for r in all_rules() if r.__module__.startswith("flowtrace.checks.ft")]
