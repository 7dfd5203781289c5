"""The package's import structure: every module imports on its own, the modules import each
other without cycles, and no function body imports a gramgen module.

The import graph is read with ``ast`` (nothing is run), with the rules of
``shared/tools/import-cycles``: ``from .x import y`` imports ``pkg.x`` (and ``pkg.x.y`` when
that is a module); ``from . import x`` imports the package itself *and* ``pkg.x``; ``import
a.b`` imports ``a.b``; imports anywhere in a file count, inside functions too.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

from conftest import ROOT

SRC = ROOT / "src" / "gramgen"


# -- reading the graph ---------------------------------------------------------------------

def package_modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under ``package_dir`` (a package's
    name is that of its ``__init__.py``)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


@dataclass(frozen=True)
class Import:
    source: str              # the importing module
    targets: tuple[str, ...]  # the package's modules it imports
    path: Path
    line: int
    in_function: bool


def _targets(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        name = ".".join(base + ([node.module] if node.module else []))
    else:
        name = node.module or ""
    return [name] + [f"{name}.{alias.name}" for alias in node.names]


def _function_statements(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for stmt in fn.body:
                inside.update(id(n) for n in ast.walk(stmt))
    return inside


def internal_imports(modules: dict[str, Path]) -> list[Import]:
    """Every import statement of ``modules`` that names one of ``modules`` (itself aside)."""
    found = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        inside = _function_statements(tree)
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            targets = tuple(dict.fromkeys(
                t for t in _targets(module, path.name == "__init__.py", node)
                if t in modules and t != module))
            if targets:
                found.append(Import(module, targets, path, node.lineno, id(node) in inside))
    return sorted(found, key=lambda i: (str(i.path), i.line))


def import_cycles(imports: list[Import]) -> list[list[str]]:
    """The groups of two or more modules that import each other (strongly connected
    components of the graph, Tarjan's algorithm without recursion), each sorted."""
    edges: dict[str, set[str]] = {}
    for imp in imports:
        edges.setdefault(imp.source, set()).update(imp.targets)
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, successors = work[-1]
            for w in successors:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    if len(group) > 1:
                        groups.append(sorted(group))
    return sorted(groups)


def describe_cycle(group: list[str], imports: list[Import], root: Path) -> str:
    """The group, and one shortest loop through its first module with each import's place."""
    via: dict[tuple[str, str], Import] = {}
    for imp in imports:
        for t in imp.targets:
            via.setdefault((imp.source, t), imp)
    members = set(group)
    start = group[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier and start not in previous:
        nxt = []
        for v in frontier:
            for (s, t) in via:
                if s == v and t in members and t not in previous:
                    previous[t] = v
                    nxt.append(t)
        frontier = nxt
    loop = [start]
    while len(loop) == 1 or loop[-1] != start:
        loop.append(previous[loop[-1]])
    loop.reverse()
    steps = [f"{a} imports {b} ({_where(via[a, b], root)})" for a, b in zip(loop, loop[1:])]
    return f"cycle among {', '.join(group)}:\n    " + "\n    ".join(steps)


def _where(imp: Import, root: Path) -> str:
    try:
        path = imp.path.relative_to(root)
    except ValueError:
        path = imp.path
    return f"{path}:{imp.line}"


def inner_imports(imports: list[Import], root: Path) -> list[str]:
    return [f"{_where(i, root)}: {i.source} imports {', '.join(i.targets)} inside a function"
            for i in imports if i.in_function]


# -- importing each module alone -----------------------------------------------------------

_RUNNER = r'''
import importlib, importlib.util, json, os, subprocess, sys, traceback
names, preload = json.loads(sys.argv[1]), json.loads(sys.argv[2])
top = names[0].split(".")[0]
spec = importlib.util.find_spec(top)
errors = {}
if hasattr(os, "fork"):
    # third-party and standard modules are loaded once; each child starts without any
    # module of the package and imports one
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:
            pass
    assert not any(m == top or m.startswith(top + ".") for m in sys.modules)
    for name in names:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                importlib.import_module(name)
                message = ""
            except BaseException:
                message = traceback.format_exc()
            with os.fdopen(w, "w") as out:
                out.write(message)
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as pipe:
            message = pipe.read()
        status = os.waitpid(pid, 0)[1]
        if status and not message:
            message = f"the import ended the process (wait status {status})"
        if message:
            errors[name] = message
else:  # no fork: one interpreter per module
    for name in names:
        run = subprocess.run([sys.executable, "-c", f"import importlib; importlib.import_module({name!r})"],
                             capture_output=True, text=True)
        if run.returncode:
            errors[name] = run.stderr
print(json.dumps({"origin": spec.origin if spec else None, "errors": errors}))
'''


def third_party_imports(modules: dict[str, Path]) -> list[str]:
    """Absolute imports of other packages at module level: loaded before the forks."""
    top = next(iter(modules)).split(".")[0]
    names: set[str] = set()
    for path in modules.values():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        inside = _function_statements(tree)
        for node in ast.walk(tree):
            if id(node) in inside:
                continue
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names.add(node.module)
    return sorted(n for n in names if n.split(".")[0] not in (top, "__future__"))


def import_each_alone(modules: dict[str, Path], extra_path: Path | None = None) -> tuple[str | None, dict[str, str]]:
    """(where the package was found, module -> traceback for each that failed to import
    into an interpreter holding no module of the package)."""
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), env.get("PYTHONPATH")]))
    run = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(sorted(modules)), json.dumps(third_party_imports(modules))],
        capture_output=True, text=True, env=env, cwd=extra_path or ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    return result["origin"], result["errors"]


