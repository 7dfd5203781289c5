"""Where Python code reaches a trigger, read the way Python's tokenizer reads it.

:class:`PythonScanner` is an incremental lexer: it holds what ``tokenize`` would know at
the current character (inside a string, comment or number, the kind of the last token,
the open brackets and whether each opened a call, the import statement being written)
and nothing more, so it can be copied per candidate token and fed one character at a
time. A regex over raw text could not tell ``obj.`` from ``"obj."``, ``# obj.`` or ``1.``.

Triggers (the cursor is just after the character named):

* ``member``: a ``.`` after an expression (a name, a closing bracket, a string; a number
  only once it cannot continue, as ``1.5.``);
* ``import``: a ``.`` after a name in an ``import a.b`` or ``from a.b`` statement
  (submodules); the whitespace after ``import`` in ``from m import``, and a ``,`` or
  ``(`` after it (the names of ``m``);
* ``keyword``: the ``(`` of a call (after a name or a closing bracket; not in ``def`` or
  ``class`` headers) and a ``,`` directly inside it (keyword-argument names).

f-strings are read as Python 3.12's tokenizer reads them: the literal parts and format
specs are string text (``{{`` and ``}}`` are literal braces; nothing there triggers), and a
replacement field's expression is code, where the triggers fire as anywhere else
(``f"{s.`` fires ``member``). A field's top bracket level ends at ``}`` (back to the string)
or ``:`` (the format spec, which may hold nested fields); strings inside a field are read
as code strings, in any quotes (3.12; 3.11 code uses the other quotes, which reads the
same).
"""

from __future__ import annotations

import itertools
import keyword

from .base import TriggerKind
from .names import is_identifier_char

__all__ = ["PythonScanner", "python_kinds"]

_KEYWORDS = frozenset(keyword.kwlist) - {"True", "False", "None"}
_STRING_PREFIXES = frozenset("".join(chars) for base in ("r", "u", "b", "f", "br", "rb", "fr", "rf")
                             for chars in itertools.product(*((c, c.upper()) for c in base)))

# lexical modes
_CODE, _COMMENT, _STRING, _QUOTE1, _QUOTE2 = range(5)
# the last significant token
_START, _NAME, _CLOSE, _LITERAL, _KEYWORD, _DEF, _DEFNAME, _OTHER = range(8)
# what an open bracket is: a call's "(", another "(", the "(" of "from m import (", "[" / "{",
# the "{" of an f-string's replacement field
_CALL, _PAREN, _IMPORT_PAREN, _BRACKET, _FIELD = range(5)
# where a backslash leaves a string: none, just after it, after "\N" (an f-string, not raw),
# inside "\N{...}" (a character's name, not a field)
_NO_ESCAPE, _ESCAPE, _ESCAPE_N, _NAMED = range(4)
# the statement being written
_NONE, _FROM, _FROM_IMPORT, _IMPORT = range(4)


def python_kinds(lookahead: bool = False) -> dict[str, tuple[TriggerKind, ...]]:
    """The trigger kinds a :class:`PythonScanner` fires, by configuration name.
    ``lookahead`` is for member access; the others always look ahead (their queries are
    cheap or rarely needed: import statements, ``f(x=`` written in one token)."""
    return {
        "member": (TriggerKind("member", "member", lookahead),),
        "import": (TriggerKind("import", "member", True), TriggerKind("import", "optional", True)),
        "keyword": (TriggerKind("keyword", "keyword", True),),
    }


