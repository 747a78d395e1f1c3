"""The capture chain as typed links (shared/DESIGN.md section 3).

A model class's answer is the composition of seven links, each found in the code and each
carrying the file:line it rests on:

    id source -> transform (one per setter in the chain) -> holder -> capture site
              -> stream semantics -> return path -> concat

:mod:`flowtrace.analysis.chain` assembles one :class:`CaptureChain` per model row (``ModelRow.chain``)
from what :mod:`flowtrace.analysis.resolve` and :mod:`flowtrace.analysis.config_capture` found;
:mod:`flowtrace.analysis.graph` stores every link as a typed node or edge; trace, compat, the
checks and the scan JSON read the links (the row's flat fields are a view of them).
Links are frozen and hold strings, ints, enums and locations only, like the facts.

An id source may be a setter (the runner hands draft-config ids to an entry setter), a
serving-config key, a config attribute, a build context, or none (the engine ignores the
draft's ids: transform ``ignored``). Profiles for other engines add sources of those kinds
without new link types.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowtrace.model.facts import (
    ConcatOrder,
    HolderKind,
    Location,
    Mechanism,
    Point,
    ProblemKind,
    ReturnKind,
    SourceKind,
    StreamKind,
    Transform,
)


def compose_transforms(outer: str, inner: str) -> str:
    """The transform of ``inner(outer(ids))``: identity and pure delegation are neutral."""
    if outer in (Transform.IDENTITY, Transform.DELEGATES):
        return inner
    if inner in (Transform.IDENTITY, Transform.DELEGATES):
        return outer
    if Transform.CONDITIONAL in (outer, inner):
        return Transform.CONDITIONAL
    return Transform.OTHER


# Problems that describe how a chain behaves on some ids rather than a chain that cannot work
# (a row with only these is not "broken"; trace decides them on the concrete ids).
NOT_BREAKING = frozenset({ProblemKind.INDEX0_RAISES, ProblemKind.PACKER_COUNT_CHECK, ProblemKind.DEPENDS_ON_CONFIG})


@dataclass(frozen=True, slots=True)
class Problem:
    """A typed problem on a chain: rules select on ``kind``; ``text`` is for people."""

    kind: ProblemKind
    text: str
    location: Location | None = None

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class IdSourceLink:
    kind: SourceKind
    key: str | None  # the draft/serving-config key, config attribute or context name
    location: Location | None  # where the engine reads it (setter entry for SETTER)


@dataclass(frozen=True, slots=True)
class TransformLink:
    """One setter of the chain: what it does to the ids it receives."""

    owner: str  # qualified class the setter is defined on
    method: str
    acts_on: str  # qualified class of the object it runs on
    transform: Transform
    note: str | None
    default: str | None  # default-ids expression it uses when given None
    location: Location


@dataclass(frozen=True, slots=True)
class HolderLink:
    """The class whose attribute holds the capture indices, and how it is built."""

    holder: str | None  # qualified class; None when it depends on the target config
    kind: HolderKind
    attribute: str | None  # the capture attribute it holds
    location: Location | None  # the construction (or the class) that decides it
    depends_on: str | None = None  # config key for DYNAMIC holders, e.g. "text_config.architectures"


@dataclass(frozen=True, slots=True)
class SiteLink:
    mechanism: Mechanism
    point: Point
    function: str
    location: Location
    note: str
    evidence: tuple[Location, ...] = ()  # steps followed (layer forward, helper, hook)
    attribute: str | None = None  # the capture attribute the membership test reads
    loop_variable: str | None = None
    loop_range: str | None = None  # source of the iterated range
    container: str | None = None  # the aux container variable
    embedding_capturable: bool | None = None  # b=0 is recorded (decided with the point)
    last_layer_capturable: bool | None = None  # b=L is recorded (output point or post-loop)
    owner: str | None = None  # qualified class whose method holds the site


@dataclass(frozen=True, slots=True)
class StreamLink:
    """What the site records; ``index0_raises`` names the first-iteration raise if any."""

    kind: StreamKind
    expression: str | None
    raising_index: int | None  # the capture index whose recording raises (None: none raises)
    raises_at: Location | None
    reason: str | None
    # MUTATED_REFERENCE: the in-place update of the stored tensor and where it is; when the
    # loop never rebinds the name, every recorded slot is one tensor holding the loop's final state.
    mutation: str | None = None
    mutated_at: Location | None = None
    final_state: bool = False


@dataclass(frozen=True, slots=True)
class SlotsLink:
    """A fixed-slot collector sized by the number of capture indices and checked later."""

    collector: str  # qualified class
    sized_by: str
    check: str | None  # the raising condition, e.g. "self._idx != self._num_captures"
    check_at: Location | None
    finalize_at: Location | None
    empty_return_at: Location | None = None  # an empty collector is returned before finalizing


@dataclass(frozen=True, slots=True)
class ReturnLink:
    """Whether the captured states reach the runner. ``location`` is the statement that decides
    it (the dropping return, the raising unpacking, the use that hands them on); ``raises``:
    Python raises there; ``decided``: False when it depends on something only a run shows
    (an early return under a batch test), so the trace only notes it."""

    kind: ReturnKind
    location: Location | None
    reason: str | None = None
    raises: bool = False
    decided: bool = True
    evidence: tuple[Location, ...] = ()  # the flag's value, the inner forward's return, ...
    flag: str | None = None  # the ``self.<flag>`` the decision turns on, if any


@dataclass(frozen=True, slots=True)
class ConcatLink:
    order: ConcatOrder
    last_layer_at: Location | None  # a post-loop capture of b=L, if any
    location: Location | None  # the concatenation the states reach (what trace cites)
    candidates: tuple[Location, ...] = ()  # every concatenation they may reach (site module, draft modules)


@dataclass(frozen=True, slots=True)
class CaptureChain:
    """All links of one model class, outermost first."""

    source: IdSourceLink
    transforms: tuple[TransformLink, ...]
    holder: HolderLink | None
    site: SiteLink | None
    stream: StreamLink | None
    slots: SlotsLink | None
    returns: ReturnLink | None
    concat: ConcatLink | None
    problems: tuple[Problem, ...] = ()

    @property
    def effective_transform(self) -> str:
        """What the whole transform chain does to the ids (link 2 composed, outermost first)."""
        if not self.transforms:
            return Transform.IDENTITY
        out: str = self.transforms[0].transform
        for link in self.transforms[1:]:
            out = compose_transforms(out, link.transform)
        return out

    def kinds(self) -> set[ProblemKind]:
        """The typed problems on the chain: what rules select on (never the texts)."""
        return {p.kind for p in self.problems}

    def has(self, kind: ProblemKind) -> bool:
        return any(p.kind is kind for p in self.problems)


__all__ = [
    "NOT_BREAKING",
    "CaptureChain",
    "compose_transforms",
    "ConcatLink",
    "HolderLink",
    "IdSourceLink",
    "Problem",
    "ReturnLink",
    "SiteLink",
    "SlotsLink",
    "StreamLink",
    "TransformLink",
]
