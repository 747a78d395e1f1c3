"""Rule metadata as text and Markdown: ``flowtrace explain``, SARIF ``help`` and ``docs/rules.md``.

``docs/rules.md`` is generated from the registered rules (``python -m flowtrace.cli.check
--write-rules-doc docs/rules.md``); a test keeps the committed file fresh. Each rule has a
``## FT001`` heading, so :func:`help_uri` (``.../docs/rules.md#ft001``) lands on it.
"""

from __future__ import annotations

from flowtrace.checks.base import Example, Rule
from flowtrace.model.consequence import Consequence, how_severity_follows, severity_of

DOCS_URL = "https://github.com/flowtrace/flowtrace/blob/main/docs/rules.md"
INFORMATION_URI = "https://github.com/flowtrace/flowtrace"
GENERATOR_COMMAND = "python -m flowtrace.cli.check --write-rules-doc docs/rules.md"


def registered_rules() -> list[type[Rule]]:
    """Every registered rule, sorted by code (imports the rule modules)."""
    from flowtrace.checks.base import all_rules

    all_rules()
    return [Rule.registry[c] for c in sorted(Rule.registry)]


def help_uri(code: str) -> str:
    return f"{DOCS_URL}#{code.lower()}"


def _examples_text(title: str, examples: tuple[Example, ...]) -> list[str]:
    if not examples:
        return []
    out = [f"{title}:"]
    for ex in examples:
        out.extend("    " + line for line in ex.code.splitlines() or [""])
        if ex.note:
            out.append(f"      ({ex.note})")
    return out


def _consequence_word(consequence: Consequence | None) -> str:
    return consequence.value if consequence is not None else "none (a note)"


def severity_words(rule: type[Rule]) -> str:
    """The rule's severity and how a finding's may differ: ``warning (default consequence
    fragile; a finding may instead be silent_wrong -> error)``."""
    others = [c for c in rule.other_consequences if c != rule.consequence]
    words = f"{rule.severity} (default consequence {_consequence_word(rule.consequence)}"
    if others:
        words += "; a finding may instead be " + ", ".join(
            f"{_consequence_word(c)} -> {severity_of(c)}" for c in others
        )
    return words + ")"


def rule_text(rule: type[Rule]) -> str:
    """The full plain-text explanation (``flowtrace explain``, SARIF ``help.text``)."""
    lines = [
        f"{rule.code} {rule.name}: {severity_words(rule)}",
        "",
        rule.summary,
        "",
        f"Why: {rule.rationale}",
        "",
        f"Fix: {rule.fix}",
        "",
        f"Severity: {how_severity_follows()}",
    ]
    for title, examples in (("Valid", rule.valid), ("Invalid", rule.invalid)):
        block = _examples_text(title, examples)
        if block:
            lines.extend(["", *block])
    lines.extend(["", f"Docs: {help_uri(rule.code)}"])
    return "\n".join(lines) + "\n"


def _fence(code: str) -> str:
    fence = "~~~" if "```" in code else "```"
    return f"{fence}python\n{code.rstrip()}\n{fence}"


def _examples_markdown(title: str, examples: tuple[Example, ...]) -> list[str]:
    if not examples:
        return []
    out = [f"**{title}**", ""]
    for ex in examples:
        if ex.note:
            out.extend([ex.note.rstrip() + ":", ""])
        out.extend([_fence(ex.code), ""])
    return out


def rule_markdown(rule: type[Rule], *, heading: str = "##") -> str:
    """One rule in Markdown (a section of ``docs/rules.md``, SARIF ``help.markdown``)."""
    lines = [
        f"{heading} {rule.code}",
        "",
        f"`{rule.name}` · **{rule.severity}** · {severity_words(rule).split(' ', 1)[1].strip('()')}",
        "",
        rule.summary,
        "",
        f"**Why.** {rule.rationale}",
        "",
        f"**Fix.** {rule.fix}",
        "",
    ]
    lines += _examples_markdown("Valid", rule.valid)
    lines += _examples_markdown("Invalid", rule.invalid)
    return "\n".join(lines).rstrip() + "\n"


def rules_markdown(rules: list[type[Rule]] | None = None) -> str:
    """The whole ``docs/rules.md``."""
    rules = registered_rules() if rules is None else rules
    lines = [
        "# flowtrace rules",
        "",
        f"<!-- Generated from the rule metadata by `{GENERATOR_COMMAND}`; do not edit by hand. -->",
        "",
        "`flowtrace check PATH` runs every rule below (select them with `--select`/`--ignore` or",
        "`[tool.flowtrace]`); `flowtrace explain CODE` prints one of them. Silence a single finding",
        "with `# flowtrace: ignore[CODE]` on its line. See [ci.md](ci.md) for the CI contract.",
        "",
        how_severity_follows() + " Consequences that depend on layer ids are graded against the draft",
        "catalogue ([drafts.md](drafts.md)): a finding names the published drafts it affects.",
        "",
        "| code | name | severity | default consequence | may instead be | summary |",
        "|---|---|---|---|---|---|",
    ]
    for r in rules:
        summary = r.summary.replace("|", "\\|").replace("\n", " ")
        others = (
            ", ".join(f"{_consequence_word(c)} ({severity_of(c)})" for c in r.other_consequences if c != r.consequence)
            or "-"
        )
        lines.append(
            f"| [{r.code}](#{r.code.lower()}) | `{r.name}` | {r.severity} | {_consequence_word(r.consequence)} |"
            f" {others} | {summary} |"
        )
    lines.append("")
    for r in rules:
        lines.append(rule_markdown(r))
    return "\n".join(lines).rstrip() + "\n"
