"""Open documents as the language server keeps them: text, LSP positions and edits.

LSP counts lines split at ``\\n``, ``\\r\\n`` and ``\\r`` only (not at the other line
boundaries :meth:`str.splitlines` knows: form feed, U+2028, ...), and characters in code
units of the position encoding agreed at ``initialize``: UTF-16 unless the client offered
another, so a character outside the Basic Multilingual Plane (an emoji) counts 2, and in
UTF-8 a non-ASCII character counts 2 to 4. A position past the end of its line means the
end of the line; one inside a character means that character's start.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

__all__ = ["ENCODINGS", "Document", "identifier_before", "prompt_start", "units"]

#: position encodings (LSP ``PositionEncodingKind``) -> Python codec and bytes per unit
ENCODINGS = {"utf-8": ("utf-8", 1), "utf-16": ("utf-16-le", 2), "utf-32": ("utf-32-le", 4)}

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def units(text: str, encoding: str = "utf-16") -> int:
    """How many code units of ``encoding`` spell ``text``."""
    if encoding == "utf-32" or text.isascii():
        return len(text)
    codec, width = _codec(encoding)
    return len(text.encode(codec, "surrogatepass")) // width


def _codec(encoding: str) -> tuple[str, int]:
    try:
        return ENCODINGS[encoding]
    except KeyError:
        raise ValueError(f"unknown position encoding {encoding!r}: "
                         f"one of {', '.join(ENCODINGS)}") from None


def _index_in_line(line: str, character: int, encoding: str) -> int:
    """The index in ``line`` (no line break) of the position ``character`` code units in,
    clamped to the line's end and rounded down to a character's start."""
    if character <= 0:
        return 0
    if encoding == "utf-32" or line.isascii():
        return min(character, len(line))
    codec, width = _codec(encoding)
    count = 0
    for i, char in enumerate(line):
        count += len(char.encode(codec, "surrogatepass")) // width
        if count > character:
            return i
    return len(line)


@dataclass
class Document:
    """The text of one open document, edited as the client's ``didChange`` says."""

    uri: str
    text: str
    version: int | None = None
    encoding: str = "utf-16"
    _starts: list[int] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _codec(self.encoding)

    @property
    def line_starts(self) -> list[int]:
        """The index in ``text`` where each line starts (line 0 at 0)."""
        if self._starts is None:
            self._starts = [0] + [m.end() for m in _LINE_BREAK.finditer(self.text)]
        return self._starts

    def _line_end(self, line: int) -> int:
        """Where line ``line``'s text ends (before its line break)."""
        starts = self.line_starts
        if line + 1 >= len(starts):
            return len(self.text)
        end = starts[line + 1]
        return end - 2 if self.text.startswith("\r\n", end - 2) else end - 1

    def offset_at(self, line: int, character: int) -> int:
        """The index in ``text`` of the LSP position (``line``, ``character``); a line past
        the last one is the end of the text."""
        starts = self.line_starts
        if line < 0:
            return 0
        if line >= len(starts):
            return len(self.text)
        start = starts[line]
        return start + _index_in_line(self.text[start:self._line_end(line)], character, self.encoding)

    def position_at(self, offset: int) -> tuple[int, int]:
        """The LSP (line, character) of index ``offset`` of ``text``."""
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.line_starts, offset) - 1
        start = self.line_starts[line]
        # an offset between \r and \n belongs to the end of the line
        offset = min(offset, self._line_end(line))
        return line, units(self.text[start:offset], self.encoding)

    def apply(self, text: str, range_: tuple[tuple[int, int], tuple[int, int]] | None = None) -> None:
        """Replace the whole text (``range_`` None) or the text between two LSP positions
        ((line, character), (line, character)); an end before the start is swapped."""
        if range_ is None:
            self.text = text
        else:
            a, b = self.offset_at(*range_[0]), self.offset_at(*range_[1])
            a, b = min(a, b), max(a, b)
            self.text = self.text[:a] + text + self.text[b:]
        self._starts = None


def _is_identifier_char(char: str) -> bool:
    return char == "_" or char.isalnum() or ("a" + char).isidentifier()


def identifier_before(text: str, offset: int) -> str:
    """The part of a Python identifier typed just before ``offset`` ("" when the cursor
    does not follow an identifier character, or follows a number such as ``1.5``)."""
    start = offset
    while start > 0 and _is_identifier_char(text[start - 1]):
        start -= 1
    typed = text[start:offset]
    return typed if typed and typed.isidentifier() else ""


def prompt_start(text: str, end: int, max_chars: int) -> int:
    """Where the model's prompt for a cursor at ``end`` starts: at most ``max_chars``
    before it, at a line start, and the same place for every cursor in a stretch of
    ``max_chars // 4`` characters, so that successive requests in an editor share the
    prompt's beginning and the model reuses its cache of it."""
    if end <= max_chars:
        return 0
    step = max(1, max_chars // 4)
    start = -(-(end - max_chars) // step) * step   # rounded up to a multiple of step
    newline = text.find("\n", start, end)
    return newline + 1 if newline >= 0 else start
