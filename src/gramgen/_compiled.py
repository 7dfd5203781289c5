"""The Python modules that the build also compiles with Cython, and the import hook that
uses a compiled one only where it was compiled from the source beside it.

A JSON Schema's lowering to a grammar walks the schema in Python; compiled, the same
modules take ~20 % less time (the source is Cython's pure-Python mode: no annotation is
read as a C type, so the compiled module behaves as the source does). The ``.py`` files
stay the source and the reference: ``GRAMGEN_NATIVE=0`` (no native code at all) and
``GRAMGEN_COMPILED=0`` (the C kernels, but these modules as source: profiling, debugging)
import them instead.

Python imports an extension module before a source file of the same name, so a module
compiled from an older source would shadow an edited one. ``setup.py`` writes the SHA-256
of the source it compiled beside each extension (``<module>.cython-sha256``); the hook
imports the source wherever that file is missing or differs.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

#: the modules compiled where Cython and a C compiler are there (setup.py reads this list)
MODULES = (
    "gramgen.grammar.ir",
    "gramgen.grammar.simplify",
    "gramgen.grammar.cpdfa",
    "gramgen.grammar.json_schema.compiler",
    "gramgen.grammar.json_schema.keywords",
    "gramgen.grammar.json_schema.layout",
    "gramgen.grammar.json_schema.loader",
    "gramgen.grammar.json_schema.numbers",
    "gramgen.grammar.json_schema.strings",
)

#: the suffix of the file beside an extension that holds its source's SHA-256 (hex)
HASH_SUFFIX = ".cython-sha256"


def source_hash(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class _CompiledWhereCurrent(importlib.abc.MetaPathFinder):
    """For the modules of :data:`MODULES`: the extension where it was compiled from the
    source beside it and native code is on, else the source."""

    def __init__(self, native: bool):
        self.native = native

    def find_spec(self, fullname, path, target=None):
        if fullname not in MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.ExtensionFileLoader):
            return spec
        folder, leaf = os.path.dirname(spec.origin), fullname.rpartition(".")[2]
        source = os.path.join(folder, leaf + ".py")
        if not os.path.exists(source):
            return spec   # (installed without its sources: the extension is all there is)
        if self.native and _compiled_from(os.path.join(folder, leaf + HASH_SUFFIX), source):
            return spec
        return importlib.util.spec_from_file_location(fullname, source)


def _compiled_from(hash_file: str, source: str) -> bool:
    try:
        with open(hash_file, encoding="ascii") as f:
            return f.read().strip() == source_hash(source)
    except OSError:
        return False


def install() -> None:
    """Put the hook first on ``sys.meta_path`` (once), before any of the modules is imported."""
    if not any(isinstance(f, _CompiledWhereCurrent) for f in sys.meta_path):
        native = os.environ.get("GRAMGEN_NATIVE", "1") != "0" and os.environ.get("GRAMGEN_COMPILED", "1") != "0"
        sys.meta_path.insert(0, _CompiledWhereCurrent(native))


def compiled_modules() -> list[str]:
    """The modules of :data:`MODULES` imported so far from an extension."""
    return [name for name in MODULES
            if (getattr(sys.modules.get(name), "__file__", None) or "").endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))]
