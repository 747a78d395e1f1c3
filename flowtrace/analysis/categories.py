"""The one category every output shows for a model row (text matrix, JSON ``category``, HTML).

A row's category is its capture support, except for draft models: they consume the captured
states, so their capture verdict (often *broken*: a draft's own layers never capture) is not a
defect to count or to explain with a finding; they are ``draft``. Text, JSON, HTML and the
checks all ask this module, so a class the report calls a draft is never a target the checks
grade, and a *broken* row is always one the checks speak about.

Two signals make a draft, both read from facts (never from a class name alone):

- structural (:func:`flowtrace.analysis.drafts.draft_classes`): the class, or a class it builds,
  defines the profile's fc projection over the concatenated captured states;
- a draft *head* (MTP / NextN / EAGLE / DFlash heads that inherit their target's capture
  setter): the class name matches the profile's ``[checks] draft_class_patterns`` (the hint)
  **and** the class, or a class its ``__init__`` builds, assigns a draft projection attribute
  (``[draft] fc_attribute`` or ``[checks] draft_projection_attributes``, e.g. the ``eh_proj``
  of a multi-token-prediction head that mixes the embedding with the target's hidden state).
  The class table records ``self.x = Cls(...)`` for every file, so this test also works where
  the file got no full analysis.

Subclasses of a draft are drafts (to a fixpoint).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowtrace.analysis.drafts import draft_classes
from flowtrace.engines.check_conventions import check_conventions

if TYPE_CHECKING:
    from flowtrace.analysis.resolve import Project
    from flowtrace.engines.check_conventions import CheckConventions
    from flowtrace.analysis.scan import ScanResult

DRAFT = "draft"
_CACHE_ATTR = "_flowtrace_draft_models"


def draft_models(result: ScanResult) -> frozenset[str]:
    """Qualified names of every class that is a draft model."""
    return project_drafts(result.project, check_conventions(result.profiles, result.method_asked))


def project_drafts(project: Project, cc: CheckConventions) -> frozenset[str]:
    """:func:`draft_models` for the checks, which hold the project and the ``[checks]``
    conventions (memoised on the project: text, JSON, HTML and every rule ask)."""
    cached = getattr(project, _CACHE_ATTR, None)
    if cached is None:
        cached = _draft_models(project, cc)
        setattr(project, _CACHE_ATTR, cached)
    return cached


def categories(result: ScanResult) -> dict[str, str]:
    """qualname -> the one category every output shows: ``draft`` or the row's support."""
    drafts = draft_models(result)
    return {r.qualname: DRAFT if r.qualname in drafts else r.support for r in result.rows}


def _draft_models(project: Project, cc: CheckConventions) -> frozenset[str]:
    projections = frozenset(project.conv.fc_attributes) | frozenset(cc.draft_projection_attributes)
    drafts = set(draft_classes(project.files))
    for row in project.rows:
        if (
            row.qualname not in drafts
            and cc.is_draft_class(row.name)
            and _owns_projection(project, row.qualname, projections)
        ):
            drafts.add(row.qualname)
    return _with_subclasses(project, drafts)


def _owns_projection(project: Project, qualname: str, projections: frozenset[str]) -> bool:
    """The class (through its bases) or a class its ``__init__`` builds (through that class's
    bases) assigns one of the projection attributes."""
    built: list[str] = []
    for q in project.lookup.mro(qualname):
        cls = project.lookup.classes.get(q)
        if cls is None:
            continue
        if any(a.attribute in projections for a in cls.assignments):
            return True
        built += [a.callee for a in cls.assignments if a.callee in project.lookup.classes]
    for callee in dict.fromkeys(built):
        for q in project.lookup.mro(callee):
            cls = project.lookup.classes.get(q)
            if cls is not None and any(a.attribute in projections for a in cls.assignments):
                return True
    return False


def _with_subclasses(project: Project, drafts: set[str]) -> frozenset[str]:
    """``drafts`` grown by every class that subclasses one, to a fixpoint."""
    classes = list(project.lookup.classes.values())
    while True:
        grown = {c.qualname for c in classes if c.qualname not in drafts and any(b in drafts for b in c.bases)}
        if not grown:
            return frozenset(drafts)
        drafts |= grown
