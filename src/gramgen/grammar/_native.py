"""The grammar layer's C kernels (``_kernels.c``: pruning rules, the automaton of an
object's other keys), or None where the extension is not built or ``GRAMGEN_NATIVE=0``
asks for the Python references."""

from __future__ import annotations

import os

try:
    import gramgen.grammar._kernels as kernels
except ImportError:  # built without a C compiler
    kernels = None

if os.environ.get("GRAMGEN_NATIVE", "1") == "0":
    kernels = None
