"""Every error gramgen raises derives from :class:`GramgenError`.

Callers can catch one base class; each subclass carries the location that makes the
message actionable (line/column for grammars, a JSON pointer for schemas, a token and
byte position for rejected tokens)::

    GramgenError
    ├── ConfigurationError (also ValueError)   a bad argument or option of a gramgen call
    ├── GrammarError                            a grammar source is malformed (line, column)
    ├── SchemaError                             a JSON Schema is malformed or unsupported (pointer)
    ├── TokenizerError                          a tokenizer cannot be mapped to bytes
    ├── TokenRejected                           a token the grammar does not allow (token, position)
    └── CompileLimitError                       a compile budget was exceeded (pointer)

    UnknownKeywordWarning (a UserWarning)       a JSON Schema keyword gramgen does not know

Configuration errors are also ``ValueError`` (as lark's are), so ordinary handlers of bad
arguments still catch them.
"""

from __future__ import annotations


class GramgenError(Exception):
    """Base class of all gramgen errors."""


class ConfigurationError(GramgenError, ValueError):
    """An argument or option of a gramgen call is missing, unknown or out of range."""


class GrammarError(GramgenError):
    """A grammar (Lark, GBNF, regex) is malformed or uses an unsupported construct.

    ``line`` and ``column`` are 1-based positions in the grammar source.
    """

    def __init__(self, message: str, line: int = 1, column: int = 1, source: str | None = None):
        self.message = message
        self.line = line
        self.column = column
        self.source = source
        where = f"{source}:" if source else ""
        super().__init__(f"{where}{line}:{column}: {message}")


class SchemaError(GramgenError):
    """A JSON Schema is malformed or uses a keyword gramgen cannot enforce exactly."""

    def __init__(self, message: str, pointer: str = ""):
        self.message = message
        self.pointer = pointer
        super().__init__(f"{pointer or '#'}: {message}")


class TokenizerError(GramgenError):
    """The tokenizer's kind is unknown or its tokens cannot be mapped to bytes."""


class TokenRejected(GramgenError):
    """A token was advanced that the grammar does not allow at this point."""

    def __init__(self, token: int, position: int, detail: str = ""):
        self.token = token
        self.position = position
        msg = f"token {token} rejected at token position {position}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


class TextRejected(GramgenError, ValueError):
    """A text given as the start of the output (the code before the cursor) is not a
    prefix of any word of the grammar. ``offset`` (bytes), ``line`` and ``column`` (1-based,
    characters) locate the first byte after which no word can continue."""

    def __init__(self, offset: int, line: int, column: int, detail: str = ""):
        self.offset, self.line, self.column = offset, line, column
        msg = f"the text leaves the grammar's language at line {line}, column {column}"
        super().__init__(f"{msg}: {detail}" if detail else msg)


def text_location(data: bytes, offset: int) -> tuple[int, int]:
    """1-based (line, column in characters) of byte ``offset`` of UTF-8 ``data``."""
    line_start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[line_start:offset].decode("utf-8", errors="replace")) + 1
    return data.count(b"\n", 0, offset) + 1, column


class CompileLimitError(GramgenError):
    """Compiling exceeded a configured budget (automaton size, time).

    ``pointer``: for a JSON Schema, the JSON pointer of the innermost subschema whose
    compilation went over the budget (None when not known)."""

    def __init__(self, message: str, pointer: str | None = None):
        self.message = message
        self.pointer = pointer
        super().__init__(f"{pointer or '#'}: {message}" if pointer is not None else message)


class UnknownKeywordWarning(UserWarning):
    """A JSON Schema holds keywords gramgen does not know (``minDigits``, a typo such as
    ``maxLenght``, a vendor's ``x-...``): as the specification says, they constrain
    nothing. The message names each one's JSON pointer (and the nearest known keyword);
    ``Grammar.from_json_schema(..., unknown_keywords="error")`` raises instead."""


def position_to_line_col(text: str, pos: int) -> tuple[int, int]:
    """1-based (line, column) of character offset ``pos`` in ``text``."""
    pos = max(0, min(pos, len(text)))
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col
