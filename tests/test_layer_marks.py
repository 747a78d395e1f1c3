"""Marks a setter sets on the layers it picks (issue 25 item 7, the serving path): which are
never cleared, and whether the class reads them back. Expectations from the sources below."""

from __future__ import annotations

import textwrap

import pytest

from flowtrace.engines.profiles import Conventions, load_all
from flowtrace.index.parse import analyze_bytes

CONV = Conventions.merge([p for p in load_all() if p.name == "sglang"])

HEAD = """\
class M:
    def forward(self, h):
        for layer in self.layers:
            h = layer(h, keep=getattr(layer, "_mark", False))
        return h

    def set_eagle3_layers_to_capture(self, ids):
"""


def _marks(body: str):
    source = HEAD + textwrap.indent(textwrap.dedent(body), " " * 8)
    ff = analyze_bytes("sglang/srt/models/m.py", source.encode(), CONV)
    (setter,) = ff.setters
    return setter.marks


def test_a_mark_only_ever_turned_on_is_stale_and_read_back():
    (mark,) = _marks("""\
        self.layers_to_capture = ids
        for i in ids:
            setattr(self.layers[i], "_mark", True)
    """)
    assert (mark.mark, mark.container, mark.location.line, mark.cleared) == ("_mark", "self.layers", 10, False)
    assert mark.read_at is not None and mark.read_at.line == 4


@pytest.mark.parametrize(
    "body",
    [
        "for layer in self.layers:\n    layer._mark = False\nfor i in ids:\n    self.layers[i]._mark = True\n",
        (
            "for i, layer in enumerate(self.layers):\n"
            "    setattr(layer, '_mark', i in ids)\n"
            "for i in ids:\n"
            "    self.layers[i]._mark = True\n"
        ),
        "for layer in self.layers:\n    delattr(layer, '_mark')\nfor i in ids:\n    self.layers[i]._mark = True\n",
    ],
)
def test_a_setter_that_clears_the_others_first_is_not_stale(body):
    (mark,) = _marks(body)
    assert mark.cleared


def test_a_flag_on_self_is_no_layer_mark():
    assert _marks("self.capture = True\nfor i in ids:\n    self.chosen = True\n") == ()