class PythonScanner:
    """Incremental Python lexer that fires triggers (see the module docstring).

    ``kinds`` maps the configuration names (``"member"``, ``"import"``, ``"keyword"``)
    to the kinds to fire; a name left out fires nothing."""

    __slots__ = ("kinds", "mode", "word", "number", "last", "stack", "statement", "quote",
                 "triple", "escape", "closing", "continued", "after_import", "fstring", "raw",
                 "spec", "brace", "fields")

    def __init__(self, kinds: dict[str, tuple[TriggerKind, ...]] | None = None):
        self.kinds = python_kinds() if kinds is None else kinds
        self.mode = _CODE
        self.word = ""          # the name or number being read
        self.number = False
        self.last = _START
        self.stack: tuple[int, ...] = ()
        self.statement = _NONE
        self.quote = ""
        self.triple = False
        self.escape = _NO_ESCAPE
        self.closing = 0        # closing quotes seen in a row (triple-quoted strings)
        self.continued = False  # a backslash just before: the next newline joins lines
        self.after_import = False
        # the string being read (quote, triple, fstring, raw) is an f-string, a raw string
        self.fstring = False
        self.raw = False
        self.spec = False       # in an f-string's format spec (else in its literal part)
        self.brace = False      # a "{" in an f-string's literal part: "{{" or a field?
        #: per open replacement field (innermost last): the f-string it is in (quote,
        #: triple, raw) and whether it opened in a format spec (where its "}" returns)
        self.fields: tuple[tuple[str, bool, bool, bool], ...] = ()

    def copy(self) -> PythonScanner:
        other = PythonScanner.__new__(PythonScanner)
        for name in PythonScanner.__slots__:
            setattr(other, name, getattr(self, name))
        return other

    def _fire(self, name: str, index: int = 0) -> TriggerKind | None:
        kinds = self.kinds.get(name)
        return kinds[index] if kinds else None

    # -- one character ---------------------------------------------------------------------

    def feed(self, char: str) -> TriggerKind | None:
        mode = self.mode
        if mode == _CODE:
            return self._code(char)
        if mode == _COMMENT:
            if char in "\r\n":
                self.mode = _CODE
                return self._code(char)
            return None
        if mode == _STRING:
            return self._string(char)
        if mode == _QUOTE1:
            if char == self.quote:
                self.mode = _QUOTE2
                return None
            self.mode, self.triple = _STRING, False
            return self._string(char)
        # _QUOTE2: two quotes; a third opens a triple-quoted string, anything else
        # follows an empty string
        if char == self.quote:
            self.mode, self.triple, self.closing = _STRING, True, 0
            return None
        self.mode, self.last = _CODE, _LITERAL
        return self._code(char)

    def _open_string(self, char: str, prefix: str) -> None:
        prefix = prefix.lower()
        self.mode, self.quote = _QUOTE1, char
        self.fstring, self.raw, self.spec, self.brace = "f" in prefix, "r" in prefix, False, False
        self.escape, self.closing = _NO_ESCAPE, 0

    def _string(self, char: str) -> TriggerKind | None:
        if self.brace:      # "{" then "{": a literal brace; anything else is in a field
            self.brace = False
            if char == "{":
                return None
            self._open_field()
            return self._code(char)
        escape = self.escape
        if escape:
            self.escape = _NO_ESCAPE
            if escape == _ESCAPE:
                if char == "N" and self.fstring and not self.raw:
                    self.escape = _ESCAPE_N
                if char != "{" or not self.fstring:
                    return None
            elif escape == _ESCAPE_N:
                if char == "{":
                    self.escape = _NAMED
                    return None
            elif char not in "\r\n" and char != self.quote:   # inside "\N{...}"
                if char != "}":
                    self.escape = _NAMED
                return None
        if char == "\\":
            self.escape = _ESCAPE
            self.closing = 0
            return None
        if self.fstring and char in "{}":
            self.closing = 0
            if char == "{":
                if self.spec:
                    self._open_field()
                else:
                    self.brace = True
            elif self.spec:   # the end of the spec closes its field
                self._close_field()
            return None
        if self.triple:
            if char == self.quote:
                self.closing += 1
                if self.closing == 3:
                    self._end_string()
            else:
                self.closing = 0
        elif char == self.quote:
            self._end_string()
        elif char in "\r\n":   # an unterminated string ends with its line
            self._end_string()
            return self._code(char)
        return None

    def _end_string(self) -> None:
        """The quote closes the string (an f-string's spec ends with it, and its fields)."""
        while self.fstring and self.spec:
            self._close_field()
        self.mode, self.last = _CODE, _LITERAL

    def _open_field(self) -> None:
        """A replacement field starts: its expression is code, inside a bracket level."""
        self.fields += ((self.quote, self.triple, self.raw, self.spec),)
        self.stack += (_FIELD,)
        self.mode, self.last, self.word = _CODE, _OTHER, ""

    def _close_field(self, spec: bool = False) -> None:
        """The field's top level reached ``}`` (or ``:`` with ``spec``): back to the
        f-string's text, its literal part or (``spec``, or a field nested in one) a spec."""
        self.quote, self.triple, self.raw, from_spec = self.fields[-1]
        if not spec:
            self.fields = self.fields[:-1]
            self.stack = self.stack[:-1]
        self.mode, self.fstring, self.spec = _STRING, True, spec or from_spec
        self.brace, self.escape, self.closing = False, _NO_ESCAPE, 0

    def _end_word(self) -> None:
        """The word being read is complete: classify it."""
        word, self.word = self.word, ""
        self.after_import = False
        if self.number:
            self.last = _LITERAL
            return
        if word in _KEYWORDS:
            if word == "from" and self.last == _START:
                self.statement = _FROM
            elif word == "import":
                if self.last == _START:
                    self.statement = _IMPORT
                elif self.statement == _FROM:
                    self.statement = _FROM_IMPORT
                    self.after_import = True
            self.last = _DEF if word in ("def", "class") else _KEYWORD
        else:
            self.last = _DEFNAME if self.last == _DEF else _NAME

    def _number_continues(self, char: str) -> bool:
        word = self.word
        decimal = not (len(word) > 1 and word[0] == "0" and word[1] in "xXoObB")
        if is_identifier_char(char):
            return True
        if char == "." and decimal:
            return not any(c in word for c in ".eEjJ")
        return char in "+-" and decimal and word[-1] in "eE"

    def _code(self, char: str) -> TriggerKind | None:
        after_import = False
        if self.word:
            if self.number:
                if self._number_continues(char):
                    self.word += char
                    return None
            elif is_identifier_char(char):
                self.word += char
                return None
            elif char in "'\"" and self.word in _STRING_PREFIXES:
                prefix, self.word = self.word, ""
                self._open_string(char, prefix)
                return None
            self._end_word()
            after_import = self.after_import
            self.after_import = False
        continued, self.continued = self.continued, False
        if char.isascii():
            if char.isalpha() or char == "_":
                self.word, self.number = char, False
                return None
            if char.isdigit():
                self.word, self.number = char, True
                return None
        elif is_identifier_char(char) and char.isidentifier():
            self.word, self.number = char, False
            return None
        if char in " \t\f":
            self.continued = continued
            return self._fire("import", 1) if after_import else None
        if char in "\r\n":
            if not continued and not self.stack:
                self.last, self.statement = _START, _NONE
            return None
        if char == "\\":
            self.continued = True
            return None
        if char == "#":
            self.mode = _COMMENT
            return None
        if char in "'\"":
            self._open_string(char, "")
            return None
        last = self.last
        if char == ".":
            self.last = _OTHER
            if last in (_NAME, _CLOSE, _LITERAL):
                if self.statement in (_FROM, _IMPORT) and last == _NAME:
                    return self._fire("import", 0)
                return self._fire("member")
            return None
        if char == "(":
            self.last = _OTHER
            if last in (_NAME, _CLOSE):
                self.stack += (_CALL,)
                return self._fire("keyword")
            if self.statement == _FROM_IMPORT and not self.stack:
                self.stack += (_IMPORT_PAREN,)
                return self._fire("import", 1)
            self.stack += (_PAREN,)
            return None
        if char in "[{":
            self.stack += (_BRACKET,)
            self.last = _OTHER
            return None
        field = bool(self.stack) and self.stack[-1] == _FIELD
        if field and char in "}:":
            self._close_field(spec=char == ":")
            return None
        if char in ")]}":
            if not field:   # a stray closer does not leave the field
                self.stack = self.stack[:-1]
            self.last = _CLOSE
            return None
        if char == ",":
            self.last = _OTHER
            top = self.stack[-1] if self.stack else None
            if top == _CALL:
                return self._fire("keyword")
            if self.statement == _FROM_IMPORT and top in (None, _IMPORT_PAREN):
                return self._fire("import", 1)
            return None
        if char == ";" and not self.stack:
            self.last, self.statement = _START, _NONE
            return None
        self.last = _OTHER
        return None
