"""The layout language of training conventions and trainers' defaults (docs/drafts.md), evaluated
by the safe evaluator of engine code (flowtrace.model.safe_eval).

Every shipped layout is pinned here by its formula and by ids worked out by hand from it, so a
layout the evaluator reads differently, or a shipped formula that changes, fails; the DFlash
spread is pinned against SpecForge's own configs in test_training_dflash.py.
"""

from __future__ import annotations

import pytest

from flowtrace.engines.drafts import shipped_catalogue
from flowtrace.engines.training import LayoutError, layout, load_conventions
from flowtrace.errors import ProfileError
from flowtrace.model.safe_eval import evaluate

EAGLE = "[2, L // 2, L - 3]"
SPECFORGE = "[1, L // 2 - 1, L - 4]"
DFLASH = "[L // 2] if N == 1 else [round(1 + i * (L - 4) / (N - 1)) for i in range(N)]"

# L -> ids, by hand: L // 2 floors (61 // 2 = 30), L - 3 and L - 4 are the last layers but two and three.
BY_FORMULA = {
    EAGLE: {32: (2, 16, 29), 36: (2, 18, 33), 61: (2, 30, 58), 80: (2, 40, 77)},
    SPECFORGE: {32: (1, 15, 28), 36: (1, 17, 32), 61: (1, 29, 57), 80: (1, 39, 76)},
}
CONVENTIONS = {
    "boundary": EAGLE, "eagle": EAGLE, "hf-index": EAGLE, "speculators": EAGLE, "specforge": SPECFORGE,
    "dflash": DFLASH,
}
TRAINERS = {
    "SpecForge default": SPECFORGE, "TorchSpec default": SPECFORGE, "EAGLE reference": EAGLE,
    "speculators default": EAGLE,
}


def test_every_shipped_convention_and_trainer_is_pinned_here():
    assert {name: c.default_ids for name, c in load_conventions().items()} == CONVENTIONS
    assert {t.name: t.ids for t in shipped_catalogue().trainers} == TRAINERS


@pytest.mark.parametrize("expression", sorted((set(CONVENTIONS.values()) | set(TRAINERS.values())) - {DFLASH}))
@pytest.mark.parametrize("layers", [32, 36, 61, 80])
def test_the_shipped_layouts_give_the_ids_worked_out_by_hand(expression, layers):
    assert layout(expression, layers) == BY_FORMULA[expression][layers]
    assert layout(expression, layers, 5) == BY_FORMULA[expression][layers]  # N is not read


def test_the_dflash_spread_by_hand():
    # L = 36, N = 3: 1 + i * 32 / 2 = 1, 17, 33; N = 4: 1 + i * 32 / 3 = 1, 11.67, 22.33, 33
    assert layout(DFLASH, 36, 3) == (1, 17, 33)
    assert layout(DFLASH, 36, 4) == (1, 12, 22, 33)
    assert layout(DFLASH, 61, 1) == (30,)


def test_a_layout_and_engine_code_share_one_arithmetic():
    # the same line in a runner (engine code) and in a training profile gives the same ids
    assert evaluate("[round(1 + i * (L - 4) / (N - 1)) for i in range(N)]", {"L": 16, "N": 8}) == [
        1, 3, 4, 6, 8, 10, 11, 13,
    ]
    assert layout(DFLASH, 16, 8) == (1, 3, 4, 6, 8, 10, 11, 13)


@pytest.mark.parametrize(("expression", "ids"), [
    ("(2, L // 2)", (2, 16)),  # a tuple is a list of ids too
    ("[-1, L - 1]", (-1, 31)),  # the embedding in layer_output ids
    ("[round(L / 3), round(-(L / 3)) + L]", (11, 21)),  # 10.67 -> 11; -10.67 -> -11, + 32
    ("[i * 3 for i in range(round(L / 10))]", (0, 3, 6)),  # round(3.2) = 3 items
    ("[1] if L >= 40 else [2]", (2,)),
    ("[1] if L != 32 else [N for N in range(2)]", (0, 1)),  # a comprehension's own N needs no draft count
])
def test_what_the_language_takes(expression, ids):
    assert layout(expression, 32) == ids


@pytest.mark.parametrize(("expression", "words"), [
    # Python's range refuses a float, even a whole one: a count must be an integer
    ("[i for i in range(L / 3)]", "cannot evaluate range(L / 3)"),
    ("[i for i in range(L / 2)]", "cannot evaluate range(L / 2)"),
    ("[1.5, L]", "only integers, L, N, +, -, *, //, / and round() are allowed, found 1.5"),
    ("[True]", "found True"),
    ("[L, M - 1]", "unknown name 'M'"),
    ("[i for i in range(3)] if i == 1 else [1]", "unknown name 'i'"),  # the loop variable is the loop's own
    ("[open(L)]", "found open(L)"),
    ("[int(L / 2)]", "found int(L / 2)"),  # the documented language rounds; int() is not in it
    ("[len(L)]", "found len(L)"),
    ("[round(L / 2, 1)]", "found round(L / 2, 1)"),
    ("[L % 3]", "found L % 3"),
    ("[L ** 2]", "found L ** 2"),
    ("[(L / 2) // 1]", "cannot evaluate L / 2 // 1"),  # a float in Python: no id
    ("[L / 3]", "must be integers"),
    ("[L // (N - 5)]", "division by zero"),
    ("[N]", "needs N"),
    ("[x for x in range(3) if x]", "a comprehension is"),
    ("[1] if L else [2]", "one comparison"),
    ("[1] * 2", "expected a list"),
    ("[1, 2", "not an expression"),
    ("[i for i in range(1000000 * L)]", "(too large)"),  # the evaluator's bounds hold here too
])
def test_a_layout_outside_the_language_is_a_one_line_layout_error(expression, words):
    with pytest.raises(LayoutError) as caught:
        layout(expression, 32, 5 if "N - 5" in expression else None)
    message = str(caught.value)
    assert words in message
    assert "\n" not in message


def test_a_range_of_a_quotient_in_a_profile_is_a_profile_error_naming_file_and_expression(tmp_path):
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "spread.toml").write_text(
        '[training]\nname = "spread"\ndescription = "d"\nlayer_id_keys = ["ids"]\nmeaning = "boundary"\n'
        'default_ids = "[i for i in range(L / 8)]"\n',
        encoding="utf-8",
    )
    with pytest.raises(ProfileError) as caught:
        load_conventions(tmp_path)
    message = str(caught.value)
    assert "spread.toml" in message and "[i for i in range(L / 8)]" in message and "range(L / 8)" in message
    assert "\n" not in message
