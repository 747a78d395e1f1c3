"""``flowtrace check`` as SARIF 2.1.0, in the shape GitHub code scanning accepts.

- ``tool.driver`` carries name, version, informationUri and ``rules[]`` for every registered
  rule (id, name, short/full description, help text + markdown, helpUri, default level), so a
  result's ``ruleIndex`` always resolves.
- Each result has ruleId, ruleIndex, level (error / warning / note), message.text, one
  location with a relative POSIX ``uri`` against ``uriBaseId: %SRCROOT%`` and a 1-based
  ``startLine`` (line 0, a whole-file finding, becomes 1), ``partialFingerprints``
  ``{"flowtrace/v1": fingerprint}`` (line-independent, so alerts follow code that moves), and
  ``codeFlows`` when the finding has a capture chain (its links as threadFlow locations, in
  chain order), ``properties.problem``: the typed problem kind, ``properties.consequence``: what it
  does to a served draft (the level follows from it), and ``relatedLocations`` for the other
  places of the same root cause (per-platform copies, classes sharing the cause).
- ``%SRCROOT%`` is the working folder when the scanned tree is inside it (the repository root
  in CI, so GitHub resolves the paths), else the scanned root.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from flowtrace import __version__

if TYPE_CHECKING:
    from flowtrace.checks.base import Finding, Rule

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
SRCROOT = "%SRCROOT%"
FINGERPRINT_KEY = "flowtrace/v1"
LEVELS = {"error": "error", "warning": "warning", "info": "note"}
PROBLEM_SEVERITY = {"error": "error", "warning": "warning", "info": "recommendation"}


def rule_descriptor(rule: type[Rule]) -> dict[str, Any]:
    from flowtrace.render.rules_doc import help_uri, rule_markdown, rule_text

    return {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.summary},
        "fullDescription": {"text": f"{rule.summary} {rule.rationale}"},
        "help": {"text": rule_text(rule), "markdown": rule_markdown(rule, heading="###")},
        "helpUri": help_uri(rule.code),
        "defaultConfiguration": {"level": LEVELS.get(rule.severity, "warning")},
        "properties": {
            "tags": ["flowtrace", "eagle3"],
            "problem.severity": PROBLEM_SEVERITY.get(rule.severity, "warning"),
        },
    }


def _physical(uri: str, line: int) -> dict[str, Any]:
    return {
        "physicalLocation": {
            "artifactLocation": {"uri": uri, "uriBaseId": SRCROOT},
            "region": {"startLine": max(int(line), 1)},
        }
    }


def _code_flow(f: Finding, uri: Callable[[str], str]) -> dict[str, Any]:
    """The finding's capture chain as one threadFlow: each link a location named by its label
    (setter, holder, capture site, ...), in chain order, the one that decides the finding
    marked ``essential``."""
    steps = []
    for i, step in enumerate(f.flow, 1):
        location = _physical(uri(step.file), step.line)
        label = f.flow_labels[i - 1] if i <= len(f.flow_labels) else f"step {i} of {len(f.flow)}"
        location["message"] = {
            "text": label + (" (reported here)" if (step.file, step.line) == (f.file, f.line) else "")
        }
        entry: dict[str, Any] = {"location": location, "executionOrder": i}
        if (step.file, step.line) == (f.file, f.line):
            entry["importance"] = "essential"
        steps.append(entry)
    return {"message": {"text": f.message}, "threadFlows": [{"locations": steps}]}


def sarif_document(
    findings: Iterable[Finding], *, root: Path, cwd: Path | None = None, rules: list[type[Rule]] | None = None
) -> dict[str, Any]:
    from urllib.parse import quote

    from flowtrace.lint.display_paths import display_base, display_path
    from flowtrace.render.rules_doc import INFORMATION_URI, registered_rules

    rules = registered_rules() if rules is None else list(rules)
    descriptors = [rule_descriptor(r) for r in rules]
    index = {r.code: i for i, r in enumerate(rules)}

    def uri(file: str) -> str:
        return quote(display_path(root, file, cwd), safe="/")

    results = []
    for f in findings:
        if f.rule not in index:  # a finding of a rule that is not registered: describe it minimally
            index[f.rule] = len(descriptors)
            descriptors.append(
                {
                    "id": f.rule,
                    "name": f.name,
                    "shortDescription": {"text": f.name},
                    "defaultConfiguration": {"level": LEVELS.get(f.severity, "warning")},
                }
            )
        result: dict[str, Any] = {
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": LEVELS.get(f.severity, "warning"),
            "message": {"text": f.message + (f" Consequence: {f.effect}." if f.effect else "")},
            "locations": [_physical(uri(f.file), f.line)],
            "partialFingerprints": {FINGERPRINT_KEY: f.fingerprint},
        }
        if f.symbol:
            result["locations"][0]["logicalLocations"] = [{"fullyQualifiedName": f.symbol}]
        if f.kind is not None:
            result["properties"] = {"problem": f.kind.value}
        if f.consequence is not None:
            result.setdefault("properties", {})["consequence"] = f.consequence.value
        if f.entry_path:
            result.setdefault("properties", {})["entryPath"] = f.entry_path
        if f.related:
            result["relatedLocations"] = [
                {"id": i, **_physical(uri(where.file), where.line), "message": {"text": "same root cause"}}
                for i, where in enumerate(f.related, 1)
            ]
        if f.flow:
            result["codeFlows"] = [_code_flow(f, uri)]
        results.append(result)

    base = display_base(root, cwd)
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "flowtrace",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": descriptors,
                    }
                },
                "originalUriBaseIds": {SRCROOT: {"uri": base.as_uri().rstrip("/") + "/"}},
                "invocations": [{"executionSuccessful": True}],
                "columnKind": "unicodeCodePoints",
                "results": results,
            }
        ],
    }


def to_sarif(
    findings: Iterable[Finding], *, root: Path, cwd: Path | None = None, rules: list[type[Rule]] | None = None
) -> str:
    return json.dumps(sarif_document(findings, root=root, cwd=cwd, rules=rules), indent=2, ensure_ascii=False) + "\n"
