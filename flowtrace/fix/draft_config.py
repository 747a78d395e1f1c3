"""Fix 4 (``compat --fix``): rewrite the draft's config.json with ids that serve its training.

compat already searches, on a MISMATCH, the ids that make the engine serve the trained layout
and re-traces each (:mod:`flowtrace.analysis.suggest`). This module writes the first verified
list under the key the engine reads, keeping the file's key order, indentation and final
newline and every line it does not change (:mod:`flowtrace.fix.json_text`), and records the trained layout under
``"flowtrace": {"trained_boundaries": [...]}``:
the new ids are the engine's, no longer the training convention's, so a later ``compat`` must
read the layout from the record instead of converting the ids again. The new text is checked
by running compat on it (in a temporary folder) before it is offered: MATCH, or nothing is
written.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from flowtrace.fix.model import FileEdit
from flowtrace.analysis.compat import set_dotted
from flowtrace.sources.configs import config_path, read_document

if TYPE_CHECKING:
    from flowtrace.analysis.compat import CompatResult
    from flowtrace.analysis.scan import ScanResult

RECORD_KEY = "flowtrace"
RECORD_FIELD = "trained_boundaries"


@dataclass(frozen=True, slots=True)
class ConfigFix:
    """The rewritten config (``edit`` None when nothing is offered) and why. ``rejected`` is
    compat's verdict on a rewrite that did not MATCH: its differences are data, worded by the
    caller (the words live in :mod:`flowtrace.render`, after this stage)."""

    path: Path
    edit: FileEdit | None
    why: str
    rejected: CompatResult | None = None
    matches: bool = False  # the config already gives MATCH: nothing to change, nothing wrong


def rewrite(
    text: str,
    key: str,
    ids: tuple[int, ...],
    trained: tuple[int, ...],
    convention: str,
    old_ids: tuple[int, ...] | None,
) -> str:
    """The config text with ``key`` set to ``ids`` and the trained layout recorded, every other
    line as it was (:mod:`flowtrace.fix.json_text`); the result reads as ``json.loads`` of the
    old text with those two members set, or :class:`ValueError`."""
    from flowtrace.fix.json_text import set_member

    record: dict[str, object] = {RECORD_FIELD: list(trained), "trained_with": convention}
    if old_ids is not None:
        record["trained_ids"] = list(old_ids)
    out = set_member(set_member(text, key, list(ids)), RECORD_KEY, record)
    expected = json.loads(text)
    set_dotted(expected, key, list(ids))
    expected[RECORD_KEY] = record
    if json.loads(out) != expected:  # the text edit must mean exactly the two members set
        raise ValueError(f"rewriting {key} would change more than {key} and {RECORD_KEY}")
    return out


def fix_draft_config(
    result: ScanResult,
    target_config: str | Path,
    draft_config: str | Path,
    *,
    trained_with: str | None = None,
    trained_boundaries: list[int] | None = None,
) -> ConfigFix:
    """Plan the config rewrite for one deployment and verify it with compat (MATCH).
    Raises :class:`flowtrace.sources.configs.ConfigError` for unusable configs, as compat does."""
    from flowtrace.analysis.compat import compat

    def run(draft: str | Path, given: list[int] | None = None) -> CompatResult:
        return compat(
            result.project,
            target_config,
            draft,
            trained_with=trained_with,
            engine_keys=result.engine_keys,
            trained_boundaries_given=given,
        )

    path = config_path(draft_config)
    before = run(draft_config, trained_boundaries)
    if before.verdict == "MATCH":
        return ConfigFix(path, None, "already MATCH: nothing to change", matches=True)
    usable = [s for s in before.suggestions if s.ids is not None and s.key and s.config == "draft config"]
    if not usable:
        blocked = next((s for s in before.suggestions if s.ids is None), None)
        why = (
            f"{blocked.why}" + (f" [{blocked.location}]" if blocked and blocked.location else "")
            if blocked
            else "no verified ids"
        )
        return ConfigFix(
            path,
            None,
            f"no draft-config ids can serve the trained layout: {why} (see `flowtrace fix` for code changes)",
        )
    chosen = usable[0]
    text = read_document(path, "draft").text  # the one reader compat used, kept whole for the rewrite
    after = rewrite(text, str(chosen.key), tuple(chosen.ids or ()), before.trained, before.convention, before.draft_ids)
    edit = FileEdit(path.name, text, after)
    with tempfile.TemporaryDirectory(prefix="flowtrace-compat-fix-") as tmp:
        trial = Path(tmp) / "config.json"
        trial.write_text(after, encoding="utf-8")
        again = run(trial)
    if again.verdict != "MATCH":
        return ConfigFix(
            path,
            None,
            f"ids {list(chosen.ids or ())} under {chosen.key} do not give MATCH when compat reads the rewritten config",
            again,
        )
    return ConfigFix(
        path,
        edit,
        f"{chosen.key} = {list(chosen.ids or ())}: {chosen.why}; the trained boundaries {list(before.trained)} are"
        f" recorded under {RECORD_KEY}.{RECORD_FIELD}, so a plain `flowtrace compat` reads them instead of converting"
        " the new ids",
    )
