"""What the analysis could not read or decide, as counted findings (FT015, FT017)."""

from __future__ import annotations

from typing import Iterator

from flowtrace.model import facts as F
from flowtrace.checks.base import Example, Finding, Rule
from flowtrace.model.problems import ProblemKind


class UnreadableFile(Rule):
    code = "FT015"
    name = "unreadable-file"
    severity = "info"
    summary = "A file could not be read or parsed; its facts are missing from the analysis."
    rationale = "A scan that skips a file silently could hide a setter or a capture loop. Every such file is reported and counted."
    kind = ProblemKind.UNREADABLE_FILE
    fix = "Fix the syntax or encoding, or exclude the file (--exclude / [tool.flowtrace] exclude) if it is not engine code."
    valid = (Example("x = 1  # parses"),)
    invalid = (Example("def broken(:\n    pass"),)

    def check(self, result) -> Iterator[Finding]:
        for d in result.index.diagnostics:
            if d.kind in {"parse-error", "too-large", "timeout", "unreadable", "internal"}:
                yield self.finding(F.Location(d.file, max(d.line, 1)), f"{d.kind}: {d.reason}", None, f"{d.file}:{d.kind}")


class UnresolvedCapture(Rule):
    code = "FT017"
    name = "unresolved-capture"
    severity = "info"
    summary = "A capture path could not be decided statically (unknown capture point or missing registry target)."
    rationale = "Where the analysis cannot decide, it says so instead of guessing; `flowtrace probe capture` settles such cases on tensors."
    fix = "Run `flowtrace probe capture` for this model, or simplify the capture so it can be read statically."
    valid = (Example("capture_output=aux.capture if i in self.layers_to_capture else None  # followed into the layer"),)
    invalid = (Example("layer(h, aux if i in self.layers_to_capture else None)  # positional: cannot be followed"),)

    def check(self, result) -> Iterator[Finding]:
        project = result.project
        for target, entries in sorted(project.registry.items()):
            if project.find_class(target) is None:
                e = entries[0]
                module, _, name = target.rpartition(".")
                places = sorted(q for q in project.by_name.get(name, []) if q.startswith(module + "."))
                if places:
                    message = (
                        f"registry entry {e.architecture!r} points at {target}; {name} is defined {len(places)} times below {module} "
                        f"({', '.join(q.rpartition('.')[0] for q in places[:3])}) and the one that runs is chosen at import time"
                    )
                else:
                    message = f"registry entry {e.architecture!r} points at {target}, which is not in the scanned tree"
                yield self.finding(e.location, message, target, target, kind=ProblemKind.REGISTRY_TARGET_MISSING)
        seen = set()
        for row in result.rows:
            c = row.capture
            if c is not None and not c.inherited:
                unresolved = _unresolved(project, row, c)
                if unresolved:
                    yield self.finding(c.setter.location, f"{row.name}: {unresolved}", row.qualname, unresolved, kind=ProblemKind.DELEGATE_UNRESOLVED)
            if c is None or c.site is None or c.point != F.UNKNOWN or c.site.location in seen:
                continue
            seen.add(c.site.location)
            yield self.finding(
                c.site.location,
                f"{row.name}: capture point unknown at {c.site.location}: {c.point_note}",
                row.qualname,
                c.site.function,
                kind=ProblemKind.CAPTURE_POINT_UNKNOWN,
                flow=(c.setter.location, c.site.location),
            )


def _unresolved(project, row, c) -> str | None:
    """Why the holder could not be found, read from the capture path's structure (not its problem text)."""
    setter = c.setter
    if setter.delegate and setter.delegate != "super()" and c.delegates_to is None and c.holder is None and not setter.writes:
        return f"{setter.method} hands the ids to {setter.delegate}.{setter.delegate_method}(), whose class could not be resolved ({setter.location})"
    if c.holder is None and not setter.delegate:
        for write in setter.writes:
            parts = write.split(".")
            if len(parts) == 3 and parts[0] == "self" and project.attribute_class(row.qualname, parts[1]) is None:
                return f"{setter.method} writes {write}, but the class of self.{parts[1]} could not be resolved ({setter.location})"
    return None