# -- the checks on gramgen -----------------------------------------------------------------

def test_every_module_imports_alone():
    modules = package_modules(SRC)
    assert "gramgen" in modules and "gramgen.errors" in modules
    origin, errors = import_each_alone(modules)
    assert origin == str(SRC / "__init__.py"), f"the subprocess imported gramgen from {origin}"
    assert not errors, "modules that fail to import on their own:\n" + "\n".join(
        f"{name}:\n{textwrap.indent(tb, '    ')}" for name, tb in errors.items())


def test_no_import_cycles():
    imports = internal_imports(package_modules(SRC))
    assert len(imports) > 50  # the parser sees the package's imports
    cycles = import_cycles(imports)
    assert not cycles, f"{len(cycles)} import cycles:\n" + "\n".join(
        describe_cycle(c, imports, ROOT) for c in cycles)


def test_no_imports_inside_functions():
    inner = inner_imports(internal_imports(package_modules(SRC)), ROOT)
    assert not inner, f"{len(inner)} imports of gramgen modules inside functions:\n" + "\n".join(inner)


# -- the checkers find what is planted -----------------------------------------------------

PLANTED = {
    "fakepkg/__init__.py": "",
    "fakepkg/a.py": "from .b import x\n",
    "fakepkg/b.py": "import fakepkg.c as c\nx = 1\n",
    "fakepkg/c.py": "from fakepkg.a import x\n",            # closes a -> b -> c -> a
    "fakepkg/d.py": "import os\n\n\ndef f():\n    from . import e\n    return e\n",
    "fakepkg/e.py": "y = 2\n",
    "fakepkg/sub/__init__.py": "from .. import e\n",
    "fakepkg/sub/leaf.py": "from ..e import y\nfrom . import leaf\n",
}


def plant(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return package_modules(tmp_path / "fakepkg")


def test_graph_of_a_planted_package(tmp_path):
    imports = internal_imports(plant(tmp_path, PLANTED))
    assert [(i.source, i.targets, i.line, i.in_function) for i in imports] == [
        ("fakepkg.a", ("fakepkg.b",), 1, False),
        ("fakepkg.b", ("fakepkg.c",), 1, False),
        ("fakepkg.c", ("fakepkg.a",), 1, False),
        ("fakepkg.d", ("fakepkg", "fakepkg.e"), 5, True),
        ("fakepkg.sub", ("fakepkg", "fakepkg.e"), 1, False),
        ("fakepkg.sub.leaf", ("fakepkg.e",), 1, False),
        ("fakepkg.sub.leaf", ("fakepkg.sub",), 2, False),  # leaf itself is left out
    ]
    assert import_cycles(imports) == [["fakepkg.a", "fakepkg.b", "fakepkg.c"]]
    assert describe_cycle(["fakepkg.a", "fakepkg.b", "fakepkg.c"], imports, tmp_path) == (
        "cycle among fakepkg.a, fakepkg.b, fakepkg.c:\n"
        "    fakepkg.a imports fakepkg.b (fakepkg/a.py:1)\n"
        "    fakepkg.b imports fakepkg.c (fakepkg/b.py:1)\n"
        "    fakepkg.c imports fakepkg.a (fakepkg/c.py:1)")
    assert inner_imports(imports, tmp_path) == [
        "fakepkg/d.py:5: fakepkg.d imports fakepkg, fakepkg.e inside a function"]


def test_cycle_through_a_package_init(tmp_path):
    """``from . import x`` in a submodule imports the package: with an ``__init__`` that
    imports the submodule, that is a cycle; two separate cycles are two groups."""
    files = {"fakepkg/__init__.py": "from .m import f\n",
             "fakepkg/m.py": "from . import n\n\ndef f():\n    pass\n",
             "fakepkg/n.py": "",
             "fakepkg/p.py": "from .q import g\n",
             "fakepkg/q.py": "from .p import h\n"}
    imports = internal_imports(plant(tmp_path, files))
    assert import_cycles(imports) == [["fakepkg", "fakepkg.m"], ["fakepkg.p", "fakepkg.q"]]
    files["fakepkg/m.py"] = "from .n import z\n"
    files["fakepkg/q.py"] = ""
    assert import_cycles(internal_imports(plant(tmp_path, files))) == []


def test_import_each_alone_reports_the_broken_modules(tmp_path):
    modules = plant(tmp_path, PLANTED)
    origin, errors = import_each_alone(modules, extra_path=tmp_path)
    assert origin == str(tmp_path / "fakepkg" / "__init__.py")
    # a -> b -> c -> a: imported first, a or b is half-done when c asks a for x (c first
    # works: b's ``import fakepkg.c`` takes the half-done c as it is)
    assert sorted(errors) == ["fakepkg.a", "fakepkg.b"]
    assert "cannot import name 'x' from partially initialized module 'fakepkg.a'" in errors["fakepkg.a"]
    files = dict(PLANTED, **{"fakepkg/c.py": "", "fakepkg/e.py": "raise RuntimeError('planted')\n"})
    origin, errors = import_each_alone(plant(tmp_path, files), extra_path=tmp_path)
    assert sorted(errors) == ["fakepkg.e", "fakepkg.sub", "fakepkg.sub.leaf"]  # d imports e only when called
    assert "RuntimeError: planted" in errors["fakepkg.sub.leaf"]
