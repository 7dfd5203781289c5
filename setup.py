"""Builds the optional native kernels; everything else is configured in pyproject.toml.

``optional=True``: where no C compiler is available the install still succeeds and
gramgen runs its Python/numpy implementation of the same functions (see
``gramgen.automata.lexeme_tokens`` and ``gramgen.automata.dfa``).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("gramgen.automata._tokenwalk", ["src/gramgen/automata/_tokenwalk.c"], optional=True),
    Extension("gramgen.automata._dfabuild", ["src/gramgen/automata/_dfabuild.c"], optional=True),
    Extension("gramgen.automata._earley", ["src/gramgen/automata/_earley.c"],
              depends=["src/gramgen/grammar/_rules.h"], optional=True),
    Extension("gramgen.automata._bits", ["src/gramgen/automata/_bits.c"], optional=True),
    Extension("gramgen.grammar._kernels", ["src/gramgen/grammar/_kernels.c"],
              depends=["src/gramgen/grammar/_rules.h"], optional=True),
])
