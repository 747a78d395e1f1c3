"""``docs/drafts.md``: the draft catalogue's schema and its entries, generated from the data.

Regenerate with ``python -m flowtrace.render.drafts_doc docs/drafts.md`` after editing
``rules/drafts/*.toml``; a test keeps the committed file equal to what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from flowtrace.engines.drafts import DraftCatalogue, load_catalogue

GENERATOR_COMMAND = "python -m flowtrace.render.drafts_doc docs/drafts.md"

_SCHEMA = """\
# The draft catalogue

<!-- Generated from rules/drafts/*.toml by `{command}`; do not edit by hand. -->

Which layer ids "a draft can send" is a fact about the drafts people ship. flowtrace grades every
finding that depends on ids against this catalogue (docs/rules.md): a finding names the published
drafts of the classes it affects and takes the worst of what they receive; a convention that
differs from the engine's majority but serves its own family's drafts is `fragile`; a capability no
draft asks for is `info`. A family with no published draft here is measured against the trainers'
default layouts written in the engine's own id convention. Drafts are matched to model classes by
architecture (the names the engine's registry serves a class under), never by a name in code.

The data lives in `rules/drafts/*.toml` (shipped in the wheel). Add your own drafts with
`--drafts FILE` (check, scan) or `[tool.flowtrace] drafts = ["file.toml"]`; an entry with the name
of a shipped one replaces it. `flowtrace compat PATH --draft NAME` checks one entry against a tree.

## Schema

A file holds an optional `[family]` table (`name`: the family's display name), `[[draft]]`
entries and `[[trainer]]` entries. Unknown keys are errors (one line naming the file and entry).

`[[draft]]` (one published draft, or a trainer's published configuration):

| key | type | meaning |
|---|---|---|
| `name` | str | unique name (a Hugging Face id, or `trainer/config-name`); `compat --draft NAME` |
| `target` | str | the target checkpoint |
| `architectures` | list | the target's registry architecture names (matched to model classes) |
| `num_hidden_layers` | int | the target's layer count L; may be left out only when `confirmed = false` |
| `method` | str | the speculative method (default `eagle3`; `dflash`, `dspark`, ... are data too) |
| `trainer` | str | who trained it (SpecForge, EAGLE, speculators, TorchSpec, Model-Optimizer, ...) |
| `convention` | str | a training convention of `rules/training/` saying what the ids mean (and the default layout \
when there are none) |
| `ids` | list | the ids exactly as the draft config writes them; left out: none, the engine's default applies |
| `key` | str | the dotted draft-config key the ids are written under (required with `ids`) |
| `trained_boundaries` | list | the boundaries it was trained on, when neither the ids nor the convention's default \
say it |
| `target_hidden_size` | int | the target's hidden size (the fc width is the number of states times it) |
| `states` | int | the number of target states the draft's fc concatenates, when stated |
| `draft_architectures` | list | the draft config's own `architectures`: the engine's draft class registered under \
them loads it (FT029 and `compat` check that class's fc against the draft's number of states) |
| `source` | str | where the facts were read: a repository file at a commit, a model card, a pull request |
| `see` | list | further addresses |
| `confirmed` | bool | default true; `false` with `unconfirmed = "why"` when a fact was not read (such entries are \
listed, usable with `compat --draft`, and left out of grading) |
| `note` | str | how a fact was established when it took more than one source |

`[[trainer]]` (a trainer's default layout): `name`, `convention`, `ids` (an expression in L such as
`[1, L // 2 - 1, L - 4]`), `writes_ids` (whether the trainer writes them into the draft config;
then `key`), `method`, `source`.

Every entry's ids must be valid for its layer count under its convention's `meaning` (see
[Training conventions](#training-conventions)): "output of layer i" ids run from -1 (the embedding)
to L - 1, boundaries and HF indices from 0 to L; no duplicates.

A default layout is a small expression: integers, `L` (the target's layer count), `N` (the draft's
own layer count, for a trainer that spreads one target layer per draft layer), `+ - * // /`,
`round()` (halves to even, as Python's), `[expr for i in range(count)]` and `A if N == 1 else B`;
the ids it gives must be integers. It is evaluated by the same evaluator as engine code: `/` is
exact, and a quotient, as Python's float would, is no id, no `range()` count and takes no `//`
(`round()` it first); anything else is refused with a one-line error naming what is not allowed.
"""

_CONVENTIONS = """## Training conventions

What a draft's ids meant when it was trained (`rules/training/*.toml`, one `[training]` table a
file): `meaning` maps an id to a boundary (`layer_output`: b = i + 1, -1 the embedding;
`boundary`: b = i; `hf_index`: b = k, index L being the post-norm state); `layer_id_keys` are the
draft-config keys it writes them under; `default_ids` is the layout its trainer takes when a draft
names none; `detect_keys` mark a draft config of that format; `layers_key` and `draft_layers_key`
name the draft-config keys holding the target's layer count the default was computed for (absent:
the target's own) and the draft's layer count (`N`). `compat` takes the convention named by
`--trained-with`, else the one whose format key the draft holds (the convention of the method it
answers for first: a profile's `[methods.*] training`), else that method's, else `specforge`.

| convention | ids mean | keys | default when the draft names none | format keys |
|---|---|---|---|---|
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _link(url: str) -> str:
    if not url.startswith("http"):
        return _cell(url)
    short = url.split("://", 1)[1]
    parts = short.split("/")
    if "github.com" in parts[0] and "blob" in parts:
        at = parts.index("blob")
        short = f"{'/'.join(parts[1:3])}@{parts[at + 1][:7]}:{'/'.join(parts[at + 2:])}"
    elif "github.com" in parts[0]:
        short = "/".join(parts[1:])
    elif "huggingface.co" in parts[0]:
        short = "hf:" + "/".join(parts[1:])
    return f"[{_cell(short)}]({url})"


def drafts_markdown(catalogue: DraftCatalogue | None = None) -> str:
    """The whole ``docs/drafts.md``."""
    catalogue = catalogue or load_catalogue()
    lines = [_SCHEMA.format(command=GENERATOR_COMMAND), "## Trainers' default layouts", "",
             "| trainer default | convention | ids | written into the config | source |", "|---|---|---|---|---|"]
    for t in catalogue.trainers:
        written = f"yes, `{t.key}`" if t.writes_ids else "no (the engine's default applies)"
        lines.append(f"| {_cell(t.name)} | {t.convention} | `{t.ids}` | {written} | {_link(t.source)} |")
    lines += ["", _CONVENTIONS.rstrip("\n")]
    for c in sorted(catalogue.conventions.values(), key=lambda c: c.name):
        default = f"`{c.default_ids}`" + (f" (N = the draft's `{c.draft_layers_key}`)" if c.draft_layers_key else "")
        if c.layers_key:
            default += f" (L = the draft's `{c.layers_key}` when it has one)"
        keys = ", ".join(f"`{k}`" for k in c.layer_id_keys)
        detect = ", ".join(f"`{k}`" for k in c.detect_keys) or "none"
        lines.append(f"| {c.name} | {c.meaning} | {keys} | {default} | {detect} |")
    families = sorted({d.family for d in catalogue.drafts})
    confirmed = sum(d.confirmed for d in catalogue.drafts)
    lines += [
        "",
        "## Published drafts",
        "",
        f"{len(catalogue.drafts)} entries ({confirmed} confirmed) over {len(families)} target families.",
        "",
        (
            "| family | draft | method | target architecture | L | ids (key) | convention | trained on | trainer |"
            " source | confirmed |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in sorted(catalogue.drafts, key=lambda d: (d.family, d.name)):
        ids = f"`{list(d.ids)}` (`{d.key}`)" if d.ids is not None else "none (engine default)"
        trained = catalogue.trained(d)
        trained_text = f"b={list(trained)}" if trained is not None else "?"
        check = "yes" if d.confirmed else f"no: {_cell(d.unconfirmed or '')}"
        if d.note:
            check += f" ({_cell(d.note)})"
        lines.append(
            f"| {_cell(d.family)} | {_cell(d.name)} | {d.method} | {', '.join(d.architectures)} |"
            f" {d.num_hidden_layers or '?'} | {ids} | {d.convention} | {trained_text} | {_cell(d.trainer)} |"
            f" {_link(d.source)} | {check} |"
        )
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: {GENERATOR_COMMAND}", file=sys.stderr)
        return 2
    Path(args[0]).write_text(drafts_markdown(), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
