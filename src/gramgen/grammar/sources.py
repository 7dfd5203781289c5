"""Reading grammar sources: the one reader of a JSON Schema argument, grammar files by
suffix, and the grammars shipped inside the package (``gramgen/grammars/*.lark``).

Every gramgen entry point that takes a schema (``Grammar.from_json_schema``,
``generate(schema=...)``, the ``gramgen`` command) reads it with :func:`read_schema`, so
the accepted forms and the errors are the same everywhere.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Union

from ..errors import ConfigurationError, GrammarError, SchemaError

@dataclass(frozen=True)
class SchemaSource:
    """A schema argument, read.

    ``value``: the JSON Schema (a dict or a bool); ``model``: the pydantic model class it
    came from, or None; :attr:`key`: its canonical JSON text, a cache key.
    """

    value: dict | bool
    model: type | None = None

    @cached_property
    def key(self) -> str:
        """``json.dumps(value)`` with the keys in their order: the order of ``properties``
        is the order of the generated object, so two schemas that differ only in it must
        not share a key (sorting them did, and reused the first one's grammar). Raises
        SchemaError when the value is not JSON data (a set, an object, a non-string key)."""
        try:
            return json.dumps(self.value)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"the schema is not JSON data: {exc}") from None


#: what :func:`read_schema` accepts (see there)
SchemaLike = Union[dict, bool, str, bytes, os.PathLike, type, SchemaSource]


def read_schema(schema: SchemaLike) -> SchemaSource:
    """Read a schema given in any of the forms gramgen accepts:

    - a dict or a bool: the schema itself (not copied);
    - a pydantic model class (anything with ``model_json_schema()``): its JSON Schema;
    - JSON text, as ``str`` or ``bytes``;
    - a path to a file of JSON text: an ``os.PathLike``, or a ``str`` that is not JSON
      text (which starts with ``{`` or ``[``, or is ``true`` / ``false``);
    - a :class:`SchemaSource`, returned as it is.

    Raises :class:`~gramgen.SchemaError` for anything else, with what went wrong: JSON
    text that does not parse (with line and column), JSON that is neither an object nor
    a boolean, a path that does not exist or is a folder (a ``str`` counts as a path
    when it ends in ``.json`` or holds a path separator and no ``{``), a ``str`` that is
    neither JSON text nor an existing file, a file that cannot be read, a class that is
    not a pydantic model, an argument of another type.
    """
    if isinstance(schema, SchemaSource):
        return schema
    if isinstance(schema, (dict, bool)):
        return SchemaSource(schema)
    if isinstance(schema, type):
        dump = getattr(schema, "model_json_schema", None)
        if not callable(dump):
            raise SchemaError(f"{schema.__qualname__} is a class but not a pydantic model "
                              "(no model_json_schema())")
        return SchemaSource(_checked(dump(), f"{schema.__qualname__}.model_json_schema()"), schema)
    if isinstance(schema, os.PathLike):
        return SchemaSource(_parse(_read_file(Path(schema)), f"schema file {os.fspath(schema)}"))
    if isinstance(schema, bytes):
        return SchemaSource(_parse(schema, "schema"))
    if isinstance(schema, str):
        path_like = _looks_like_path(schema)
        if _looks_like_json(schema) and not (path_like and _is_file(schema)):
            try:
                value = json.loads(schema)
            except json.JSONDecodeError:
                if not path_like:  # ("[draft]/person.json" is a path that starts like JSON)
                    _parse(schema, "schema")  # raises, with line and column
            else:
                return SchemaSource(_checked(value, "schema"))
        if _is_file(schema):
            return SchemaSource(_parse(_read_file(Path(schema)), f"schema file {schema}"))
        shown = schema if len(schema) <= 200 else f"{schema[:120]}...{schema[-60:]}"  # a path's end names the file
        if path_like:
            _read_file(Path(schema))  # raises: it does not exist, or is a folder
        raise SchemaError(f"schema {shown!r} is neither JSON text nor an existing file")
    raise SchemaError(f"cannot read a schema from {type(schema).__name__}: expected a dict, a bool, "
                      "JSON text (str or bytes), a path or a pydantic model class")


def _looks_like_json(text: str) -> bool:
    stripped = text.strip()
    return stripped.startswith(("{", "[")) or stripped in ("true", "false")


def _looks_like_path(text: str) -> bool:
    """A str meant as a file name: it ends in ``.json`` or holds a path separator, and
    no ``{`` (JSON text of a schema object always does)."""
    stripped = text.strip()
    return "{" not in stripped and (stripped.lower().endswith(".json") or "/" in stripped
                                    or os.sep in stripped)


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def _read_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SchemaError(f"the schema file {_shown(path)} does not exist") from None
    except IsADirectoryError:
        raise SchemaError(f"the schema path {_shown(path)} is a folder, not a file") from None
    except UnicodeDecodeError as exc:
        raise SchemaError(f"the schema file {_shown(path)} is not UTF-8 text: byte {exc.start} "
                          f"is {exc.object[exc.start:exc.start + 1]!r}") from None
    except (OSError, ValueError) as exc:  # no permission, a NUL byte in the name
        raise SchemaError(f"cannot read the schema file {_shown(path)}: {getattr(exc, 'strerror', None) or exc}") from None


def _shown(path: str | os.PathLike) -> str:
    """A path for a message; a long one keeps its end, which names the file."""
    text = os.fspath(path)
    return text if len(text) <= 200 else f"{text[:120]}...{text[-60:]}"


def _parse(text: str | bytes, what: str) -> dict | bool:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{what} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except UnicodeDecodeError as exc:  # bytes that are no UTF-8/16/32
        raise SchemaError(f"{what} is not valid JSON: {exc}") from None
    return _checked(value, what)


def _checked(value: Any, what: str) -> dict | bool:
    if not isinstance(value, (dict, bool)):
        raise SchemaError(f"{what} is {type(value).__name__} JSON: a schema must be an object or a boolean")
    return value


# -- grammar files ---------------------------------------------------------------------------

GrammarFormat = Literal["lark", "gbnf", "json_schema"]

#: file suffix -> the format of its grammar
SUFFIXES: dict[str, GrammarFormat] = {".lark": "lark", ".gbnf": "gbnf", ".ebnf": "gbnf", ".json": "json_schema"}


def grammar_format(path: str | os.PathLike) -> GrammarFormat:
    """The format of the grammar file ``path`` by its suffix (see :data:`SUFFIXES`).

    Raises ConfigurationError naming the path when it is not a str or path, is a folder
    or does not exist, and GrammarError for another suffix."""
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigurationError(f"a grammar file path must be a str or os.PathLike, not {type(path).__name__}")
    where = Path(path)
    if _is_dir(where):
        raise ConfigurationError(f"the grammar path {_shown(path)} is a folder, not a file")
    suffix = where.suffix.lower()
    found = SUFFIXES.get(suffix)
    if found is None:
        raise GrammarError(f"unknown grammar file suffix {suffix!r} (expected {', '.join(SUFFIXES)})",
                           source=os.fspath(path))
    if not _is_file(os.fspath(path)):
        raise ConfigurationError(f"the grammar file {_shown(path)} does not exist")
    return found


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def read_grammar_file(path: str | os.PathLike) -> str:
    """The text of a grammar file (UTF-8). ConfigurationError naming the file when it
    cannot be read; GrammarError at the line and column of a byte that is not UTF-8."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigurationError(f"the grammar file {_shown(path)} does not exist") from None
    except IsADirectoryError:
        raise ConfigurationError(f"the grammar path {_shown(path)} is a folder, not a file") from None
    except (OSError, ValueError) as exc:  # no permission, a NUL byte in the name
        raise ConfigurationError(f"cannot read the grammar file {_shown(path)}: "
                                 f"{getattr(exc, 'strerror', None) or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise GrammarError(f"the grammar file is not UTF-8: byte {data[exc.start:exc.start + 1]!r}",
                           line, column, source=os.fspath(path)) from None


# -- grammars shipped in the package ---------------------------------------------------------

def _builtin_dir():
    """The folder of the shipped grammars (package data of ``gramgen``)."""
    return resources.files("gramgen").joinpath("grammars")


#: builtin grammars that come from lark's own package: name -> (file in lark/grammars, start)
_FROM_LARK = {"python": ("python.lark", "file_input")}


def builtin_grammars() -> tuple[str, ...]:
    """The names of the grammars shipped with gramgen, for :meth:`Grammar.builtin`
    (``json``: RFC 8259 JSON; ``python``: lark's own ``python.lark``, Python 3 with
    indentation as lark's ``PythonIndenter`` reads it; ``python_subset``: a context-free
    Python 3 subset with 4-space indentation; ``sql``: SELECT queries)."""
    folder = _builtin_dir()
    names = set(_FROM_LARK)
    if folder.is_dir():
        names.update(p.name[:-len(".lark")] for p in folder.iterdir() if p.name.endswith(".lark"))
    return tuple(sorted(names))


def builtin_grammar_text(name: str) -> str:
    """The Lark text of the shipped grammar ``name``; ConfigurationError listing the
    known names for another."""
    known = builtin_grammars()
    if name not in known:
        raise ConfigurationError(f"no builtin grammar {name!r}: the builtin grammars are {', '.join(known)}")
    if name in _FROM_LARK:
        return resources.files("lark").joinpath("grammars", _FROM_LARK[name][0]).read_text(encoding="utf-8")
    return _builtin_dir().joinpath(f"{name}.lark").read_text(encoding="utf-8")


def builtin_grammar_start(name: str) -> str:
    """The start rule of the shipped grammar ``name``."""
    return _FROM_LARK[name][1] if name in _FROM_LARK else "start"
