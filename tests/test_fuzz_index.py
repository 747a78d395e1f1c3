"""Property-based fuzzing of the indexer and the layer-id evaluator.

Generated Python (hypothesmith when installed, and our own engine-shaped strategies that
always run) and mutated fixture files go to the indexer (``analyze_bytes`` and the
class-table tier), and then through a whole scan (resolution, rules, graph, trace): nothing
raises. Generated expressions and setter functions go to the evaluator: it returns a value
or refuses with CannotEvaluate, and never executes anything, watched by an audit hook (no
``exec`` of a code object, no process, no file opened for writing) and sentinel files.
"""

from __future__ import annotations

import atexit
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixture_paths import SGLANG_LIKE
from flowtrace.model import facts as F
from flowtrace.index.class_table import table_facts
from flowtrace.index.parse import analyze_bytes
from flowtrace.analysis.function_interpreter import FunctionRun, run_function
from flowtrace.model.safe_eval import CannotEvaluate, LayerStack, evaluate
from flowtrace.engines.profiles import Conventions, load_all

CONV = Conventions.merge(load_all())
_BASE = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck))


def fuzz(max_examples: int) -> settings:
    return settings(_BASE, max_examples=max_examples)
SENTINELS = Path(tempfile.mkdtemp(prefix="flowtrace-fuzz-sentinels-"))
atexit.register(shutil.rmtree, SENTINELS, True)

_EVENTS: list | None = None


def _audit(event: str, args: tuple) -> None:
    if _EVENTS is None:
        return
    if event in {
        "exec",
        "os.system",
        "subprocess.Popen",
        "os.posix_spawn",
        "os.exec",
        "os.fork",
        "os.spawn",
        "ctypes.dlopen",
        "socket.connect",
    }:
        _EVENTS.append(event)
    elif event == "open" and len(args) > 1 and isinstance(args[1], str) and any(c in args[1] for c in "wax+"):
        _EVENTS.append(f"open for writing: {args[0]}")


sys.addaudithook(_audit)


class watching:
    """Record forbidden audit events while the block runs."""

    def __enter__(self):
        global _EVENTS
        _EVENTS = []
        return self

    def __exit__(self, *exc):
        global _EVENTS
        self.events, _EVENTS = _EVENTS, None
        return False


def check_facts(ff: F.FileFacts, path: str) -> None:
    assert isinstance(ff, F.FileFacts) and ff.path == path
    for d in ff.diagnostics:
        assert d.file == path and isinstance(d.reason, str) and d.reason



def _import_the_indexer_eagerly() -> None:
    """The indexer imports its site shapes and helpers lazily (a package walk on the first
    call), and an import runs each module's code: an ``exec`` event. Import them all before any
    block is watched, so the hook sees only what indexing a scanned file does, whichever test
    runs first (alone, the first example used to see the indexer's own imports)."""
    import importlib
    import pkgutil

    import flowtrace.analysis
    import flowtrace.index

    for package in (flowtrace.index, flowtrace.analysis):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            importlib.import_module(info.name)
    warm = (
        "class M:\n    def forward(self, h):\n        for i in range(2):\n            if i in self.layers_to_capture:\n"
        "                aux.append(h)\n"
    )
    analyze_bytes("sglang/srt/models/warm.py", warm.encode(), CONV)


_import_the_indexer_eagerly()

# -- generated programs ------------------------------------------------------------------------

try:
    import hypothesmith
except ImportError:  # pragma: no cover - optional (pip install hypothesmith)
    hypothesmith = None


@pytest.mark.skipif(hypothesmith is None, reason="hypothesmith is not installed (pip install hypothesmith)")
@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # hypothesmith compile()s its programs to check them
@fuzz(60)
@given(source=st.one_of(hypothesmith.from_grammar(), hypothesmith.from_node()) if hypothesmith else st.nothing())
def test_hypothesmith_programs_never_break_the_indexer(source):
    data = ("# layers_to_capture set_eagle3_layers_to_capture\n" + source).encode("utf-8", "surrogatepass")
    with watching() as w:
        check_facts(analyze_bytes("pkg/gen.py", data, CONV), "pkg/gen.py")
        check_facts(table_facts("pkg/gen.py", data, CONV), "pkg/gen.py")
    assert not [e for e in w.events if e != "exec"], w.events


