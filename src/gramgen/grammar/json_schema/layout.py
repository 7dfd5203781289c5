"""The whitespace layout of compiled JSON: which bytes go around the punctuation.

Three modes (``whitespace=``), refined by ``separators=`` and ``indent=`` exactly as
:func:`json.dumps` reads them:

* "compact": ``{"a":1,"b":[1,2]}``;
* "standard": json.dumps' default, ``{"a": 1, "b": [1, 2]}``;
* "flexible": any JSON whitespace between tokens, at most ``max_whitespace`` per gap.

With ``indent``, a non-empty container at depth d opens with a newline and the indent
repeated d + 1 times, repeats that after each item separator, and closes after a newline
and the indent d times; ``{}`` and ``[]`` stay as they are. The pieces therefore depend on
the depth, which the compiler passes in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from ...errors import ConfigurationError
from ..ir import EMPTY, CharRanges, Regex, Repeat, literal
from ..simplify import seq

WHITESPACE_MODES = ("compact", "standard", "flexible")
_SEPARATORS = {"compact": (",", ":"), "standard": (", ", ": ")}
_INDENTED_SEPARATORS = (",", ": ")
"""json.dumps' separators once ``indent`` is given (no space before the newline)."""
_JSON_WS = re.compile(r"[ \t\n\r]*")
MAX_INDENT = 64
"""The longest indent (a longer one only makes huge literals)."""


@dataclass(frozen=True)
class Layout:
    flexible: bool
    max_ws: int
    item_sep: str
    key_sep: str
    indent: str | None

    @classmethod
    def of(cls, whitespace: str, separators, indent, max_whitespace: int) -> Layout:
        """Validate the options of :meth:`Grammar.from_json_schema` that shape whitespace."""
        if whitespace not in WHITESPACE_MODES:
            raise ConfigurationError(f"whitespace must be one of {', '.join(map(repr, WHITESPACE_MODES))}, "
                                     f"not {whitespace!r}")
        if isinstance(max_whitespace, bool) or not isinstance(max_whitespace, int) or max_whitespace < 0:
            raise ConfigurationError(f"max_whitespace must be an integer >= 0, not {max_whitespace!r}")
        flexible = whitespace == "flexible"
        if flexible and (separators is not None or indent is not None):
            raise ConfigurationError("separators= and indent= fix the whitespace exactly; they do not combine "
                                     "with whitespace='flexible' (use 'compact' or 'standard')")
        indent_text = _indent_text(indent)
        if separators is None:
            item_sep, key_sep = _INDENTED_SEPARATORS if indent_text is not None else \
                _SEPARATORS.get(whitespace, (",", ":"))
        else:
            if isinstance(separators, (str, bytes)) or not isinstance(separators, (tuple, list)) \
                    or len(separators) != 2:
                raise ConfigurationError("separators must be a pair (item_separator, key_separator) such as "
                                         f"(', ', ': '), not {separators!r}")
            item_sep, key_sep = separators
            for name, sep, core in (("item separator", item_sep, ","), ("key separator", key_sep, ":")):
                if not isinstance(sep, str) or core not in sep or not all(
                        _JSON_WS.fullmatch(side) for side in sep.split(core, 1)):
                    raise ConfigurationError(f"separators: the {name} must be {core!r} with optional JSON "
                                             f"whitespace (space, tab, newline, carriage return) around it, "
                                             f"not {sep!r}")
        return cls(flexible, max_whitespace, item_sep, key_sep, indent_text)

    @property
    def by_depth(self) -> bool:
        """Whether the pieces differ with the depth of the container (``indent``)."""
        return self.indent is not None

    @cached_property
    def ws(self) -> Regex:
        """One gap of flexible whitespace (nothing otherwise)."""
        if not self.flexible:
            return EMPTY
        return Repeat(CharRanges(((9, 10), (13, 13), (32, 32))), 0, self.max_ws)

    def open(self, ch: str) -> Regex:
        return seq([literal(ch), self.ws]) if self.flexible else literal(ch)

    def first(self, depth: int) -> Regex | None:
        """What comes between the opening bracket and the first item (None: nothing)."""
        return None if self.indent is None else literal("\n" + self.indent * (depth + 1))

    def comma(self, depth: int) -> Regex:
        if self.flexible:
            return seq([self.ws, literal(","), self.ws])
        return literal(self.item_sep + ("" if self.indent is None else "\n" + self.indent * (depth + 1)))

    def colon(self) -> Regex:
        return self._colon

    @cached_property
    def _colon(self) -> Regex:
        # (after every key: made once per layout, as ``ws``; regexes are immutable)
        return seq([self.ws, literal(":"), self.ws]) if self.flexible else literal(self.key_sep)

    def close(self, ch: str, depth: int, empty: bool) -> Regex:
        """The closing bracket after the last item, or of an empty container."""
        if self.flexible:
            return seq([self.ws, literal(ch)])
        if self.indent is None or empty:
            return literal(ch)
        return literal("\n" + self.indent * depth + ch)


def _indent_text(indent) -> str | None:
    if indent is None:
        return None
    if isinstance(indent, bool) or not isinstance(indent, (int, str)):
        raise ConfigurationError(f"indent must be None, an integer >= 0 or a string of JSON whitespace, "
                                 f"not {indent!r}")
    if isinstance(indent, int):
        if not 0 <= indent <= MAX_INDENT:
            raise ConfigurationError(f"indent must be between 0 and {MAX_INDENT}, not {indent}")
        return " " * indent
    if len(indent) > MAX_INDENT or not _JSON_WS.fullmatch(indent):
        raise ConfigurationError(f"indent must be at most {MAX_INDENT} characters of JSON whitespace "
                                 f"(space, tab, newline, carriage return), not {indent!r}")
    return indent
