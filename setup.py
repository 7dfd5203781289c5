"""Builds the optional native code; everything else is configured in pyproject.toml.

- The C kernels (``_*.c``).
- The Python modules of ``gramgen._compiled.MODULES`` (the JSON Schema lowering) compiled
  with Cython, each with the SHA-256 of its source beside it: ``gramgen._compiled`` uses a
  compiled module only where that matches the source (an edited source is imported as it is
  until the next build).

``optional=True``: where no C compiler (or no Cython) is available the install still
succeeds and gramgen runs its Python/numpy implementation of the same functions (see
``gramgen.automata.lexeme_tokens`` and ``gramgen.automata.dfa``) and the modules as source.
"""

import importlib.util
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_spec = importlib.util.spec_from_file_location("_gramgen_compiled", os.path.join("src", "gramgen", "_compiled.py"))
compiled = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compiled)   # (the standard library only)

kernels = [
    Extension("gramgen.automata._tokenwalk", ["src/gramgen/automata/_tokenwalk.c"], optional=True),
    Extension("gramgen.automata._dfabuild", ["src/gramgen/automata/_dfabuild.c"], optional=True),
    Extension("gramgen.automata._earley", ["src/gramgen/automata/_earley.c"],
              depends=["src/gramgen/grammar/_rules.h"], optional=True),
    Extension("gramgen.automata._bits", ["src/gramgen/automata/_bits.c"], optional=True),
    Extension("gramgen.grammar._kernels", ["src/gramgen/grammar/_kernels.c"],
              depends=["src/gramgen/grammar/_rules.h"], optional=True),
]


def _source_of(module: str) -> str:
    return os.path.join("src", *module.split(".")) + ".py"


def cython_modules() -> list:
    """The extensions of the compiled Python modules; none without Cython."""
    try:
        from Cython.Build import cythonize
    except ImportError:
        return []
    made = []
    for module in compiled.MODULES:
        ext = Extension(module, [_source_of(module)], optional=True)
        made += cythonize([ext], build_dir=os.path.join("build", "cython"), quiet=True, language_level=3,
                          compiler_directives={"binding": True, "annotation_typing": False,
                                               "embedsignature": False})
    return made


def _write_hash(module: str, extension_file: str) -> None:
    """The SHA-256 of ``module``'s source, beside its extension."""
    leaf = module.rpartition(".")[2]
    with open(os.path.join(os.path.dirname(extension_file), leaf + compiled.HASH_SUFFIX), "w",
              encoding="ascii") as f:
        f.write(compiled.source_hash(_source_of(module)) + "\n")


class BuildExt(build_ext):
    """build_ext that writes, beside each compiled Python module, its source's SHA-256
    (in the build folder, and in the source tree for in-place and editable builds)."""

    def build_extension(self, ext):
        super().build_extension(ext)   # (an optional extension that fails raises here: no hash)
        if ext.name in compiled.MODULES:
            _write_hash(ext.name, self.get_ext_fullpath(ext.name))

    def copy_extensions_to_source(self):
        super().copy_extensions_to_source()
        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            if ext.name not in compiled.MODULES:
                continue
            package, _, leaf = ext.name.rpartition(".")
            built = self.get_ext_fullpath(ext.name)
            in_place = os.path.join(build_py.get_package_dir(package), os.path.basename(built))
            if os.path.exists(built) and os.path.exists(in_place):
                _write_hash(ext.name, in_place)


setup(ext_modules=kernels + cython_modules(), cmdclass={"build_ext": BuildExt},
      # (the compiled modules take ~1.5 min of C compiler, one at a time otherwise)
      options={"build_ext": {"parallel": min(8, os.cpu_count() or 1)}})
