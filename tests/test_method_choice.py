"""Which method a draft config is for (analysis/method_choice.py) when its fields are not the
shapes a config.json gives them: a draft config is user input, read as JSON."""

from __future__ import annotations

import pytest

from flowtrace.analysis.method_choice import draft_method
from flowtrace.engines.methods import SpecMethod

# One method named both ways a draft can say it: an architecture and a key of its own.
DFLASH = SpecMethod("dflash", label="DFlash", draft_architectures=("DFlashDraftModel",), detect_keys=("dflash_config",))


@pytest.mark.parametrize("value", [5, True, 2.5])
def test_an_architectures_field_that_is_no_list_is_no_crash(value):
    # json.loads gives a number here as readily as a list: it names no architecture (iterating
    # it raised TypeError, a traceback out of `compat` without --method)
    assert draft_method([DFLASH], {"architectures": value}) is None
    choice = draft_method([DFLASH], {"architectures": value, "dflash_config": {}})
    assert choice is not None and choice.method is DFLASH
    assert choice.why == "the draft config holds dflash_config"


def test_only_a_list_names_architectures_as_compat_reads_them():
    # an object's keys are not an architectures list: compat's own reader of the field
    # (_draft_markers) takes only a list, and the method is chosen on the same reading
    assert draft_method([DFLASH], {"architectures": {"DFlashDraftModel": 1}}) is None
    listed = draft_method([DFLASH], {"architectures": ["DFlashDraftModel"]})
    assert listed is not None and listed.why == "the draft's architecture DFlashDraftModel is a DFlash draft class"
