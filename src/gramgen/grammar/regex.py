"""Python regular expressions lowered to the lexeme :class:`~gramgen.grammar.ir.Regex` AST.

We run Python's own regex parser, so the accepted syntax is exactly Python's, and then
translate the parse tree so that the AST matches exactly the strings that
``re.fullmatch(pattern, s, flags)`` matches. Constructs that are not regular (or that
depend on context outside the lexeme) raise :class:`GrammarError` naming them.

Decisions worth knowing:

* IGNORECASE is exact: for code points whose case behaviour can matter (a cached
  superset of everything Python's ``re`` treats as cased, plus their lower-case forms),
  membership is decided by asking ``re`` itself with the same flags; every other code
  point provably matches exactly as without IGNORECASE. Python's quirks are therefore
  reproduced, not "fixed".
* Anchors: ``^`` / ``\\A`` that can only be evaluated at offset 0, and ``$`` / ``\\Z``
  that can only be evaluated at the end, are always true under ``fullmatch`` and are
  dropped (whatever MULTILINE says; ``$`` at the very end is evaluated at ``len(s)``).
  Any other anchor (``\\b``, ``\\B``, ``^``/``$`` elsewhere) raises.
* Counted repeats are later expanded into automaton states, so a pattern whose expanded
  size exceeds :data:`MAX_EXPANDED_SIZE` character positions raises CompileLimitError.
"""

from __future__ import annotations

import re
from collections import defaultdict
from functools import cache, lru_cache

import numpy as np

from ..errors import CompileLimitError, GrammarError, position_to_line_col
from .ir import EMPTY, NOTHING, MAX_CODEPOINT, Alt, CharRanges, Regex, Repeat, Seq, normalize_ranges

try:  # Python >= 3.11
    from re import _constants as _c
    from re import _parser as _p
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

__all__ = ["MAX_EXPANDED_SIZE", "parse_regex"]

MAX_EXPANDED_SIZE = 50_000
"""Most character positions a pattern may have once counted repeats are expanded
(``x{m,n}`` counts ``n`` copies of ``x``, ``x{m,}`` counts ``m + 1``)."""

Ranges = tuple[tuple[int, int], ...]

UNIVERSE: Ranges = ((0, 0xD7FF), (0xE000, MAX_CODEPOINT))
"""All code points UTF-8 can encode (no surrogates)."""

_FLAG_LETTERS = {"i": re.I, "m": re.M, "s": re.S, "x": re.X, "u": re.U, "a": re.A, "l": re.L}
_KNOWN_FLAGS = int(re.I | re.M | re.S | re.X | re.U | re.A | re.L)
_TYPE_FLAGS = int(re.A | re.L | re.U)
_ABSENT = object()


def parse_regex(pattern: str, flags: int | str = 0, *, source: str | None = None,
                anchor_markers: tuple[int, int] | None = None) -> Regex:
    """The lexeme AST matching exactly what ``re.fullmatch(pattern, s, flags)`` matches.

    ``flags`` is an ``re`` flag int or Lark-style letters (``"imsxua"``). Errors carry the
    1-based line/column inside ``pattern`` (and ``offset``, the character offset) so a
    frontend can translate them to its own source positions.

    With ``anchor_markers=(bos, eos)`` (two code points above U+10FFFF) every ``^`` /
    ``\\A`` becomes the character ``bos`` and every ``$`` / ``\\Z`` the character ``eos``,
    wherever they stand: the caller matches the result against ``bos* text eos*`` (at
    least one of each), which gives anchors their zero-width meaning exactly (see
    :func:`gramgen.grammar.cpdfa.strip_markers`). ``$`` then means the end of the text
    only (ECMA-262), not Python's "or before a final newline".
    """
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be str, not {type(pattern).__name__}")
    iflags = _flags_to_int(flags, source)
    try:
        tree = _p.parse(pattern, iflags)
    except re.error as e:
        raise _error(f"invalid regex: {e.msg}", pattern, e.pos or 0, source) from None
    except RecursionError:
        raise _error("regex is nested too deeply", pattern, 0, source) from None
    except Exception as e:  # OverflowError, ValueError: the parser's other complaints
        raise _error(f"invalid regex: {e}", pattern, 0, source) from None
    conv = _Converter(pattern, source, tree.state.flags, anchor_markers)
    try:
        rx, _ = conv.seq(list(tree), tree.state.flags, True, True)
    except RecursionError:
        raise _error("regex is nested too deeply", pattern, 0, source) from None
    return rx


