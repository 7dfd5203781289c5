"""``python -m gramgen ...``: the ``gramgen`` command (see :mod:`gramgen.cli`)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
