"""Rule metadata as text and Markdown: ``flowtrace explain``, SARIF ``help`` and ``docs/rules.md``.

``docs/rules.md`` is generated from the registered rules (``python -m flowtrace.cli.check
--write-rules-doc docs/rules.md``); a test keeps the committed file fresh. Each rule has a
``## FT001`` heading, so :func:`help_uri` (``.../docs/rules.md#ft001``) lands on it.
"""

from __future__ import annotations

from flowtrace.checks.base import Example, Rule

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


def rule_text(rule: type[Rule]) -> str:
    """The full plain-text explanation (``flowtrace explain``, SARIF ``help.text``)."""
    lines = [f"{rule.code} {rule.name} ({rule.severity})", "", rule.summary, "", f"Why: {rule.rationale}", "", f"Fix: {rule.fix}"]
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
        f"`{rule.name}` · **{rule.severity}**",
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
        "| code | name | severity | summary |",
        "|---|---|---|---|",
    ]
    for r in rules:
        summary = r.summary.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| [{r.code}](#{r.code.lower()}) | `{r.name}` | {r.severity} | {summary} |")
    lines.append("")
    for r in rules:
        lines.append(rule_markdown(r))
    return "\n".join(lines).rstrip() + "\n"