NAMES = st.sampled_from(
    [
        "layer_ids",
        "num_layers",
        "i",
        "val",
        "ids",
        "self.config.num_hidden_layers",
        "len(self.model.layers)",
        "self.layers_to_capture",
        "self.pp_group.is_last_rank",
        "x",
    ]
)
DANGER = st.sampled_from([
    f"__import__('os').system('touch {SENTINELS}/system')",
    f"open('{SENTINELS}/open', 'w')",
    f"exec(\"open('{SENTINELS}/exec', 'w')\")",
    f"eval(\"__import__('os').mkdir('{SENTINELS}/eval')\")",
    "().__class__.__bases__[0].__subclasses__()",
    "globals()['__builtins__']",
    "getattr(__builtins__, 'exec')",
    f"(lambda: open('{SENTINELS}/lambda', 'w'))()",
    f"[open('{SENTINELS}/listcomp', 'w') for _ in range(1)]",
    "breakpoint()",
    "input()",
    "9 ** 9 ** 9",
    "'x' * 10 ** 12",
    "list(range(10 ** 12))",
    "[i for i in range(10 ** 6) for j in range(10 ** 6)]",
])
SAFE_ATOMS = st.one_of(st.integers(-3, 70).map(str), NAMES, st.sampled_from(["None", "True", "[]", "()", "'a'", "-1"]))
ATOMS = st.one_of(SAFE_ATOMS, SAFE_ATOMS, SAFE_ATOMS, DANGER)  # mostly evaluable, some hostile


