"""``compat --fix`` edits a draft config as a person would: the ids' value and the record, and
not one other byte. Each case below is a draft config in one JSON style with, written by hand,
the text the fix must leave (README promised "formatting is kept" while a one-line
``"architectures": [...]`` came back as three lines).

The edit in every case: ``eagle_config.eagle_aux_hidden_state_layer_ids`` becomes [0, 3, 31]
and ``"flowtrace": {"trained_boundaries": [0, 3, 31], "trained_with": "specforge",
"trained_ids": [-1, 2, 30]}`` is added (or replaced) last.
"""

from __future__ import annotations

import json

import pytest

from flowtrace.fix.draft_config import rewrite
from flowtrace.fix.json_text import set_member

KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"


def fixed(text: str) -> str:
    return rewrite(text, KEY, (0, 3, 31), (0, 3, 31), "specforge", (-1, 2, 30))


TWO_SPACES = """{
  "architectures": ["LlamaForCausalLMEagle3"],
  "eagle_config": {
    "eagle_aux_hidden_state_layer_ids": [-1, 2, 30],
    "use_aux_hidden_state": true
  },
  "target_hidden_size": 7168
}
"""
TWO_SPACES_FIXED = """{
  "architectures": ["LlamaForCausalLMEagle3"],
  "eagle_config": {
    "eagle_aux_hidden_state_layer_ids": [0, 3, 31],
    "use_aux_hidden_state": true
  },
  "target_hidden_size": 7168,
  "flowtrace": {
    "trained_boundaries": [0, 3, 31],
    "trained_with": "specforge",
    "trained_ids": [-1, 2, 30]
  }
}
"""

# json.dumps(indent=4) style: every array one item a line, so the record's arrays are too
FOUR_SPACES_SPLIT = """{
    "architectures": [
        "LlamaForCausalLMEagle3"
    ],
    "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [
            -1,
            2,
            30
        ]
    }
}"""
FOUR_SPACES_SPLIT_FIXED = """{
    "architectures": [
        "LlamaForCausalLMEagle3"
    ],
    "eagle_config": {
        "eagle_aux_hidden_state_layer_ids": [
            0,
            3,
            31
        ]
    },
    "flowtrace": {
        "trained_boundaries": [
            0,
            3,
            31
        ],
        "trained_with": "specforge",
        "trained_ids": [
            -1,
            2,
            30
        ]
    }
}"""

TABS_CRLF = (
    '{\r\n\t"architectures": ["LlamaForCausalLMEagle3"],\r\n\t"eagle_config":'
    ' {\r\n\t\t"eagle_aux_hidden_state_layer_ids": [-1,2,30]\r\n\t}\r\n}\r\n'
)
TABS_CRLF_FIXED = (
    '{\r\n\t"architectures": ["LlamaForCausalLMEagle3"],\r\n\t"eagle_config":'
    ' {\r\n\t\t"eagle_aux_hidden_state_layer_ids": [0,3,31]\r\n\t},\r\n\t"flowtrace": {\r\n\t\t"trained_boundaries":'
    ' [0, 3, 31],\r\n\t\t"trained_with": "specforge",\r\n\t\t"trained_ids": [-1, 2, 30]\r\n\t}\r\n}\r\n'
)

ONE_LINE = (
    '{"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [-1, 2, 30]}}'
)
ONE_LINE_FIXED = (
    '{"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 3, 31]}, '
    '"flowtrace": {"trained_boundaries": [0, 3, 31], "trained_with": "specforge", "trained_ids": [-1, 2, 30]}}'
)

# no ids yet, an empty eagle_config, a record from an earlier fix: the ids added in the empty
# object, the record's value replaced where it stands
EARLIER = """{
  "eagle_config": {},
  "flowtrace": {"trained_boundaries": [0, 1, 2]},
  "draft_vocab_size": 32000
}
"""
EARLIER_FIXED = """{
  "eagle_config": {
    "eagle_aux_hidden_state_layer_ids": [0, 3, 31]
  },
  "flowtrace": {"trained_boundaries": [0, 3, 31], "trained_with": "specforge", "trained_ids": [-1, 2, 30]},
  "draft_vocab_size": 32000
}
"""


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (TWO_SPACES, TWO_SPACES_FIXED),
        (FOUR_SPACES_SPLIT, FOUR_SPACES_SPLIT_FIXED),
        (TABS_CRLF, TABS_CRLF_FIXED),
        (ONE_LINE, ONE_LINE_FIXED),
        (EARLIER, EARLIER_FIXED),
    ],
    ids=[
        "two-spaces-one-line-arrays",
        "four-spaces-split-no-final-newline",
        "tabs-crlf-compact",
        "one-line-document",
        "empty-object-and-earlier-record",
    ],
)
def test_the_fix_changes_only_the_ids_and_the_record(before, after):
    assert fixed(before) == after


