"""The package's shape, checked: no import cycle between mtpbench's modules (a lazy import inside a function
is a dependency too: it is how the three cycles of issue 18 hid), dependencies pointing one way, and the
modules past ~400 lines named as a warning (a smell to look at, never a limit)."""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "mtpbench"
MAX_LINES = 400
# The stages, lowest first. A module may import its own stage and the stages its rank allows; the base
# modules (schema, errors, config, shipped, weights) are below every stage. engine/, patches/, fixes/ and
# probes/ run inside a build's interpreter: of mtpbench they import schema.py only (and the stages below).
BASE = {"", "schema", "errors", "config", "specs", "shipped", "weights"}
MAY_IMPORT = {
    "store": {"store"},
    "judge": {"judge", "store", "fixes", "patches"},
    "render": {"render", "judge", "store", "fixes", "patches"},
    "run": {"run", "store", "engine", "patches", "fixes", "buildprobes"},
    # The worker applies a variant's patches in the engine's process, through the registry (fixes/registry).
    "engine": {"engine", "patches", "fixes"},
    "patches": {"patches"},  # patches/contract.py is the leaf every patch and fix imports
    "fixes": {"fixes", "patches"},  # the registry names patches/ and fixes/ modules, so it lives here
    "buildprobes": {"buildprobes"},  # the doctor's and the platform's probes: `python -m`, standard library only
    "fixtures": {"fixtures"},
    # The tiny pairs' training code (mtpbench/training/). The DeepSeek MTP and EAGLE-3 trainers train the
    # reference's own modules (reference/deepseek_mtp.py, reference/eagle.py: vLLM's semantics written once), so
    # the drafter each trains is the drafter the reference replays.
    "training": {"training", "reference"},
    # The reference (issue 29) replays a run's prompts from the weights: it reads the run through store/,
    # renders prompts as the worker does (engine/chat.py) and writes runs/<id>/reference.jsonl through
    # store/reference_records.py, which is how judge/ reads it without importing torch.
    "reference": {"reference", "store", "engine"},
}
LEAVES = {"engine", "patches", "fixes", "buildprobes"}  # base for them is schema.py alone


def _modules(root: Path = PKG) -> dict[str, Path]:
    out = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


# A string that names a mtpbench module ("mtpbench.x.y" or a registry's "mtpbench.x.y:function") is an
# import too: the registry imports it by name, `python -m` runs it. Counting them is how a circle closed
# through a registry string (issue 27: patches named "mtpbench.fixes.ascend_gemma4:apply" while the fix
# imported the patches package) shows.
_MODULE_STRING = re.compile(r"mtpbench(?:\.\w+)+(?::\w+)?")


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level `NAME = "text"` constants (what `import_module(NAME)` may name)."""
    out: dict[str, str] = {}
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        out.update({t.id: value.value for t in targets if isinstance(t, ast.Name)})
    return out


def _calls(node: ast.AST, function: str) -> bool:
    """`node` is a call of `function` or `anything.function`."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)) == function


def _import_module_target(node: ast.Call, constants: dict[str, str]) -> str | None:
    """The module `importlib.import_module(...)` / `import_module(...)` names, for a literal or a constant."""
    if not _calls(node, "import_module") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.Name):
        return constants.get(arg.id)
    return None


def _named_modules(node: ast.AST, pkg: list[str], constants: dict[str, str]) -> list[str]:
    """mtpbench module names (without the `mtpbench.` prefix) that one AST node imports or names."""
    if isinstance(node, ast.Import):
        return [a.name.removeprefix("mtpbench").lstrip(".") for a in node.names if a.name.split(".")[0] == "mtpbench"]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = pkg[: len(pkg) - (node.level - 1)] if node.level > 1 else pkg
            mod = ".".join([*base, *(node.module.split(".") if node.module else [])])
        elif node.module and node.module.split(".")[0] == "mtpbench":
            mod = node.module.removeprefix("mtpbench").lstrip(".")
        else:
            return []
        return [mod] + [f"{mod}.{a.name}".lstrip(".") for a in node.names]
    text = None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
    elif isinstance(node, ast.Call):
        text = _import_module_target(node, constants)
    if text is not None and _MODULE_STRING.fullmatch(text):
        return [text.split(":")[0].removeprefix("mtpbench").lstrip(".")]
    return []