def _compose(children):
    return st.one_of(
        st.tuples(
            children,
            st.sampled_from(["+", "-", "*", "//", "%", "**", "<", "==", "in", "and", "or", "if x else"]),
            children,
        ).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.lists(children, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.tuples(children, children).map(lambda t: f"[{t[0]} + 1 for val in {t[1]}]"),
        st.tuples(
            st.sampled_from(
                [
                    "len",
                    "list",
                    "sorted",
                    "range",
                    "min",
                    "max",
                    "sum",
                    "tuple",
                    "set",
                    "reversed",
                    "abs",
                    "int",
                    "str",
                    "print",
                    "type",
                    "vars",
                    "dir",
                    "id",
                ]
            ),
            children,
        ).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(children, children).map(lambda t: f"({t[0]})[{t[1]}]"),
        st.tuples(children, st.sampled_from(["__class__", "append", "layers", "real", "__dict__"])).map(
            lambda t: f"({t[0]}).{t[1]}"
        ),
        children.map(lambda c: f"(not {c})"),
        children.map(lambda c: f"(lambda: {c})"),
    )


EXPRESSIONS = st.recursive(ATOMS, _compose, max_leaves=12)


def _setter(body_exprs: list[str], guard: str, param_default: str) -> str:
    lines = [f"    def set_eagle3_layers_to_capture(self, layer_ids={param_default}):"]
    lines.append(f"        if not ({guard}):\n            return")
    lines.append("        num_layers = self.config.num_hidden_layers")
    lines.append("        if layer_ids is None:")
    lines.append(f"            self.model.layers_to_capture = {body_exprs[0]}")
    lines.append("        else:")
    lines.append(f"            self.model.layers_to_capture = {body_exprs[1]}")
    return "\n".join(lines)


@st.composite
def engine_modules(draw) -> str:
    """Engine-shaped modules: a model with a capture loop and a setter built from random expressions."""
    name = draw(st.sampled_from(["Llama", "Qwen", "Fuzz", "Ünï", "X_1"]))
    loop_range = draw(
        st.sampled_from(
            [
                "range(self.start_layer, self.end_layer)",
                "range(len(self.layers))",
                f"range({draw(EXPRESSIONS)})",
                "self.layers",
            ]
        )
    )
    captured = draw(st.sampled_from(["hidden_states + residual", "hidden_states", draw(EXPRESSIONS)]))
    point = draw(st.sampled_from(["before", "after", "helper", "none"]))
    capture = {
        "before": (
            "            if i in self.layers_to_capture:\n"
            f"                aux_hidden_states.append({captured})\n"
            "            hidden_states, residual = self.layers[i](hidden_states, residual)"
        ),
        "after": (
            "            hidden_states, residual = self.layers[i](hidden_states, residual)\n"
            "            if i in self.layers_to_capture:\n"
            f"                aux_hidden_states.append({captured})"
        ),
        "helper": (
            "            hidden_states, residual = self.layers[i](hidden_states, residual,"
            " capture_output=aux_hidden_states.capture if i in self.layers_to_capture else None)"
        ),
        "none": "            hidden_states, residual = self.layers[i](hidden_states, residual)",
    }[point]
    setter = _setter(
        [draw(EXPRESSIONS), draw(EXPRESSIONS)],
        draw(EXPRESSIONS),
        draw(st.sampled_from(["None", "[]", "(1, 2)", draw(EXPRESSIONS)])),
    )
    extra = draw(
        st.sampled_from(
            [
                "",
                "EntryClass = {n}ForCausalLM\n",
                "EntryClass = [{n}ForCausalLM, {n}Model]\n",
                "_MODELS = {{'{n}ForCausalLM': ('fuzz', '{n}ForCausalLM')}}\n",
            ]
        )
    ).format(n=name)
    return (
        "import torch\n\n\n"
        f"class {name}Model(Base):\n"
        "    def __init__(self, config):\n"
        "        self.layers_to_capture = []\n"
        "        self.start_layer, self.end_layer = 0, config.num_hidden_layers\n\n"
        "    def forward(self, input_ids, hidden_states, residual=None):\n"
        "        aux_hidden_states = []\n"
        f"        for i in {loop_range}:\n{capture}\n"
        "        return hidden_states, torch.cat(aux_hidden_states, dim=-1)\n\n\n"
        f"class {name}ForCausalLM({draw(st.sampled_from(['Base', f'{name}Model', 'AlphaForCausalLM', 'object']))}):\n"
        "    def __init__(self, config):\n"
        f"        self.model = {name}Model(config)\n"
        "        self.capture_aux_hidden_states = False\n\n"
        f"{setter}\n\n\n{extra}"
    )


@fuzz(80)
@given(source=engine_modules())
def test_engine_shaped_modules_never_break_the_indexer(source):
    with watching() as w:
        ff = analyze_bytes("sglang/srt/models/fuzz.py", source.encode(), CONV)
        check_facts(ff, "sglang/srt/models/fuzz.py")
    assert w.events == [], w.events
    assert not any(SENTINELS.iterdir())


MUTATIONS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "flip",
                "insert",
                "delete",
                "truncate",
                "duplicate",
                "drop-line",
                "swap-lines",
                "rewrite",
                "rewrite",
                "rewrite",
            ]
        ),
        st.integers(0, 10**6),
        st.binary(min_size=1, max_size=8),
    ),
    min_size=1,
    max_size=6,
)
# Rewrites keep the file valid Python while changing what the analysers see.
REWRITES = [
    (b"layers_to_capture", b"aux_hidden_state_layers"),
    (b" + 1", b" - 1"),
    (b"val + 1", b"val"),
    (b"append(", b"extend("),
    (b"range(", b"reversed(range("),
    (b"is None", b"is not None"),
    (b"self.model", b"self.language_model"),
    (b"return", b"yield"),
    (b"def ", b"async def "),
    (b"for ", b"async for "),
    (b"if ", b"while "),
    (b"[", b"(["),
    (b"EntryClass = ", b"EntryClass = None and "),
    (b"layer_ids", b"*layer_ids"),
    (b"i in ", b"i not in "),
    (b"class ", b"@dataclass\nclass "),
]
FIXTURE_FILES = sorted(p for p in SGLANG_LIKE.rglob("*.py") if p.stat().st_size > 200)


def mutate(data: bytes, mutations) -> bytes:
    buf = bytearray(data)
    for op, pos, chunk in mutations:
        if not buf:
            break
        pos %= len(buf)
        if op == "flip":
            buf[pos] ^= chunk[0] or 1
        elif op == "insert":
            buf[pos:pos] = chunk
        elif op == "delete":
            del buf[pos : pos + len(chunk) * 4]
        elif op == "truncate":
            del buf[pos:]
        elif op == "rewrite":
            before, after = REWRITES[chunk[0] % len(REWRITES)]
            hits = [i for i in range(len(buf)) if buf.startswith(before, i)]
            if hits:
                at = hits[pos % len(hits)]
                buf[at : at + len(before)] = after
        else:
            lines = bytes(buf).splitlines(keepends=True)
            n = pos % len(lines)
            if op == "duplicate":
                lines.insert(n, lines[n])
            elif op == "drop-line":
                del lines[n]
            else:
                m = (n + 1 + chunk[0]) % len(lines)
                lines[n], lines[m] = lines[m], lines[n]
            buf = bytearray(b"".join(lines))
    return bytes(buf)


