"""A :class:`Document`: the matcher state after a text that is being edited.

Code completion continues a file that is already half written, and an editor asks again
after every keystroke. Advancing a matcher over the whole file each time would cost
time proportional to the file; a document remembers the parser state at the start of
every line and, when the text changes, goes back to the last line start before the first
changed byte and advances only from there.
"""

from __future__ import annotations

import bisect
import threading

from .matcher import Matcher, _text_bytes, text_rejected

__all__ = ["Document"]


class Document:
    """The parser state after a text, kept up to date as the text changes.

    ``update(text)`` advances over what changed since the last update and returns a
    fresh :class:`~gramgen.Matcher` (a fork: advance it freely) at the end of the text; a
    text that no word of the grammar starts with raises :class:`~gramgen.TextRejected`
    (line and column of the first byte that cannot continue), leaving the document at the
    start of that line, so that the next update (the line fixed) starts there. Thread-safe.
    """

    def __init__(self, compiled):
        self._matcher: Matcher = compiled.matcher()
        self._text = b""
        #: (text offset of a line start, chart length there, layout there), by offset
        self._marks: list[tuple] = [(0, len(self._matcher._chart), self._matcher._layout_state())]
        self._lock = threading.Lock()
        self.bytes_advanced = 0   # over all updates: what re-advancing cost

    @property
    def text(self) -> bytes:
        """The text the state is at."""
        return self._text

    def update(self, text: str | bytes) -> Matcher:
        data = _text_bytes(text)
        with self._lock:
            common = _common_prefix(self._text, data)
            at = bisect.bisect_right(self._marks, common, key=lambda m: m[0]) - 1
            offset, chart_length, layout = self._marks[at]
            del self._marks[at + 1:]
            self._matcher._restore(chart_length, layout)
            self._text = data[:offset]
            rest = data[offset:]
            failed = self._matcher._advance_bytes(rest, self._marks, offset)
            self.bytes_advanced += len(rest)
            if failed is not None:   # the state stays at the last line start before it
                self._text = data[:self._marks[-1][0]]
                raise text_rejected(data, offset + failed)
            self._text = data
            return self._matcher.fork()

    def common_prefix(self, text: str | bytes) -> int:
        """How many leading bytes ``text`` shares with the document's text."""
        return _common_prefix(self._text, _text_bytes(text))


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n   # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
