"""The Python modules compiled with Cython (``gramgen._compiled``): built where native code
is required, imported only where compiled from the source beside them, and lowering
schemas to the very grammars their sources make."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gramgen
from gramgen import _compiled

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def test_the_modules_are_compiled_where_native_code_is_required():
    """CI (a C compiler, GRAMGEN_REQUIRE_NATIVE=1) builds every module of the list."""
    for name in _compiled.MODULES:
        __import__(name)
    compiled = _compiled.compiled_modules()
    if not os.environ.get("GRAMGEN_REQUIRE_NATIVE"):
        if not compiled:
            pytest.skip("the compiled modules were not built (no C compiler or no Cython at install)")
    if os.environ.get("GRAMGEN_NATIVE", "1") == "0" or os.environ.get("GRAMGEN_COMPILED", "1") == "0":
        assert compiled == []
        return
    assert compiled == list(_compiled.MODULES)


def _package(tmp_path: Path, hash_text: str | None) -> Path:
    """A package ``fakepkg`` with a module ``mod``: its source, a file where its extension
    would be (never loaded: only the choice of file is tested) and maybe a hash file."""
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("VALUE = 'source'\n")
    (pkg / ("mod" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"not a real extension")
    if hash_text is not None:
        (pkg / ("mod" + _compiled.HASH_SUFFIX)).write_text(hash_text)
    return pkg


@pytest.mark.parametrize("case", ["current", "stale", "no hash", "native off"])
def test_an_extension_is_imported_only_where_compiled_from_its_source(tmp_path, monkeypatch, case):
    pkg = _package(tmp_path, None)
    source = pkg / "mod.py"
    if case in ("current", "native off"):
        (pkg / ("mod" + _compiled.HASH_SUFFIX)).write_text(_compiled.source_hash(str(source)) + "\n")
    elif case == "stale":
        (pkg / ("mod" + _compiled.HASH_SUFFIX)).write_text(_compiled.source_hash(str(source)) + "\n")
        source.write_text("VALUE = 'edited'\n")   # (edited after the build)
    monkeypatch.setattr(_compiled, "MODULES", ("fakepkg.mod",))
    finder = _compiled._CompiledWhereCurrent(native=case != "native off")
    spec = finder.find_spec("fakepkg.mod", [str(pkg)])
    if case == "current":
        assert isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)
        assert spec.origin.endswith(importlib.machinery.EXTENSION_SUFFIXES[0])
    else:
        assert spec.origin == str(source)
        assert isinstance(spec.loader, importlib.machinery.SourceFileLoader)
    # modules off the list are none of its business
    assert finder.find_spec("fakepkg.other", [str(pkg)]) is None


def test_the_hook_is_first_and_installed_once():
    hooks = [f for f in sys.meta_path if isinstance(f, _compiled._CompiledWhereCurrent)]
    assert len(hooks) == 1 and sys.meta_path[0] is hooks[0]
    _compiled.install()
    assert [f for f in sys.meta_path if isinstance(f, _compiled._CompiledWhereCurrent)] == hooks


_LOWER = r"""
import hashlib, json, sys, warnings
warnings.filterwarnings("ignore")
import gramgen
from gramgen import _compiled
from gramgen.grammar.ir import frozen_key
out = hashlib.sha256()
for src in json.load(sys.stdin):
    try:
        ir = gramgen.Grammar.from_json_schema(json.loads(src), whitespace="flexible", lenient_formats=True).ir
    except gramgen.GramgenError as e:
        out.update(repr((type(e).__name__, str(e))).encode())
        continue
    memo = {}
    out.update(repr((ir.start, [(r.lhs, r.rhs) for r in ir.rules],
                     [(n, frozen_key(rx, memo)) for n, rx in ir.lexemes.items()], ir.ignore)).encode())
print(len(_compiled.compiled_modules()), out.hexdigest())
"""


def test_compiled_and_source_modules_lower_schemas_alike():
    """The dev split's schemas (every 12th, ~290: objects, formats, patterns, refs, errors)
    lower to identical grammars, rule for rule and lexeme for lexeme, with the compiled
    modules and with their sources."""
    root = SHARED / "data" / "jsonschemabench"
    if not root.is_dir():
        pytest.skip(f"{root} is not there")
    srcs = []
    for path in sorted(root.glob("*/dev.jsonl")):
        for line in path.read_text(encoding="utf-8").split("\n"):   # (not splitlines: U+2028 in strings)
            if not line.strip():
                continue
            schema = json.loads(line).get("schema")
            if isinstance(schema, (dict, bool)):
                srcs.append(json.dumps(schema))
    srcs = srcs[::12]
    results = {}
    for compiled in ("1", "0"):
        env = dict(os.environ, GRAMGEN_COMPILED=compiled)
        done = subprocess.run([sys.executable, "-c", _LOWER], input=json.dumps(srcs), env=env, text=True,
                              capture_output=True, timeout=600, check=True)
        n, digest = done.stdout.split()
        results[compiled] = (int(n), digest)
    assert results["0"][0] == 0
    if not results["1"][0] and not os.environ.get("GRAMGEN_REQUIRE_NATIVE"):
        pytest.skip("the compiled modules were not built: nothing to compare")
    assert results["1"][1] == results["0"][1]


def test_unknown_keyword_warnings_point_at_the_caller_compiled_or_not():
    """Compiled functions have no frames: the warning's stacklevel still finds the caller."""
    with pytest.warns(gramgen.UnknownKeywordWarning) as caught:
        gramgen.Grammar.from_json_schema({"type": "string", "maxLenght": 3})
    assert caught[0].filename == __file__
