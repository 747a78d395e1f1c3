"""Which model rows each finding concerns: what the JSON row's ``findings`` and the HTML
report's matrix, class view and "start here" cards all show, decided once, here.

One finding per root cause sits at the place to fix, on one symbol; it concerns every row whose
capture chain runs through that place. Decided from the scan document's chain members (the
public ``flowtrace.scan/1`` shape, so a saved document renders as the live scan did), never
from message text:

* the row its ``symbol`` names (exact qualname, or the class of a ``Class.method`` symbol);
* the rows the finding itself names (``affects``: the classes of a cause grouped at one place);
* the rows whose chain runs the setter the symbol names (``capture.transform_chain``): a
  setter's own defect (its transform, an unchecked index, marks never cleared) is the defect
  of every row that calls it;
* the rows whose capture runs in the symbol's class (their holder, the model they delegate to,
  the class whose forward records the states);
* the rows defined at the finding's place, a merged copy's place (``related``) or a step of
  its path (``flow``); for a setter-less row also the place that decides its outcome;
* the rows whose inherited setter lives in the symbol's class and whose own chain has the
  finding's problem kind.

Not a shared setter's class alone: a setter used by many rows carries findings about its own
model (a wrapper lacking a method), which explain nothing about another row. Nor a draft row
through its chain (an MTP head built on a target's classes): a draft consumes the states, a
target's defect is not its own; a finding that names the draft itself still shows on it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def _str(value: Any) -> str:
    return "" if value is None else str(value)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def file_line(at: str) -> tuple[str | None, int | None]:
    """``"pkg/m.py:40"`` -> ``("pkg/m.py", 40)``; ``(at or None, None)`` without a line."""
    file, _, line = at.rpartition(":")
    return (file, int(line)) if file and line.isdigit() else (at or None, None)


def _prefixes(name: str) -> list[str]:
    """``a.b.C.m`` -> ``[a.b.C.m, a.b.C, a.b, a]``: a symbol and the classes and modules holding it."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts), 0, -1)]


def _setters(capture: dict[str, Any]) -> list[str]:
    """The setters a row's ids pass through, outermost first (the entry setter when the
    document predates ``transform_chain``)."""
    chain = [_str(_dict(link).get("setter")) for link in _list(capture.get("transform_chain"))]
    entry = _str(_dict(capture.get("setter")).get("qualname"))
    return [s for s in dict.fromkeys([entry, *chain]) if s]


class RowIndex:
    """The scan document's rows, indexed by every place and class a finding can point at.
    Rows are referred to by their position in ``models``."""

    def __init__(self, models: list[dict[str, Any]]) -> None:
        self.qualnames = [_str(m.get("qualname")) or _str(m.get("class")) for m in models]
        self.by_qualname = {q: i for i, q in enumerate(self.qualnames)}
        names = Counter(_str(m.get("class")) for m in models)
        self.by_class = {_str(m.get("class")): i for i, m in enumerate(models) if names[_str(m.get("class"))] == 1}
        archs = Counter(a for m in models for a in set(_list(m.get("architectures"))))
        self.by_arch = {a: i for i, m in enumerate(models) for a in _list(m.get("architectures")) if archs[a] == 1}
        self.by_cause: dict[str, list[int]] = {}
        self.by_setter: dict[str, list[int]] = {}
        self.by_place: dict[tuple[str, int], list[int]] = {}
        self.by_setter_kind: dict[tuple[str, str], list[int]] = {}
        for i, m in enumerate(models):
            self._add(i, m)

    def _add(self, i: int, m: dict[str, Any]) -> None:
        c = _dict(m.get("capture"))
        qualname = self.qualnames[i]
        if m.get("draft") is True:
            return  # a draft consumes the states: a target's defect on its chain is not its own
        site_class = _str(_dict(c.get("capture_site")).get("qualname")).rpartition(".")[0]
        for cause in {_str(c.get("holder")), _str(c.get("delegates_to")), site_class} - {"", qualname}:
            self.by_cause.setdefault(cause, []).append(i)
        for setter in _setters(c):
            self.by_setter.setdefault(setter, []).append(i)
        places: set[tuple[str | None, int | None]] = {(_str(m.get("file")), _int(m.get("line")))}
        if c and not _dict(c.get("setter")):  # setter-less rows: a setter row's outcome_at is often its shared setter
            places.add(file_line(_str(c.get("outcome_at"))))
        for file, line in places:
            if file and line is not None:
                self.by_place.setdefault((file, line), []).append(i)
        setter_class = _str(_dict(c.get("setter")).get("qualname")).rpartition(".")[0]
        if setter_class and setter_class != qualname:
            for kind in _list(c.get("problem_kinds")):
                self.by_setter_kind.setdefault((setter_class, _str(kind)), []).append(i)

    def find(self, name: Any) -> int | None:
        """The row a symbol or a probe claim names: its qualname or the longest row qualname
        prefixing it (``pkg.Cls.method`` -> ``pkg.Cls``), else a unique class or architecture name."""
        if not isinstance(name, str) or not name:
            return None
        for probe in _prefixes(name):
            if probe in self.by_qualname:
                return self.by_qualname[probe]
        return self.by_class.get(name, self.by_arch.get(name))

    def rows_of(self, finding: dict[str, Any]) -> list[int]:
        """Every row the finding concerns (see the module doc), the symbol's row first."""
        symbol = _str(finding.get("symbol"))
        out: list[int | None] = [self.find(symbol)]
        out += [self.find(a) for a in _list(finding.get("affects"))]
        out += self.by_setter.get(symbol, [])
        for probe in _prefixes(symbol) if symbol else ():
            out += self.by_cause.get(probe, [])
        for where in [
            finding,
            *(_dict(r) for r in _list(finding.get("related"))),
            *(_dict(s) for s in _list(finding.get("flow"))),
        ]:
            line = _int(where.get("line"))
            if line is not None:
                out += self.by_place.get((_str(where.get("file")), line), [])
        kind = _str(finding.get("kind"))
        for probe in _prefixes(symbol) if kind and symbol else ():
            out += self.by_setter_kind.get((probe, kind), [])
        return [i for i in dict.fromkeys(out) if i is not None]


def finding_rows(models: list[dict[str, Any]], findings: list[dict[str, Any]]) -> list[list[int]]:
    """For each finding (in order), the positions in ``models`` of the rows it concerns."""
    index = RowIndex(models)
    return [index.rows_of(f) for f in findings]


def row_findings(models: list[dict[str, Any]], findings: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """For each row (in order), what the JSON row's ``findings`` member lists: each finding
    that concerns it, as ``{"rule", "kind", "severity", "consequence", "fingerprint"}``."""
    out: list[list[dict[str, Any]]] = [[] for _ in models]
    for f, rows in zip(findings, finding_rows(models, findings)):
        brief = {k: f.get(k) for k in ("rule", "kind", "severity", "consequence", "fingerprint")}
        for i in rows:
            out[i].append(brief)
    return out