def _flags_to_int(flags: int | str, source: str | None) -> int:
    if isinstance(flags, str):
        value = 0
        for letter in flags:
            if letter not in _FLAG_LETTERS:
                raise GrammarError(f"unknown regex flag {letter!r}", source=source)
            value |= int(_FLAG_LETTERS[letter])
        return value
    value = int(flags)
    if value & ~_KNOWN_FLAGS:
        raise GrammarError(f"unsupported regex flags {value & ~_KNOWN_FLAGS:#x}", source=source)
    return value


def _error(message: str, pattern: str, pos: int, source: str | None) -> GrammarError:
    line, col = position_to_line_col(pattern, pos)
    err = GrammarError(message, line, col, source)
    err.offset = pos  # type: ignore[attr-defined]
    return err


# ------------------------------------------------------------------ range algebra


def _intersect(a: Ranges, b: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


intersect_ranges = _intersect
"""Intersection of two sorted, disjoint code-point range tuples (shared with the JSON Schema frontend)."""


def _complement(r: Ranges) -> Ranges:
    out: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in r:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = max(nxt, hi + 1)
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return _intersect(tuple(out), UNIVERSE)


def _points_to_ranges(points: list[int]) -> Ranges:
    return normalize_ranges((p, p) for p in points)


# ------------------------------------------------------------- character classes


def _text(lo: int, hi: int) -> str:
    """The string of code points lo..hi (no surrogates), built at C speed."""
    return np.arange(lo, hi + 1, dtype="<u4").tobytes().decode("utf-32-le")


def _scan_all(rx: re.Pattern[str]) -> Ranges:
    """Ranges of all code points (no surrogates) that the one-character ``rx`` matches."""
    out: list[tuple[int, int]] = []
    for lo, hi in UNIVERSE:
        text = _text(lo, hi)
        out.extend((lo + m.start(), lo + m.end() - 1) for m in rx.finditer(text))
    return normalize_ranges(out)


@cache
def _unicode_category(letter: str) -> Ranges:
    """\\d, \\s or \\w as Python's ``re`` defines them for str patterns (asked of ``re``
    itself, so it is right by construction; tests compare with the str predicates)."""
    return _scan_all(re.compile(f"\\{letter}+"))


@cache
def _ascii_category(letter: str) -> Ranges:
    rx = re.compile(f"\\{letter}", re.ASCII)
    return _points_to_ranges([c for c in range(128) if rx.fullmatch(chr(c))])


_CATEGORIES = {
    _c.CATEGORY_DIGIT: ("d", False), _c.CATEGORY_NOT_DIGIT: ("d", True),
    _c.CATEGORY_SPACE: ("s", False), _c.CATEGORY_NOT_SPACE: ("s", True),
    _c.CATEGORY_WORD: ("w", False), _c.CATEGORY_NOT_WORD: ("w", True),
}


@cache
def _case_points() -> tuple[str, Ranges]:
    """A superset of the code points whose IGNORECASE matching can differ from plain
    matching: anything with a case mapping (simple or full, as str methods or sre see
    it), and every character those mappings produce. Chunks of 256 code points without
    any case mapping are skipped at C speed."""
    try:
        import _sre
        iscased, tolower = _sre.unicode_iscased, _sre.unicode_tolower
    except (ImportError, AttributeError):  # pragma: no cover
        iscased, tolower = (lambda c: False), (lambda c: c)
    found: set[int] = set()
    for lo, hi in UNIVERSE:
        for base in range(lo, hi + 1, 256):
            chunk = _text(base, min(base + 255, hi))
            if chunk == chunk.lower() == chunk.upper() == chunk.casefold():
                continue
            for ch in chunk:
                maps = (ch.lower(), ch.upper(), ch.casefold(), ch.title())
                c = ord(ch)
                if any(m != ch for m in maps) or iscased(c):
                    found.add(c)
                    found.add(tolower(c))
                    for m in maps:
                        found.update(map(ord, m))
    points = sorted(c for c in found if not 0xD800 <= c <= 0xDFFF)
    return "".join(map(chr, points)), _points_to_ranges(points)


@lru_cache(maxsize=4096)
def _casefold_matches(item_pattern: str, flags: int) -> Ranges:
    """Which case-relevant code points the one-character ``item_pattern`` matches."""
    text, _ = _case_points()
    rx = re.compile(item_pattern, flags)
    return _points_to_ranges([ord(text[m.start()]) for m in rx.finditer(text)])


def _with_ignorecase(plain: Ranges, item_pattern: str, flags: int) -> Ranges:
    """Exact IGNORECASE set: outside the case-relevant points nothing changes (a code
    point there lowercases to itself and is nobody else's lower-case form), inside them
    ``re`` decides."""
    _, case_ranges = _case_points()
    kept = _intersect(plain, _complement(case_ranges))
    return normalize_ranges(kept + _casefold_matches(item_pattern, flags & (re.I | re.A | re.U)))


def _esc(c: int) -> str:
    return f"\\U{c:08x}"


# ------------------------------------------------------------------ construct positions

_AT_KIND = {
    _c.AT_BEGINNING: "^", _c.AT_BEGINNING_STRING: "\\A", _c.AT_END: "$",
    _c.AT_END_STRING: "\\Z", _c.AT_BOUNDARY: "\\b", _c.AT_NON_BOUNDARY: "\\B",
}
_GROUP_KINDS = {"(?=": "(?=", "(?!": "(?!", "(?<=": "(?<=", "(?<!": "(?<!", "(?>": "(?>",
                "(?(": "(?(", "(?P=": "backref"}


def _scan_constructs(pattern: str, verbose: bool) -> dict[str, list[int]]:
    """Offsets of special constructs in textual order, by kind (best effort: only used
    to point error messages at the right place)."""
    out: dict[str, list[int]] = defaultdict(list)
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            nxt = pattern[i + 1:i + 2]
            if nxt and nxt in "bBAZz":
                out["\\Z" if nxt == "z" else "\\" + nxt].append(i)
            elif nxt in "123456789" and not re.match(r"[0-7]{3}", pattern[i + 1:i + 4]):
                out["backref"].append(i)  # \NNN with three octal digits is a character
            i += 2
        elif ch == "[":
            i = _skip_class(pattern, i)
        elif verbose and ch == "#":
            j = pattern.find("\n", i)
            i = n if j < 0 else j + 1
        elif ch == "(" and pattern.startswith("(?#", i):
            j = pattern.find(")", i)
            i = n if j < 0 else j + 1
        elif ch == "(":
            for prefix in sorted(_GROUP_KINDS, key=len, reverse=True):
                if pattern.startswith(prefix, i):
                    out[_GROUP_KINDS[prefix]].append(i)
                    break
            i += 1
        elif ch in "*+?}" and pattern.startswith("+", i + 1) and not pattern.startswith("(?", i - 1):
            out["possessive"].append(i)
            i += 2
        else:
            if ch in "^$":
                out[ch].append(i)
            i += 1
    return out


def _skip_class(pattern: str, i: int) -> int:
    j = i + 1
    if pattern.startswith("^", j):
        j += 1
    if pattern.startswith("]", j):
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


# ------------------------------------------------------------------ tree conversion


def _combine_flags(flags: int, add: int, delete: int) -> int:
    if add & _TYPE_FLAGS:
        flags &= ~_TYPE_FLAGS
    return (flags | add) & ~delete


class _Converter:
    """Walks the sre parse tree; tracks which anchors are provably at an end."""

    def __init__(self, pattern: str, source: str | None, flags: int,
                 anchor_markers: tuple[int, int] | None = None):
        self.pattern = pattern
        self.markers = anchor_markers
        self.source = source
        self.verbose = bool(flags & re.X)
        self.seen: dict[str, int] = defaultdict(int)
        self._positions: dict[str, list[int]] | None = None

    def fail(self, kind: str, message: str) -> GrammarError:
        if self._positions is None:
            self._positions = _scan_constructs(self.pattern, self.verbose)
        found = self._positions.get(kind, [])
        index = self.seen[kind] - 1
        pos = found[index] if 0 <= index < len(found) else (found[0] if found else 0)
        return _error(message, self.pattern, pos, self.source)

    def visit(self, kind: str) -> None:
        self.seen[kind] += 1

    def seq(self, items: list, flags: int, at_start: bool, at_end: bool) -> tuple[Regex, int]:
        solid = [i for i, item in enumerate(items) if not self._zero_width(item)]
        first = solid[0] if solid else len(items)
        last = solid[-1] if solid else -1
        parts: list[Regex] = []
        size = 0
        empty = False
        for i, item in enumerate(items):  # convert all items: later ones may still raise
            rx, n = self.item(item, flags, at_start and i <= first, at_end and i >= last)
            size += n
            empty = empty or rx == NOTHING
            parts.extend(rx.items if isinstance(rx, Seq) else (rx,))
        _check_size(size)
        if empty:
            return NOTHING, size
        return (parts[0] if len(parts) == 1 else Seq(tuple(parts))), size

    def _zero_width(self, item) -> bool:
        op, av = item
        if op is _c.AT:
            return True
        if op is _c.SUBPATTERN:
            return all(self._zero_width(sub) for sub in av[-1])
        return False

    def item(self, item, flags: int, at_start: bool, at_end: bool) -> tuple[Regex, int]:
        op, av = item
        if op is _c.LITERAL or op is _c.NOT_LITERAL or op is _c.IN:
            return _chars(self.char_set(op, av, flags)), 1
        if op is _c.ANY:
            plain = UNIVERSE if flags & re.S else _intersect(UNIVERSE, _complement(((10, 10),)))
            return CharRanges(plain), 1
        if op is _c.BRANCH:
            alts, size = [], 0
            for branch in av[1]:
                rx, n = self.seq(list(branch), flags, at_start, at_end)
                alts.append(rx)
                size += n
            _check_size(size)
            return (alts[0] if len(alts) == 1 else Alt(tuple(alts))), size
        if op is _c.SUBPATTERN:
            _group, add, delete, sub = av
            return self.seq(list(sub), _combine_flags(flags, add, delete), at_start, at_end)
        if op is _c.MAX_REPEAT or op is _c.MIN_REPEAT:
            lo, hi, sub = av
            hi = None if hi == _c.MAXREPEAT else hi
            inner = hi is not None and hi <= 1
            rx, n = self.seq(list(sub), flags, at_start and inner, at_end and inner)
            size = n * (hi if hi is not None else lo + 1)
            _check_size(size)
            return _repeat(rx, lo, hi), size
        if op is _c.AT:
            return self.anchor(av, flags, at_start, at_end), 0
        raise self.unsupported(op, av)

    def anchor(self, code, flags: int, at_start: bool, at_end: bool) -> Regex:
        kind = _AT_KIND.get(code, "anchor")
        self.visit(kind)
        if self.markers is not None and not (flags & re.M and kind in ("^", "$")):
            if kind in ("^", "\\A"):
                return CharRanges(((self.markers[0], self.markers[0]),))
            if kind in ("$", "\\Z"):
                return CharRanges(((self.markers[1], self.markers[1]),))
        if kind in ("^", "\\A") and at_start or kind in ("$", "\\Z") and at_end:
            return EMPTY
        if kind == "\\b":
            raise self.fail(kind, "word boundary \\b is not supported")
        if kind == "\\B":
            raise self.fail(kind, "non-word-boundary \\B is not supported")
        if kind in ("^", "\\A"):
            extra = " (MULTILINE line starts are not supported)" if flags & re.M and kind == "^" else ""
            raise self.fail(kind, f"anchor {kind} is only supported at the start of the pattern{extra}")
        if kind in ("$", "\\Z"):
            extra = " (MULTILINE line ends are not supported)" if flags & re.M and kind == "$" else ""
            raise self.fail(kind, f"anchor {kind} is only supported at the end of the pattern{extra}")
        raise self.fail(kind, f"anchor {code} is not supported")

    def unsupported(self, op, av) -> GrammarError:
        if op is _c.ASSERT or op is _c.ASSERT_NOT:
            ahead = av[0] >= 0
            neg = op is _c.ASSERT_NOT
            kind = ("(?!" if neg else "(?=") if ahead else ("(?<!" if neg else "(?<=")
            what = ("negative " if neg else "") + ("lookahead" if ahead else "lookbehind")
            self.visit(kind)
            return self.fail(kind, f"{what} {kind}...) is not supported (not compilable to a lexeme DFA)")
        if op is _c.GROUPREF:
            self.visit("backref")
            return self.fail("backref", "backreference is not supported (not regular)")
        if op is _c.GROUPREF_EXISTS:
            self.visit("(?(")
            return self.fail("(?(", "conditional group (?(...)...) is not supported (not regular)")
        if op is getattr(_c, "ATOMIC_GROUP", _ABSENT):
            self.visit("(?>")
            return self.fail("(?>", "atomic group (?>...) is not supported")
        if op is getattr(_c, "POSSESSIVE_REPEAT", _ABSENT):
            self.visit("possessive")
            return self.fail("possessive", "possessive quantifier (*+, ++, ?+, {m,n}+) is not supported")
        return _error(f"regex construct {op} is not supported", self.pattern, 0, self.source)

    def char_set(self, op, av, flags: int) -> Ranges:
        """The code points one LITERAL / NOT_LITERAL / IN item matches under ``flags``."""
        if op is _c.LITERAL:
            plain: Ranges = ((av, av),)
            item_pattern = _esc(av)
        elif op is _c.NOT_LITERAL:
            plain = _complement(((av, av),))
            item_pattern = f"[^{_esc(av)}]"
        else:
            plain, item_pattern = self._in_set(av, flags)
        plain = _intersect(plain, UNIVERSE)
        if flags & re.I:
            return _with_ignorecase(plain, item_pattern, flags)
        return plain

    def _in_set(self, items, flags: int) -> tuple[Ranges, str]:
        negate = False
        ranges: list[tuple[int, int]] = []
        text: list[str] = []
        for op, av in items:
            if op is _c.NEGATE:
                negate = True
            elif op is _c.LITERAL:
                ranges.append((av, av))
                text.append(_esc(av))
            elif op is _c.RANGE:
                ranges.append(av)
                text.append(f"{_esc(av[0])}-{_esc(av[1])}")
            elif op is _c.CATEGORY and av in _CATEGORIES:
                letter, neg = _CATEGORIES[av]
                cat = _unicode_category(letter) if flags & re.U else _ascii_category(letter)
                ranges.extend(_complement(cat) if neg else cat)
                text.append("\\" + (letter.upper() if neg else letter))
            else:
                raise _error(f"character class item {op} {av} is not supported",
                             self.pattern, 0, self.source)
        plain = normalize_ranges(ranges)
        if negate:
            plain = _complement(plain)
        return plain, "[" + ("^" if negate else "") + "".join(text) + "]"


def _chars(ranges: Ranges) -> Regex:
    return CharRanges(ranges) if ranges else NOTHING


def _repeat(rx: Regex, lo: int, hi: int | None) -> Regex:
    if hi == 0 or rx == EMPTY:
        return EMPTY
    if lo == 1 and hi == 1:
        return rx
    if rx == NOTHING:
        return EMPTY if lo == 0 else NOTHING
    return Repeat(rx, lo, hi)


def _check_size(size: int) -> None:
    if size > MAX_EXPANDED_SIZE:
        raise CompileLimitError(
            f"regex expands to {size} character positions after counted repeats, "
            f"more than MAX_EXPANDED_SIZE={MAX_EXPANDED_SIZE}")
