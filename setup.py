"""Builds the optional native kernel; everything else is configured in pyproject.toml.

``optional=True``: where no C compiler is available the install still succeeds and
gramgen runs its numpy implementation of the same function (see
``gramgen.automata.lexeme_tokens``).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("gramgen.automata._tokenwalk", ["src/gramgen/automata/_tokenwalk.c"],
                             optional=True)])