def _imports_in(name: str, source: str, is_pkg: bool, known: set[str]) -> set[str]:
    """mtpbench modules the module `name` (source text) imports anywhere in its body (module level or
    inside functions), by an import statement, a string naming a module, or `import_module(...)`."""
    here = name.split(".") if name else []
    pkg = here if is_pkg else here[:-1]
    tree = ast.parse(source)
    constants = _string_constants(tree)
    # Python runs a module's parent packages before it, but a package's face importing its own modules is
    # the usual shape, not a circle: an edge to one's own package (a logger named after it) is not counted.
    ancestors = {".".join(here[:i]) for i in range(len(here))}
    # A logger's name ("mtpbench.training.train" shared by two modules) names a logger, not a module.
    logger_names = {id(n.args[0]) for n in ast.walk(tree) if _calls(n, "getLogger") and n.args}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in logger_names:
            continue
        for t in _named_modules(node, pkg, constants):
            # `from mtpbench import x` names module x when there is one, else a name in the package.
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and t not in ancestors:
                out.add(t)
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    return _imports_in(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", known)


def _graph(root: Path = PKG) -> dict[str, set[str]]:
    mods = _modules(root)
    known = set(mods) - {""}
    return {m: _imports(m, p, known) for m, p in mods.items() if m}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_lazy_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_lazy_and_relative_imports() -> None:
    g = _graph()
    assert "judge.evidence" in g["judge.compare"] and "store.results" in g["judge.evidence"]
    assert "store.columnar" in g["store.results"]  # imported inside load_run only
    # The registry's "module:function" strings are its imports; the patches it names import only the leaf.
    assert {"patches.faults.flatten_draft_metadata", "fixes.ascend_gemma4", "patches.contract"} <= g["fixes.registry"]
    assert g["fixes.ascend_gemma4"] & {"patches.contract", "fixes.registry", "patches"} == {"patches.contract"}


def _stage(module: str) -> str:
    head = module.split(".")[0]
    return "" if module in BASE else head


def _violations(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for m, deps in sorted(graph.items()):
        stage = _stage(m)
        if stage in ("", "cli", "plugin", "__main__") or m in BASE:
            continue  # the base, the command line and the vLLM plugin entry point may import any stage
        allowed = MAY_IMPORT.get(stage)
        if allowed is None:
            out.append(f"{m}: not in a stage")
            continue
        for d in sorted(deps):
            ds = _stage(d)
            if d in BASE:
                if stage in LEAVES and d not in ("schema", ""):
                    out.append(f"{m} -> {d} (a module that runs in the build's interpreter imports schema only)")
                continue
            if ds not in allowed:
                out.append(f"{m} -> {d} ({stage} may import {', '.join(sorted(allowed))})")
    return out


def test_dependencies_point_one_way() -> None:
    assert _violations(_graph()) == []


def test_the_contract_finds_an_upward_import() -> None:
    assert _violations({"store.results": {"judge.compare"}, "engine.worker": {"config"}}) == [
        "engine.worker -> config (a module that runs in the build's interpreter imports schema only)",
        "store.results -> judge.compare (store may import store)",
    ]


def test_no_import_cycle() -> None:
    assert _cycles(_graph()) == []


def _plant(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "mtpbench" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "mtpbench"


def test_a_circle_closed_through_a_registry_string_fails_the_layering_test(tmp_path: Path) -> None:
    # The shape before issue 27: the patches package names a fix in its registry while the fix imports the
    # patches package. No import statement closes the circle; the registry string does.
    pkg = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "patches/__init__.py": (
                "import importlib\n"
                "class PatchNotApplicable(Exception): ...\n"
                'REGISTRY = {"fix": "mtpbench.fixes.fix:apply"}\n'
                "def apply_one(name):\n"
                '    module, func = REGISTRY[name].split(":")\n'
                "    return getattr(importlib.import_module(module), func)()\n"
            ),
            "fixes/__init__.py": "",
            "fixes/fix.py": "from mtpbench.patches import PatchNotApplicable\ndef apply(): ...\n",
        },
    )
    assert _cycles(_graph(pkg)) == [["fixes.fix", "patches"]]
    assert _violations(_graph(pkg)) == ["patches -> fixes.fix (patches may import patches)"]


def test_import_module_targets_are_imports(tmp_path: Path) -> None:
    pkg = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": 'import importlib\n_B = "mtpbench.b"\ndef load():\n    return importlib.import_module(_B)\n',
            "b.py": "from importlib import import_module\ndef load():\n    return import_module('mtpbench.a')\n",
        },
    )
    assert _graph(pkg) == {"a": {"b"}, "b": {"a"}} and _cycles(_graph(pkg)) == [["a", "b"]]