@fuzz(120)
@given(index=st.integers(0, len(FIXTURE_FILES) - 1), mutations=MUTATIONS)
def test_mutated_fixture_files_never_break_the_indexer(index, mutations):
    path = FIXTURE_FILES[index]
    data = mutate(path.read_bytes(), mutations)
    rel = path.relative_to(SGLANG_LIKE).as_posix()
    check_facts(analyze_bytes(rel, data, CONV), rel)
    check_facts(table_facts(rel, data, CONV), rel)


@fuzz(25)
@given(
    modules=st.lists(engine_modules(), min_size=1, max_size=3), mutations=st.lists(MUTATIONS, min_size=0, max_size=2)
)
def test_whole_scans_of_generated_trees_never_raise(modules, mutations):
    """Fuzzed facts then go through resolution, every rule, the graph and trace."""
    from flowtrace import api
    from flowtrace.index.build import IndexOptions

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tree"
        shutil.copytree(SGLANG_LIKE, root, ignore=shutil.ignore_patterns(".flowtrace_cache", "__pycache__"))
        models = root / "sglang" / "srt" / "models"
        for i, source in enumerate(modules):
            data = source.encode()
            if i < len(mutations):
                data = mutate(data, mutations[i])
            (models / f"fuzz_{i}.py").write_bytes(data)
        with watching() as w:
            result = api.scan(root, options=IndexOptions(jobs=1, use_cache=False, progress=False))
            api.findings(result)
            result.graph
            for row in result.rows:
                for ids in (None, [-1, 2, 30], [10**9]):
                    try:
                        api.trace(result, row.qualname, ids, 32)
                    except api.UsageError:
                        pass
        # "os.fork": the scan's own parse workers (every parse runs in one, so that no file
        # can hang or crash the scan); what runs in them is caught by the sentinels below.
        assert not [e for e in w.events if e not in {"exec", "os.fork"}], w.events
        assert not any(SENTINELS.iterdir())


# -- the evaluator -----------------------------------------------------------------------------------

EVAL_NAMES = {
    "num_layers": 32,
    "layer_ids": [-1, 2, 30],
    "ids": (1, 2),
    "self.config.num_hidden_layers": 32,
    "len(self.model.layers)": 32,
    "self.layers_to_capture": [3, 17],
    "self.pp_group.is_last_rank": True,
    "x": 1,
    "i": 3,
    "val": 4,
    "self.model.layers": LayerStack(32),
}


@fuzz(300)
@given(expression=st.one_of(EXPRESSIONS, st.text(max_size=60)))
def test_the_evaluator_only_returns_or_refuses_and_never_executes(expression):
    with watching() as w:
        try:
            evaluate(expression, EVAL_NAMES)
        except CannotEvaluate:
            pass
    assert w.events == [], (expression, w.events)
    assert not any(SENTINELS.iterdir()), expression


@fuzz(150)
@given(
    body=st.lists(EXPRESSIONS, min_size=2, max_size=2),
    guard=EXPRESSIONS,
    default=EXPRESSIONS,
    ids=st.one_of(st.none(), st.lists(st.integers(-5, 70), max_size=5)),
)
def test_run_function_only_records_and_never_executes(body, guard, default, ids):
    source = "class C:\n" + _setter(body, guard, default)
    function = "\n".join(line[4:] for line in source.splitlines()[1:])
    with watching() as w:
        try:
            run = run_function(function, {"layer_ids": ids}, EVAL_NAMES)
            assert isinstance(run, FunctionRun)
        except CannotEvaluate:
            pass
    assert w.events == [], (function, w.events)
    assert not any(SENTINELS.iterdir()), function


@fuzz(100)
@given(source=st.text(max_size=200))
def test_run_function_on_arbitrary_text(source):
    with watching() as w:
        try:
            run_function(source, {"layer_ids": [1]}, EVAL_NAMES)
        except CannotEvaluate:
            pass
    assert w.events == [], w.events
