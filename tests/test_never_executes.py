"""A scan reads code; it never runs it.

The hostile tree generated here would write a sentinel file from everywhere code can hide:
``setup.py``, a custom PEP 517 build backend, ``conftest.py``, ``sitecustomize.py``, a
``.pth`` file, package ``__init__.py`` and module bodies, modules shadowing flowtrace's own
dependencies, setter bodies and default-layer expressions (``__import__("os").system``),
and a planted fact cache of crafted pickles. Every command runs over it, in this process (with
an audit hook watching for code from the tree being executed) and as a user would run it, in
a child process started in the tree. ``pypi:`` sources are fetched from a local find-links
folder holding a malicious wheel and a malicious sdist.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from fixture_paths import SGLANG_LIKE
from flowtrace.cli.main import main

_WATCH: dict[str, object] = {"tree": None, "events": None}


def _audit(event: str, args: tuple) -> None:
    events = _WATCH["events"]
    if events is None:
        return
    tree = _WATCH["tree"]
    if event == "exec":
        filename = getattr(args[0], "co_filename", "") if args else ""
        if tree and str(filename).startswith(str(tree)):
            events.append((event, filename))
    elif event in {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen", "ctypes.dlopen"}:
        events.append((event, repr(args)[:200]))
    elif (
        event == "import"
        and tree
        and args
        and isinstance(args[2] if len(args) > 2 else None, str)
        and str(args[2]).startswith(str(tree))
    ):
        events.append((event, args[2]))


sys.addaudithook(_audit)


def sentinel(folder: Path, name: str) -> str:
    return f"open({str(folder / name)!r}, 'w').close()\n"


def hostile_tree(root: Path, sentinels: Path) -> Path:
    shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
    sentinels.mkdir(exist_ok=True)
    s = lambda name: sentinel(sentinels, name)  # noqa: E731
    (root / "setup.py").write_text(s("setup.py") + "from setuptools import setup\nsetup(name='evil', version='1.0')\n")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "evil_backend"\nbackend-path = ["."]\n\n'
        '[project]\nname = "evil"\nversion = "1.0"\n\n[tool.flowtrace]\nexclude = ["build/"]\n'
    )
    (root / "evil_backend.py").write_text(s("build-backend") + "def build_wheel(*a, **k):\n    " + s("build_wheel"))
    (root / "conftest.py").write_text(s("conftest.py"))
    (root / "sitecustomize.py").write_text(s("sitecustomize.py"))
    (root / "usercustomize.py").write_text(s("usercustomize.py"))
    (root / "evil.pth").write_text("import os; " + s("pth").strip() + "\n")
    (root / "__main__.py").write_text(s("__main__.py"))
    for shadow in ("click", "libcst", "json", "pathspec", "networkx", "jinja2", "flowtrace"):
        (root / f"{shadow}.py").write_text(s(f"shadow-{shadow}"))
    init = root / "sglang" / "__init__.py"
    init.write_text(s("sglang-__init__") + init.read_text())
    evil_call = f"__import__('os').system('touch {sentinels / 'system'}')"
    (root / "sglang" / "srt" / "models" / "evil.py").write_text(
        s("evil-module-body")
        + "from sglang.srt.models.alpha import AlphaModel\n\n\n"
        "class EvilModel(AlphaModel):\n"
        "    def forward(self, input_ids, hidden_states):\n"
        "        aux_hidden_states = []\n"
        "        for i in range(self.start_layer, self.end_layer):\n"
        "            if i in self.layers_to_capture:\n"
        f"                aux_hidden_states.append({evil_call})\n"
        "            hidden_states, residual = self.layers[i](hidden_states, None)\n"
        "        return hidden_states, aux_hidden_states\n\n\n"
        "class EvilForCausalLM:\n"
        "    def __init__(self, config):\n"
        "        self.config = config\n"
        "        self.model = EvilModel(config)\n\n"
        "    def get_eagle3_default_aux_hidden_state_layers(self):\n"
        f"        return {evil_call}\n\n"
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        f"        {s('setter-body').strip()}\n"
        "        if layer_ids is None:\n"
        f"            self.model.layers_to_capture = [{evil_call}, (lambda: {evil_call})(),"
        f" open({str(sentinels / 'open')!r}, 'w')]\n"
        "        else:\n"
        f"            self.model.layers_to_capture = [val + 1 + len(str({evil_call})) for val in layer_ids]\n\n\n"
        "EntryClass = EvilForCausalLM\n"
    )
    return root


def assert_nothing_ran(sentinels: Path, events: list | None = None) -> None:
    assert sorted(p.name for p in sentinels.iterdir()) == []
    if events is not None:
        assert events == [], events


@pytest.fixture
def hostile(tmp_path):
    sentinels = tmp_path / "sentinels"
    root = hostile_tree(tmp_path / "tree", sentinels)
    before = set(sys.modules)
    yield root, sentinels
    assert not {m for m in set(sys.modules) - before if m.startswith(("sglang", "evil", "conftest", "sitecustomize"))}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def plant_malicious_cache(root: Path, sentinels: Path) -> int:
    """Scan once to fill the tree's own ``.flowtrace_cache``, then replace every cache file by
    a well-sealed pickle that would call os.system when loaded. Returns how many were planted."""
    from flowtrace.index.cache import seal, user_key

    assert run("scan", root, "--jobs", "1").exit_code in (0, 1)

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {sentinels / 'cache-pickle'}",))

    payload = seal(pickle.dumps(Evil()), user_key())  # as if the key leaked: the unpickler must still refuse
    planted = 0
    for path in (root / ".flowtrace_cache").rglob("*.pickle"):
        path.write_bytes(payload)
        planted += 1
    return planted


def test_every_command_in_process_runs_nothing_from_the_tree(hostile, tmp_path, monkeypatch):
    root, sentinels = hostile
    planted = plant_malicious_cache(root, sentinels)
    assert planted > 1, "the scan must have written a cache to plant into"
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"architectures": ["EvilForCausalLM"], "num_hidden_layers": 32, "hidden_size": 64}))
    draft = tmp_path / "draft.json"
    draft.write_text(
        json.dumps({"architectures": ["LlamaForCausalLMEagle3"], "target_hidden_size": 64, "eagle_config": {}})
    )
    events: list = []
    _WATCH.update(tree=root, events=events)
    try:
        results = [
            run("scan", root, "--format", "json", "--jobs", "1"),  # reads the planted cache
            run("scan", root, "--format", "html", "--no-cache", "--jobs", "2", "-o", tmp_path / "r.html"),
            run("check", root, "--output-format", "sarif", "--jobs", "1"),
            run("trace", root, "-m", "EvilForCausalLM", "-L", "32", "--no-cache", "--jobs", "1"),
            run(
                "trace",
                root,
                "-m",
                "EvilForCausalLM",
                "--layer-ids",
                "-1,2,30",
                "-L",
                "32",
                "--no-cache",
                "--jobs",
                "1",
            ),
            run("compat", root, "--target-config", target, "--draft-config", draft, "--no-cache", "--jobs", "1"),
            run("graph", root, "--format", "dot", "--no-cache", "--jobs", "1"),
        ]
        scan_file = tmp_path / "scan.json"
        scan_file.write_text(results[0].stdout)
        results.append(run("report", "--scan", scan_file, "-o", tmp_path / "report.html"))
    finally:
        _WATCH.update(tree=None, events=None)
    for res in results:
        assert res.exit_code in (0, 1), res.output
        assert "Traceback" not in res.output
    assert_nothing_ran(sentinels, events)
    doc = json.loads(results[0].stdout)
    names = {m["class"] for m in doc["models"]}
    assert {"AlphaForCausalLM", "EvilForCausalLM"} <= names, "the planted cache is refused and the tree re-read"
    assert "EvilForCausalLM" in results[3].stdout


@pytest.mark.parametrize("entry", ["module", "script"])
def test_cli_started_inside_the_tree_runs_nothing_from_it(hostile, entry):
    """As a user runs it, with the hostile tree as the working folder (where ``json.py``,
    ``click.py`` and ``sitecustomize.py`` sit). ``python -m`` is run isolated (-I): a plain
    ``python -m anything`` puts the working folder first on sys.path, which is Python's
    behaviour, not flowtrace's."""
    root, sentinels = hostile
    plant_malicious_cache(root, sentinels)
    if entry == "module":
        command = [sys.executable, "-I", "-m", "flowtrace"]
    else:
        script = shutil.which("flowtrace")
        if script is None:
            pytest.skip("the flowtrace console script is not installed")
        command = [script]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    for args in (["scan", ".", "--format", "json"], ["check", ".", "--jobs", "2"], ["graph", ".", "--no-cache"]):
        proc = subprocess.run(command + args, cwd=root, capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode in (0, 1), proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr
    assert_nothing_ran(sentinels)


# -- pypi: sources -----------------------------------------------------------------------------------


def evil_wheel(folder: Path, sentinels: Path) -> Path:
    name, version = "evilwheel", "1.0"
    dist = f"{name}-{version}.dist-info"
    s = lambda n: sentinel(sentinels, n)  # noqa: E731
    members = {
        f"{name}/__init__.py": s("wheel-__init__"),
        f"{name}/models/evil.py": (
            s("wheel-module")
            + "class EvilWheelForCausalLM:\n"
            "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
            "        self.layers_to_capture = [i + 1 for i in layer_ids]\n\n\n"
            "EntryClass = EvilWheelForCausalLM\n"
        ),
        "evilwheel.pth": "import os; " + s("wheel-pth"),
        "setup.py": s("wheel-setup.py"),
        f"{name}-{version}.data/scripts/evil": "#!/bin/sh\ntouch " + str(sentinels / "wheel-script") + "\n",
        ".flowtrace_cache/facts/00/planted.pickle": "",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: flowtrace-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/entry_points.txt": "[console_scripts]\nevil = evilwheel:run\n",
        f"{dist}/RECORD": "",
    }
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, text in members.items():
            zf.writestr(member, text)
    return path


def evil_sdist(folder: Path, sentinels: Path) -> Path:
    """An sdist-only release whose metadata preparation would run its setup.py and backend."""
    name, version = "evilsdist", "1.0"
    base = folder / "src" / f"{name}-{version}"
    base.mkdir(parents=True)
    (base / "setup.py").write_text(
        sentinel(sentinels, "sdist-setup.py")
        + f"from setuptools import setup\nsetup(name={name!r}, version={version!r})\n"
    )
    (base / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "evil_backend"\nbackend-path = ["."]\n'
    )
    (base / "evil_backend.py").write_text(
        sentinel(sentinels, "sdist-backend") + "from setuptools.build_meta import *\n"
    )
    (base / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    path = folder / f"{name}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        tf.add(base, arcname=f"{name}-{version}")
    shutil.rmtree(folder / "src")
    return path


@pytest.fixture
def evil_index(tmp_path, monkeypatch):
    links = tmp_path / "links"
    links.mkdir()
    sentinels = tmp_path / "pypi-sentinels"
    sentinels.mkdir()
    evil_wheel(links, sentinels)
    evil_sdist(links, sentinels)
    monkeypatch.setenv("FLOWTRACE_PIP_ARGS", f"--no-index --find-links {links}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return links, sentinels


def test_a_malicious_wheel_is_scanned_without_running_it(evil_index, tmp_path):
    links, sentinels = evil_index
    res = run("scan", "pypi:evilwheel==1.0", "--format", "json", "--no-cache", "--jobs", "1")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert any(m["class"] == "EvilWheelForCausalLM" for m in doc["models"])
    res = run("check", "pypi:evilwheel==1.0", "--jobs", "1")
    assert res.exit_code in (0, 1) and "Traceback" not in res.output
    tree = tmp_path / "xdg" / "flowtrace" / "pypi" / "evilwheel-1.0"
    assert (tree / "evilwheel.pth").is_file() and not (tree / ".flowtrace_cache" / "facts" / "00").exists()
    assert_nothing_ran(sentinels)


@pytest.mark.parametrize("extra", ["", "--no-binary :all:"])
def test_an_sdist_only_release_is_refused_without_building_it(evil_index, monkeypatch, extra):
    links, sentinels = evil_index
    if extra:
        monkeypatch.setenv("FLOWTRACE_PIP_ARGS", f"--no-index --find-links {links} {extra}")
    res = run("scan", "pypi:evilsdist==1.0", "--no-cache")
    assert res.exit_code == 2, res.output
    assert "wheels only" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.output
    assert_nothing_ran(sentinels)
