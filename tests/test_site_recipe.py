"""The "add a capture-site shape" recipe, followed in a temporary copy of the package.

Recipe: (1) one new module in ``flowtrace/index/sites/`` defining ``SHAPE``, with VALID /
INVALID example loops; (2) one new ``Mechanism`` member when the shape records in a new way.
Nothing else is edited: the package walk registers the shape, the loop analysis runs it, and
the shape tests run its examples. The new shape here is a store into a slot of a local list
(``outs[k] = h`` under a membership test), which no shape of the package finds today."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import flowtrace
from flowtrace.engines.profiles import rules_directory

PACKAGE = Path(flowtrace.__file__).resolve().parent

SHAPE_MODULE = '''
"""A store into a slot of a local list under a membership test: ``outs[k] = h``."""

from __future__ import annotations

import ast

from flowtrace.index.sites.base import Found, SiteShape
from flowtrace.index.sites.context import LoopContext, side_point
from flowtrace.index.syntax import start_of
from flowtrace.model import facts as F


class SlotShape(SiteShape):
    name = "slot"
    mechanisms = (F.Mechanism.SLOT,)
    rank = 45
    summary = "a slot of a local list written under a membership test"
    VALID = ((
        """
        def forward(self, h):
            outs = []
            for i, layer in enumerate(self.layers):
                h = layer(h)
                if i in self.layers_to_capture:
                    outs[0] = h
            return h, outs
        """,
        ((F.Mechanism.SLOT, F.Point.OUTPUT),),
    ),)
    INVALID = ("""
        def forward(self, h):
            outs = []
            for i, layer in enumerate(self.layers):
                h = layer(h)
                outs[0] = h
            return h, outs
        """,)

    def find(self, ctx: LoopContext) -> list[Found]:
        found = []
        for stmt, tests in ctx.assignments():
            target = stmt.targets[0]
            if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                    and ctx.forward.containers.get(target.value.id) == "list"):
                continue
            test = next((t for t in tests if ctx.forward.condition_attribute(t)), None)
            if test is None:
                continue
            label = ctx.forward.condition_label(test, ctx.index)
            after = start_of(stmt) > start_of(ctx.layer_call)
            fact = ctx.fact(stmt, F.Mechanism.SLOT, side_point(after, label), ctx.forward.condition_attribute(test),
                            target.value.id, "a list slot", reach=ctx.reach(after), captured=ctx.file.code(stmt.value),
                            label=label)
            found.append(Found(0, fact))
        return found


SHAPE = SlotShape()
'''

CHECK = """
import ast, json, textwrap
from pathlib import Path
from flowtrace.engines.profiles import Conventions, select_profiles
from flowtrace.index import sites
from flowtrace.index.visitors import FileAnalyzer

conv = Conventions.merge(select_profiles(Path("."), None))
shape = next(s for s in sites.registered() if s.name == "slot")
out = {"registered": [s.name for s in sites.registered()], "valid": [], "invalid": []}
for source, _ in shape.VALID:
    text = "class M:\\n" + textwrap.indent(textwrap.dedent(source).strip("\\n"), "    ") + "\\n"
    found = FileAnalyzer("p/m.py", text, ast.parse(text), conv).facts().capture_sites
    out["valid"] += [[str(s.mechanism), str(s.point)] for s in found]
for source in shape.INVALID:
    text = "class M:\\n" + textwrap.indent(textwrap.dedent(source).strip("\\n"), "    ") + "\\n"
    found = FileAnalyzer("p/m.py", text, ast.parse(text), conv).facts().capture_sites
    out["invalid"] += [[str(s.mechanism), str(s.point)] for s in found]
print(json.dumps(out))
"""


def test_a_new_shape_is_one_module_and_one_enum_member(tmp_path: Path) -> None:
    copy = tmp_path / "flowtrace"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "index" / "sites" / "slot.py").write_text(SHAPE_MODULE)
    facts = copy / "model" / "facts.py"
    text = facts.read_text()
    anchor = '    UNKNOWN = "unknown"  # no site, or a spelling no mechanism names\n'
    assert anchor in text  # the recipe's step 2: one member in Mechanism
    facts.write_text(text.replace(anchor, '    SLOT = "slot"  # outs[k] = h\n' + anchor))
    env = dict(os.environ, PYTHONPATH=str(tmp_path), FLOWTRACE_RULES=str(rules_directory()))
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHECK)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["registered"] == ["callback", "dict", "flagged", "hook", "buffer", "slot", "append", "helper"]  # by rank
    assert out["valid"] == [["slot", "output"]]  # recorded after layer i, tested with i: boundary i + 1
    assert out["invalid"] == []
