"""The draft catalogue: published drafts and trainers' default layouts (``rules/drafts/*.toml``).

Which ids "a draft can send" is a fact about the drafts people ship, not about the engine's
majority. The catalogue records, per published draft, the target architecture (a registry
name), its layer count, the ids exactly as the draft config writes them (or none: the engine's
default applies), the key they are written under, the training convention that says what they
meant, and where each fact was read. Trainers' default layouts say what a draft trained
without explicit ids was trained on. The schema is documented in docs/drafts.md; a user adds
their own drafts with ``--drafts FILE`` or ``[tool.flowtrace] drafts`` (an entry with a
shipped entry's name replaces it).

Matching a catalogue draft to a model class is by architecture name only (the registry's
names a class is served under), never by a name written in code.
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from flowtrace.engines.profiles import rules_directory
from flowtrace.engines.methods import LEGACY
from flowtrace.engines.training import (
    LayoutError, TrainingConvention, invalid_ids, layout, load_conventions, needs_draft_layers, to_boundaries,
)
from flowtrace.errors import ProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EAGLE3 = LEGACY[0]  # the method a [[draft]] entry names when it names none: the profiles' one method of old

_DRAFT_KEYS = {
    "name": str,
    "target": str,
    "architectures": list,
    "num_hidden_layers": int,
    "method": str,
    "trainer": str,
    "convention": str,
    "ids": list,
    "key": str,
    "target_hidden_size": int,
    "states": int,
    "source": str,
    "see": list,
    "confirmed": bool,
    "unconfirmed": str,
    "note": str,
    "trained_boundaries": list,
    "draft_architectures": list,
}
_DRAFT_REQUIRED = ("name", "target", "architectures", "trainer", "convention", "source")
_TRAINER_KEYS = {
    "name": str,
    "convention": str,
    "ids": str,
    "writes_ids": bool,
    "key": str,
    "method": str,
    "source": str,
}
_TRAINER_REQUIRED = ("name", "convention", "ids", "writes_ids", "source")


@dataclass(frozen=True, slots=True)
class CatalogueDraft:
    """One published draft (or a trainer's published configuration)."""

    name: str
    family: str
    target: str
    architectures: tuple[str, ...]  # the registry names the target is served under
    num_hidden_layers: int | None  # None only for an unconfirmed entry whose target was not read
    method: str
    trainer: str
    convention: str
    ids: tuple[int, ...] | None  # as the draft config writes them; None: the engine's default applies
    key: str | None  # the dotted draft-config key the ids are written under
    source: str
    file: str  # the catalogue file it came from (a name, for messages)
    see: tuple[str, ...] = ()
    target_hidden_size: int | None = None
    states: int | None = None  # target states the draft's fc concatenates, when stated
    confirmed: bool = True
    unconfirmed: str | None = None
    note: str | None = None
    # What the draft was trained on, when neither its ids nor its convention's default say it
    # (a trainer run with explicit ids that were not written into the config).
    trained_boundaries: tuple[int, ...] | None = None
    # The draft config's own architectures: the engine's draft class registered under them loads it.
    draft_architectures: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TrainerDefault:
    """What a trainer trains on when the draft config names no ids, and whether it then writes
    those ids into the config (``writes_ids``)."""

    name: str
    convention: str
    ids: str  # an expression in L
    writes_ids: bool
    source: str
    key: str | None = None
    method: str = EAGLE3


@dataclass(frozen=True, slots=True)
class DraftCatalogue:
    drafts: tuple[CatalogueDraft, ...]
    trainers: tuple[TrainerDefault, ...]
    conventions: Mapping[str, TrainingConvention] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    digest: str = ""

    def find(self, name: str) -> CatalogueDraft | None:
        return next((d for d in self.drafts if d.name == name), None)

    def for_architectures(
        self, names: Iterable[str], method: str = EAGLE3, *, confirmed_only: bool = True
    ) -> tuple[CatalogueDraft, ...]:
        """The drafts of ``method`` for a class served under any of ``names`` (registry names)."""
        wanted = set(names)
        return tuple(
            d
            for d in self.drafts
            if wanted.intersection(d.architectures)
            and d.method == method
            and d.num_hidden_layers is not None
            and (d.confirmed or not confirmed_only)
        )

    def loaded_by(self, names: Iterable[str]) -> tuple[CatalogueDraft, ...]:
        """The confirmed drafts whose own config names one of ``names`` as its architecture
        (the engine's draft class registered under them loads those drafts)."""
        wanted = set(names)
        return tuple(d for d in self.drafts if d.confirmed and wanted.intersection(d.draft_architectures))

    def states(self, draft: CatalogueDraft) -> int | None:
        """How many target states the draft's fc concatenates: stated, else its trained layout's."""
        trained = self.trained(draft)
        return draft.states or (len(trained) if trained is not None else None)

    def trained(self, draft: CatalogueDraft) -> tuple[int, ...] | None:
        """The boundaries ``draft`` was trained on: its ids under its convention, or the
        convention's default layout when it writes none (None: its layer count is unknown)."""
        conv = self.conventions.get(draft.convention)
        if conv is None or draft.num_hidden_layers is None:
            return None
        if draft.trained_boundaries is not None:
            return draft.trained_boundaries
        # states: the draft's layer count too, for a layout spread over them (one state per draft layer)
        ids = draft.ids if draft.ids is not None else layout(conv.default_ids, draft.num_hidden_layers, draft.states)
        return to_boundaries(conv.meaning, ids, draft.num_hidden_layers)[0]

    def trainer_trained(self, trainer: TrainerDefault, layers: int) -> tuple[int, ...]:
        conv = self.conventions[trainer.convention]
        return to_boundaries(conv.meaning, layout(trainer.ids, layers), layers)[0]

    def meaning(self, convention: str) -> str | None:
        conv = self.conventions.get(convention)
        return conv.meaning if conv is not None else None


def _typed(entry: dict[str, Any], schema: dict[str, type], required: Sequence[str], where: str) -> None:
    unknown = sorted(set(entry) - set(schema))
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(schema)})")
    missing = [k for k in required if k not in entry]
    if missing:
        raise ProfileError(f"{where}: missing required key(s) {', '.join(missing)}")
    for key, kind in schema.items():
        value = entry.get(key)
        if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
            raise ProfileError(f"{where}: {key} must be a {kind.__name__}, found {value!r}")


