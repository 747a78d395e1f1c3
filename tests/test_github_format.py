"""GitHub Actions workflow commands: one annotation per finding, escaped as the runner parses them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowtrace.checks.base import Finding
from flowtrace.cli.check import check
from flowtrace.render.github import escape_data, escape_property, to_github

FIXTURES = Path(__file__).parent / "fixtures" / "engines"
# ::level key=value,key=value::message   (values and message carry no raw separators)
COMMAND = re.compile(r"^::(error|warning|notice) (file=[^,:\r\n]*,line=\d+,title=[^,:\r\n]*)::([^\r\n]*)$")


def unescape(value: str) -> str:
    """What the runner does with an escaped value (the inverse of the toolkit's escaping)."""
    for escaped, raw in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        value = value.replace(escaped, raw)
    return value


def parse(line: str) -> tuple[str, dict[str, str], str]:
    m = COMMAND.match(line)
    assert m, line
    props = dict(p.split("=", 1) for p in m.group(2).split(","))
    return m.group(1), {k: unescape(v) for k, v in props.items()}, unescape(m.group(3))


NASTY = "100% of ids: -1, 2\r\nline two %0A literal"


def test_data_escaping_keeps_separators_but_not_newlines_or_percent():
    escaped = escape_data(NASTY)
    assert "\n" not in escaped and "\r" not in escaped
    assert ":" in escaped and "," in escaped  # allowed in the message part
    assert unescape(escaped) == NASTY


def test_property_escaping_also_hides_colon_and_comma():
    escaped = escape_property("C:\\src,dir/a%b.py\n")
    assert not set(":,\r\n") & set(escaped)
    assert unescape(escaped) == "C:\\src,dir/a%b.py\n"


def test_percent_is_escaped_before_the_rest():
    assert unescape(escape_data("%0A")) == "%0A"
    assert unescape(escape_property("%3A")) == "%3A"


@pytest.mark.parametrize("severity, level", [("error", "error"), ("warning", "warning"), ("info", "notice")])
def test_one_command_per_finding(tmp_path, severity, level):
    f = Finding("FT009", "unreachable-embedding", severity, "pkg/a,b:c.py", 0, NASTY, None, "fp", hint="fix: it, now")
    out = to_github([f], root=tmp_path, cwd=tmp_path)
    assert out.endswith("\n") and out.count("\n") == 1
    got_level, props, message = parse(out.rstrip("\n"))
    assert got_level == level
    assert props["file"] == "pkg/a,b:c.py"
    assert props["line"] == "1"  # a whole-file finding (line 0) still gets a valid line
    assert props["title"] == "FT009 unreachable-embedding"
    assert message.startswith(NASTY) and "fix: it, now" in message


def test_cli_github_format_on_fixture(tmp_path):
    def run(fmt: str):
        return CliRunner().invoke(
            check, [str(FIXTURES / "sglang_like"), "-j", "1", "--cache-dir", str(tmp_path), "--output-format", fmt]
        )

    doc = json.loads(run("json").stdout)
    res = run("github")
    assert res.exit_code == doc["summary"]["exit_code"]
    lines = res.stdout.splitlines()
    assert len(lines) == len(doc["findings"])
    levels = {"error": "error", "warning": "warning", "info": "notice"}
    for line, f in zip(lines, doc["findings"]):
        level, props, message = parse(line)
        assert level == levels[f["severity"]]
        assert props["title"] == f"{f['rule']} {f['name']}"
        assert int(props["line"]) == max(f["line"], 1)
        assert message.startswith(f["message"])
        assert (Path(props["file"]).is_absolute() is False) and props["file"].endswith(f["file"])