def test_prose_and_logger_names_are_not_imports() -> None:
    known = {"a", "b", "c"}
    source = (
        '"""Module a; see mtpbench.b for the rest."""\n'
        "import logging\n"
        'logger = logging.getLogger("mtpbench.c")\n'
        'RUN = ["python", "-m", "mtpbench.c"]\n'
    )
    assert _imports_in("a", source, False, known) == {"c"}  # the `-m` target; not the prose, not the logger


def _big_modules(mods: dict[str, Path]) -> dict[str, int]:
    """Modules over MAX_LINES with their line counts."""
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in mods.items()}
    return {name: n for name, n in sizes.items() if n > MAX_LINES}


def test_big_modules_are_reported_not_failed(tmp_path: Path) -> None:
    # Size is a smell to look at, never a limit (issue 27): a module past MAX_LINES is named in the test
    # report as a warning, so a reader sees where to look, and nothing is squeezed to get under a number.
    (tmp_path / "big.py").write_text("x = 1\n" * (MAX_LINES + 1), encoding="utf-8")
    (tmp_path / "small.py").write_text("x = 1\n", encoding="utf-8")
    assert _big_modules({"big": tmp_path / "big.py", "small": tmp_path / "small.py"}) == {"big": MAX_LINES + 1}
    for name, n in sorted(_big_modules(_modules()).items(), key=lambda kv: -kv[1]):
        warnings.warn(f"mtpbench/{name or '__init__'}: {n} lines (over {MAX_LINES}): is it one thing?", stacklevel=1)


def _top_level_imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_the_build_side_imports_the_standard_library_at_module_level() -> None:
    # engine/, patches/, fixes/ and buildprobes/ run in the build's interpreter, which may lack mtpbench's
    # dependencies (pydantic, pandas...): at module level they import the standard library, schema.py and
    # the stages they may import, which are standard library only too.
    import sys

    std = set(sys.stdlib_module_names) | {"__future__"}
    stdlib_only = [PKG / "__init__.py", PKG / "schema.py"]
    for path in stdlib_only:
        bad = {m for m in _top_level_imports(path) if m.split(".")[0] not in std and m != "mtpbench"}
        assert not bad, f"{path.name}: {bad}"
    for stage in sorted(LEAVES):
        own = tuple(f"mtpbench.{s}" for s in MAY_IMPORT[stage])
        for path in sorted((PKG / stage).rglob("*.py")):
            bad = {
                m
                for m in _top_level_imports(path)
                if m.split(".")[0] not in std and m not in ("mtpbench", "mtpbench.schema") and not m.startswith(own)
            }
            assert not bad, f"{stage}/{path.name} imports {bad} at module level"


def _private_imports(graph_root: Path, stages: set[str]) -> list[str]:
    """`from mtpbench.<stage>... import _name` anywhere in the package, for the given stages' modules."""
    out = []
    for name, path in _modules(graph_root).items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mtpbench.")):
                continue
            if node.module.split(".")[1] not in stages:
                continue
            out += [f"{name or 'mtpbench'}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return sorted(out)


def test_the_build_side_stages_show_a_face_and_keep_their_private_names() -> None:
    # Issue 27: a stage's public names are in its __init__ (with __all__); a `_name` stays in its module.
    for stage in ("patches", "fixes"):
        face = ast.parse((PKG / stage / "__init__.py").read_text(encoding="utf-8"))
        names = [n for n in face.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "__all__"]
        assert names, f"{stage}/__init__.py has no __all__"
    assert _private_imports(PKG, {"patches", "fixes", "buildprobes"}) == []


def test_a_private_name_taken_from_another_module_is_found(tmp_path: Path) -> None:
    pkg = _plant(
        tmp_path,
        {"__init__.py": "", "a.py": "from mtpbench.patches.faults.flatten_draft_metadata import _MODULE, apply\n"},
    )
    assert _private_imports(pkg, {"patches"}) == ["a: mtpbench.patches.faults.flatten_draft_metadata._MODULE"]