def _draft(
    entry: dict[str, Any], family: str, file: str, conventions: Mapping[str, TrainingConvention], where: str
) -> CatalogueDraft:
    _typed(entry, _DRAFT_KEYS, _DRAFT_REQUIRED, where)
    conv = conventions.get(entry["convention"])
    if conv is None:
        raise ProfileError(
            f"{where}: unknown convention {entry['convention']!r} (choose from {', '.join(sorted(conventions))})"
        )
    confirmed = entry.get("confirmed", True)
    if confirmed == ("unconfirmed" in entry):
        raise ProfileError(f"{where}: an entry says 'unconfirmed = <why>' exactly when 'confirmed = false'")
    layers = entry.get("num_hidden_layers")
    if layers is None and confirmed:
        raise ProfileError(f"{where}: num_hidden_layers is required (it may be left out only when confirmed = false)")
    if layers is not None and layers < 1:
        raise ProfileError(f"{where}: num_hidden_layers must be positive, found {layers}")
    ids = entry.get("ids")
    spread = needs_draft_layers(conv.default_ids)  # a default over the draft's own layers needs their count
    if ids is None and entry.get("trained_boundaries") is None and spread and "states" not in entry:
        raise ProfileError(f"{where}: the {conv.name} default needs the draft's layer count: give ids or states")
    if ids is not None:
        if "key" not in entry:
            raise ProfileError(f"{where}: ids need the key they are written under ('key')")
        why = invalid_ids(conv.meaning, ids, layers) if layers is not None else None
        if why is not None:
            raise ProfileError(f"{where}: ids {ids!r} are impossible under the {conv.name} convention: {why}")
    see = entry.get("see", [])
    if not all(isinstance(s, str) for s in see):
        raise ProfileError(f"{where}: see must be a list of addresses")
    architectures = entry["architectures"]
    if not architectures or not all(isinstance(a, str) and a.isidentifier() for a in architectures):
        raise ProfileError(
            f"{where}: architectures must be a non-empty list of registry names, found {architectures!r}"
        )
    own = entry.get("draft_architectures", [])
    if not all(isinstance(a, str) and a.isidentifier() for a in own):
        raise ProfileError(f"{where}: draft_architectures must be a list of registry names, found {own!r}")
    trained = entry.get("trained_boundaries")
    if trained is not None and (layers is None or invalid_ids("boundary", trained, layers) is not None):
        raise ProfileError(f"{where}: trained_boundaries {trained!r} must be distinct boundaries 0..L of a known L")
    return CatalogueDraft(
        name=entry["name"],
        family=family,
        target=entry["target"],
        architectures=tuple(architectures),
        num_hidden_layers=layers,
        method=entry.get("method", EAGLE3),
        trainer=entry["trainer"],
        convention=conv.name,
        ids=tuple(ids) if ids is not None else None,
        key=entry.get("key"),
        source=entry["source"],
        file=file,
        see=tuple(see),
        target_hidden_size=entry.get("target_hidden_size"),
        states=entry.get("states"),
        confirmed=confirmed,
        unconfirmed=entry.get("unconfirmed"),
        note=entry.get("note"),
        trained_boundaries=tuple(trained) if trained is not None else None,
        draft_architectures=tuple(entry.get("draft_architectures", ())),
    )