@pytest.mark.parametrize("before", [TWO_SPACES, FOUR_SPACES_SPLIT, TABS_CRLF, ONE_LINE])
def test_every_untouched_line_stays_byte_for_byte(before):
    newline = "\r\n" if "\r\n" in before else "\n"
    old, new = before.split(newline), fixed(before).split(newline)
    touched = {
        i
        for i, line in enumerate(old)
        if "eagle_aux_hidden_state_layer_ids" in line or line.strip() in ("-1,", "2,", "30")
    }
    kept = [line for i, line in enumerate(old) if i not in touched and line.strip() not in ("}", "]", "},", "],")]
    # only JSON's separator may join the line before the added record
    assert all(line in new or line + "," in new for line in kept)
    assert sum(1 for line in kept if line not in new) <= 1


def test_a_missing_parent_object_is_added_last():
    text = '{\n  "architectures": ["X"]\n}\n'
    out = set_member(text, KEY, [1, 2])
    assert (
        out
        == '{\n  "architectures": ["X"],\n  "eagle_config": {\n    "eagle_aux_hidden_state_layer_ids": [1, 2]\n  }\n}\n'
    )
    assert json.loads(out) == {"architectures": ["X"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2]}}


def test_the_last_of_duplicate_keys_is_the_one_edited_as_json_loads_reads_it():
    text = '{"ids": [1], "ids": [2]}'
    assert set_member(text, "ids", [7]) == '{"ids": [1], "ids": [7]}'


def test_strings_with_braces_and_escapes_are_not_confused_for_structure():
    text = '{\n  "note": "a } and a \\" and a [",\n  "ids": [1, 2]\n}\n'
    assert set_member(text, "ids", [3]) == '{\n  "note": "a } and a \\" and a [",\n  "ids": [3]\n}\n'


# -- the words around a fix, on the founding story's shape ------------------------------------
# sglang_like's GammaForCausalLM (gamma.py:53) adds one only when the first id is 1, else keeps
# the ids; its layers record their input (index i = boundary b = i). A SpecForge draft trained
# on ids [-1, 2, 30] (b = [0, 3, 31]) needs ids [0, 3, 31] there.


def _deployment(tmp_path):
    from click.testing import CliRunner

    from fixture_paths import SGLANG_LIKE
    from flowtrace.cli.main import main

    target = tmp_path / "target.json"
    target.write_text(
        json.dumps({"architectures": ["GammaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 64}),
        encoding="utf-8",
    )
    draft = tmp_path / "draft.json"
    draft.write_text(TWO_SPACES.replace("7168", "64"), encoding="utf-8")

    def run(*extra):
        return CliRunner().invoke(
            main,
            [
                "compat",
                str(SGLANG_LIKE),
                "--no-cache",
                "--jobs",
                "1",
                "--target-config",
                str(target),
                "--draft-config",
                str(draft),
                *extra,
            ],
        )

    return run, draft


def test_after_a_fix_the_words_say_trained_boundaries(tmp_path):
    run, draft = _deployment(tmp_path)
    fixed_run = run("--fix")
    assert fixed_run.exit_code == 0, fixed_run.output
    assert "the trained boundaries [0, 3, 31] are recorded under flowtrace.trained_boundaries" in fixed_run.stderr
    assert fixed_run.stdout.startswith("MATCH"), "--fix ends with the verdict on the rewritten config"
    assert '"eagle_aux_hidden_state_layer_ids": [0, 3, 31],' in draft.read_text(encoding="utf-8")
    again = run()
    assert again.exit_code == 0 and again.stdout.startswith("MATCH")
    trained_line = again.stdout.splitlines()[1]
    assert (
        "trained boundaries recorded by `compat --fix`" in trained_line and "ids" not in trained_line.split(":", 1)[0]
    )


def test_trained_with_speculators_on_a_specforge_draft_says_where_its_ids_are(tmp_path):
    run, _ = _deployment(tmp_path)
    res = run("--trained-with", "speculators")
    assert res.exit_code == 1, res.output
    text = res.stdout
    assert "no speculators ids in the draft config (key eagle_aux_hidden_state_layer_ids)" in text
    where = (
        "its ids [-1, 2, 30] are under eagle_config.eagle_aux_hidden_state_layer_ids (the engine reads them), where"
        " specforge drafts keep them: trained with specforge?"
    )
    assert text.count(where) == 1, "said once, not once per reader of the note"
    assert "no ids in the draft config:" not in text
    # speculators' default [2, 16, 29] is served by ids [2, 16, 29] and by [1, 15, 28]: one fix
    assert [line for line in text.splitlines() if line.lstrip().startswith("fix:")] == [
        "  fix: set eagle_config.eagle_aux_hidden_state_layer_ids = [2, 16, 29] in the draft config (weights unchanged)"
    ]
    assert (
        "  also: [1, 15, 28] under eagle_config.eagle_aux_hidden_state_layer_ids in the draft config serve the same"
        " layout (verified too)"
        in text
    )


def test_fix_diff_goes_to_the_output_file(tmp_path):
    run, draft = _deployment(tmp_path)
    before = draft.read_text(encoding="utf-8")
    res = run("--fix", "--diff", "-o", tmp_path / "fix.diff")
    assert res.exit_code == 1 and res.stdout == ""
    assert '+    "eagle_aux_hidden_state_layer_ids": [0, 3, 31],' in (tmp_path / "fix.diff").read_text(encoding="utf-8")
    assert draft.read_text(encoding="utf-8") == before