def _trainer(entry: dict[str, Any], conventions: Mapping[str, TrainingConvention], where: str) -> TrainerDefault:
    _typed(entry, _TRAINER_KEYS, _TRAINER_REQUIRED, where)
    if entry["convention"] not in conventions:
        raise ProfileError(f"{where}: unknown convention {entry['convention']!r}")
    if entry["writes_ids"] != ("key" in entry):
        raise ProfileError(
            f"{where}: a trainer that writes its ids names the key ('key'), one that does not names none"
        )
    try:
        layout(entry["ids"], 32)
    except LayoutError as exc:
        raise ProfileError(f"{where}: ids {entry['ids']!r}: cannot evaluate it ({exc})") from None
    return TrainerDefault(
        entry["name"],
        entry["convention"],
        entry["ids"],
        entry["writes_ids"],
        entry["source"],
        entry.get("key"),
        entry.get("method", EAGLE3),
    )


def _read(
    path: Path, conventions: Mapping[str, TrainingConvention]
) -> tuple[list[CatalogueDraft], list[TrainerDefault], bytes]:
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode("utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read the draft catalogue ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path}: not a valid TOML draft catalogue ({exc})") from None
    unknown = sorted(set(data) - {"family", "draft", "trainer"})
    if unknown:
        raise ProfileError(
            f"{path}: unknown table(s) {', '.join(unknown)} (a catalogue holds [family], [[draft]] and [[trainer]])"
        )
    family_table = data.get("family", {})
    family = family_table.get("name", path.stem) if isinstance(family_table, dict) else path.stem
    drafts = [
        _draft(e, family, path.name, conventions, f"{path}: draft {e.get('name', k + 1)!r}")
        for k, e in enumerate(data.get("draft", []))
    ]
    trainers = [
        _trainer(e, conventions, f"{path}: trainer {e.get('name', k + 1)!r}")
        for k, e in enumerate(data.get("trainer", []))
    ]
    return drafts, trainers, raw


def load_catalogue(extra: Sequence[str | Path] = (), directory: Path | None = None) -> DraftCatalogue:
    """The shipped catalogue (``<rules>/drafts/*.toml``) plus the user's files, in order; a
    user's entry replaces a shipped one of the same name. Any schema error is one
    :class:`ProfileError` line naming the file and the entry."""
    base = directory or rules_directory()
    conventions = load_conventions(base)
    drafts: dict[str, CatalogueDraft] = {}
    trainers: dict[str, TrainerDefault] = {}
    digest = hashlib.sha256()
    paths = sorted((base / "drafts").glob("*.toml"))
    shipped = len(paths)
    for n, path in enumerate([*paths, *(Path(p) for p in extra)]):
        found, defaults, raw = _read(path, conventions)
        digest.update(path.name.encode() + b"\0" + raw)
        for d in found:
            if d.name in drafts and n < shipped:
                raise ProfileError(f"{path}: draft {d.name!r} is already defined in {drafts[d.name].file}")
            drafts[d.name] = d
        trainers.update((t.name, t) for t in defaults)
    files = tuple(str(p) for p in extra)
    return DraftCatalogue(tuple(drafts.values()), tuple(trainers.values()), conventions, files, digest.hexdigest()[:16])


_SHIPPED: list[DraftCatalogue] = []


def shipped_catalogue() -> DraftCatalogue:
    """The catalogue without user files (read once per process)."""
    if not _SHIPPED:
        _SHIPPED.append(load_catalogue())
    return _SHIPPED[0]


__all__ = ["EAGLE3", "CatalogueDraft", "DraftCatalogue", "TrainerDefault", "load_catalogue", "shipped_catalogue"]
