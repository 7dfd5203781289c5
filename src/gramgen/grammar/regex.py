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
import string
from collections import defaultdict
from functools import cache, lru_cache

import numpy as np

from .._lru import cleared_with_all
from .cpdfa import as_regex, strip_markers
from .cpdfa import from_regex as dfa_from_regex
from ..errors import CompileLimitError, ConfigurationError, GrammarError, position_to_line_col
from .ir import EMPTY, NOTHING, MAX_CODEPOINT, Alt, CharRanges, Regex, Repeat, Seq, normalize_ranges

try:  # Python >= 3.11
    from re import _constants as _c
    from re import _parser as _p
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

__all__ = ["MAX_EXPANDED_SIZE", "PatternError", "parse_ecma_regex", "parse_regex", "translate_ecma"]

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
                anchor_markers: tuple[int, int] | None = None,
                case_folding: str = "python", max_expanded: int | None = MAX_EXPANDED_SIZE) -> Regex:
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

    ``case_folding="simple"``: IGNORECASE means ECMA-262's with the ``u`` flag (two
    characters match when their Unicode simple case foldings are equal; a negated class
    is negated after folding) instead of Python's.

    ``max_expanded``: the most character positions the pattern may have once its counted
    repeats are expanded (CompileLimitError beyond); None for no limit, where the caller
    compiles the result as a lexeme (a lexeme too big for one DFA becomes rules, see
    :mod:`gramgen.grammar.split`) instead of expanding it into a code-point automaton.
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
    conv = _Converter(pattern, source, tree.state.flags, anchor_markers, case_folding == "simple", max_expanded)
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


@cleared_with_all
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


_SIMPLE_FOLD_15_1 = {0x1FD3: 0x0390, 0x1FE3: 0x03B0, 0xFB05: 0xFB06}
"""CaseFolding.txt 15.1 lines ``1FD3; S; 0390``, ``1FE3; S; 03B0``, ``FB05; S; FB06``."""


def _simple_fold(c: int) -> int:
    """Unicode simple case folding (CaseFolding.txt, statuses C and S) of one code point.
    ``str.casefold`` applies C and F; where F gives several characters the S mapping,
    where there is one, is the single-character lower-case form (ẞ -> ß, ᾈ -> ᾀ), except
    for the S mappings Unicode 15.1 added between characters of one case."""
    if c in _SIMPLE_FOLD_15_1:
        return _SIMPLE_FOLD_15_1[c]
    ch = chr(c)
    folded = ch.casefold()
    if len(folded) == 1:
        return ord(folded)
    lower = ch.lower()
    return ord(lower) if len(lower) == 1 else c


@cache
def _simple_fold_classes() -> dict[int, tuple[int, ...]]:
    """Case-relevant code point -> all case-relevant code points with the same simple folding."""
    text, _ = _case_points()
    members: dict[int, list[int]] = defaultdict(list)
    for ch in text:
        members[_simple_fold(ord(ch))].append(ord(ch))
    return {c: tuple(group) for group in members.values() for c in group}


@cleared_with_all
@lru_cache(maxsize=4096)
def _simple_fold_closure(plain: Ranges) -> Ranges:
    """The code points whose simple case folding is that of some point of ``plain``
    (ECMA-262 Canonicalize with the u flag). Outside the case-relevant points a code point
    folds to itself and nothing else folds to it, so only those points are looked at."""
    _, case_ranges = _case_points()
    classes = _simple_fold_classes()
    found: list[int] = []
    for lo, hi in _intersect(plain, case_ranges):
        for c in range(lo, hi + 1):
            found.extend(classes.get(c, (c,)))
    return normalize_ranges(plain + _points_to_ranges(found))


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
                 anchor_markers: tuple[int, int] | None = None, simple_folding: bool = False,
                 max_expanded: int | None = MAX_EXPANDED_SIZE):
        self.pattern = pattern
        self.max_expanded = max_expanded
        self.simple_folding = simple_folding
        self.markers = anchor_markers
        self.source = source
        self.verbose = bool(flags & re.X)
        self.seen: dict[str, int] = defaultdict(int)
        self._positions: dict[str, list[int]] | None = None

    def check_size(self, size: int) -> None:
        if self.max_expanded is not None and size > self.max_expanded:
            raise CompileLimitError(
                f"regex expands to {size} character positions after counted repeats, "
                f"more than {self.max_expanded}")

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
        self.check_size(size)
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
            self.check_size(size)
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
            self.check_size(size)
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
        if op is _c.LITERAL or op is _c.NOT_LITERAL:
            positive: Ranges = ((av, av),)
            negate = op is _c.NOT_LITERAL
            item_pattern = f"[^{_esc(av)}]" if negate else _esc(av)
        else:
            positive, negate, item_pattern = self._in_set(av, flags)
        if flags & re.I and self.simple_folding:
            folded = _simple_fold_closure(_intersect(positive, UNIVERSE))
            return _complement(folded) if negate else folded
        plain = _intersect(_complement(positive) if negate else positive, UNIVERSE)
        if flags & re.I:
            return _with_ignorecase(plain, item_pattern, flags)
        return plain

    def _in_set(self, items, flags: int) -> tuple[Ranges, bool, str]:
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
        return normalize_ranges(ranges), negate, "[" + ("^" if negate else "") + "".join(text) + "]"


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


# ------------------------------------------------------------------ ECMA-262 flavour
#
# ECMA-262 patterns (with the u flag, as JSON Schema and ``from_regex(flavor="ecma")`` read
# them) are parsed by their own grammar and written out as Python syntax whose every
# character and class is spelled as explicit code points, so that no Python-specific
# meaning (Unicode \d, \s, \w, "$ before a final newline", Python case folding, class set
# operations) can slip in. The translation keeps, per output character, the offset of the
# ECMA construct it came from, so errors point into the user's pattern.

ANCHOR_MARKERS = (MAX_CODEPOINT + 1, MAX_CODEPOINT + 2)
"""Stand-ins for the two ends of the text, for anchors (see ``anchor_markers``)."""

_LINE_TERMINATORS: Ranges = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
_ECMA_DIGIT: Ranges = ((0x30, 0x39),)
_ECMA_WORD: Ranges = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
_ECMA_WORD_IGNORE_CASE: Ranges = normalize_ranges(_ECMA_WORD + ((0x17F, 0x17F), (0x212A, 0x212A)))
"""WordCharacters with the u and i flags: also ſ and the Kelvin sign, which fold into a-z."""
_ECMA_SPACE: Ranges = ((0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                       (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000),
                       (0xFEFF, 0xFEFF))
"""WhiteSpace (TAB VT FF SP NBSP ZWNBSP and the Zs category) and LineTerminator."""
_SYNTAX_CHARACTERS = "^$\\.*+?()[]{}|"
_CONTROL_ESCAPES = {"f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_QUANTIFIER = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")
_QUANTIFIER_LIKE = re.compile(r"\{[0-9]*,[0-9]+\}|\{[0-9]+,?[0-9]*\}")
"""A brace that reads as a quantifier: never taken as a literal, even by lenient syntax
(``a{,5}`` is ``a{0,5}`` to Python and the literal ``a{,5}`` to Annex B)."""
_ECMA_FLAG_LETTERS = "dgimsuy"
"""Flags ``from_regex(flavor="ecma")`` takes; d, g, u (always on) and y do not change
which strings fully match."""


class PatternError(Exception):
    """An ECMA-262 pattern that is malformed or uses a construct with no exact
    translation; ``offset`` is where in the pattern (0-based character offset)."""

    def __init__(self, message: str, offset: int = 0):
        self.message = message
        self.offset = offset
        super().__init__(f"{message} (at character {offset + 1} of the pattern)")


class EcmaTranslation:
    """Python ``re`` text with the meaning of an ECMA-262 pattern, and where each of its
    characters came from (``origin(i)``: offset in the ECMA pattern)."""

    def __init__(self, python: str, origins: list[int], anchored: bool):
        self.python = python
        self._origins = origins
        self.anchored = anchored

    def origin(self, python_offset: int) -> int:
        if not self._origins:
            return 0
        return self._origins[min(max(python_offset, 0), len(self._origins) - 1)]


def _ecma_body(ranges: Ranges) -> str:
    return "".join(_esc(lo) if lo == hi else f"{_esc(lo)}-{_esc(hi)}" for lo, hi in ranges)


def _ecma_class(ranges: Ranges) -> str:
    """A Python class of exactly these code points (an empty one matches nothing)."""
    ranges = normalize_ranges(ranges)
    if not ranges:
        return f"[^{_esc(0)}-{_esc(MAX_CODEPOINT)}]"
    return f"[{_ecma_body(ranges)}]"


class _EcmaTranslator:
    """Recursive descent over ECMA-262's Pattern grammar (u flag), writing Python text."""

    def __init__(self, pattern: str, ignore_case: bool, multiline: bool, dot_all: bool, lenient: bool):
        self.p = pattern
        self.lenient = lenient
        self.i = 0
        self.multiline = multiline
        self.dot_all = dot_all
        self.word = _ECMA_WORD_IGNORE_CASE if ignore_case else _ECMA_WORD
        self.out: list[str] = []
        self.origins: list[int] = []
        self.names: set[str] = set()
        self.anchored = False

    def run(self) -> EcmaTranslation:
        self.disjunction()
        if self.i < len(self.p):  # only a ')' stops a top-level disjunction early
            raise PatternError("unmatched ')'", self.i)
        return EcmaTranslation("".join(self.out), self.origins, self.anchored)

    def emit(self, text: str, at: int) -> None:
        self.out.append(text)
        self.origins.extend([at] * len(text))

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def disjunction(self) -> None:
        self.alternative()
        while self.peek() == "|":
            self.emit("|", self.i)
            self.i += 1
            self.alternative()

    def alternative(self) -> None:
        while self.i < len(self.p) and self.peek() not in "|)":
            self.term()

    def term(self) -> None:
        start, ch = self.i, self.peek()
        if ch in "^$":
            self.anchored = True
            self.emit(ch if self.multiline else ("^" if ch == "^" else "\\Z"), start)
            self.i += 1
            return
        if ch == "\\" and self.peek(1) in ("b", "B"):
            what = "word boundary \\b" if self.peek(1) == "b" else "non-word-boundary \\B"
            raise PatternError(f"{what} is not supported (not compilable to a lexeme DFA)", start)
        for prefix, what in (("(?=", "lookahead"), ("(?!", "negative lookahead"),
                             ("(?<=", "lookbehind"), ("(?<!", "negative lookbehind")):
            if self.p.startswith(prefix, start):
                raise PatternError(f"{what} {prefix}...) is not supported (not compilable to a lexeme DFA)",
                                   start)
        self.atom()
        q = self.peek()
        if q in ("*", "+", "?"):
            self.emit(q, self.i)
            self.i += 1
        elif q == "{":
            m = _QUANTIFIER.match(self.p, self.i)
            if not m and self.lenient and not _QUANTIFIER_LIKE.match(self.p, self.i):
                return  # Annex B: a brace that is no quantifier is the character
            if not m:
                raise PatternError("incomplete quantifier: write \\{ for the character {", self.i)
            lo, hi = int(m.group(1)), m.group(3)
            if hi and int(hi) < lo:
                raise PatternError("numbers out of order in {} quantifier", self.i)
            self.emit(m.group(0), self.i)
            self.i = m.end()
        else:
            return
        if self.peek() == "?":  # lazy: the same strings fully match
            self.i += 1
        if self.peek() and self.peek() in "*+?{":
            raise PatternError("nothing to repeat (a quantifier follows a quantifier)", self.i)

    def atom(self) -> None:
        start, ch = self.i, self.peek()
        if ch == "(":
            if self.p.startswith("(?:", start):
                self.i += 3
            elif self.p.startswith("(?<", start):
                end = self.p.find(">", start + 3)
                name = self.p[start + 3:end] if end >= 0 else ""
                if not name or not name.replace("$", "_").isidentifier():
                    raise PatternError("invalid capture group name (write (?<name>...))", start)
                if name in self.names:
                    raise PatternError(f"duplicate capture group name {name!r}", start)
                self.names.add(name)
                self.i = end + 1
            elif self.p.startswith("(?", start):
                raise PatternError("unknown group syntax (?... (ECMA-262 has (?:, (?<name>, (?=, (?!, "
                                   "(?<=, (?<!; inline modifiers are not supported)", start)
            else:
                self.i += 1
            self.emit("(?:", start)
            self.disjunction()
            if self.peek() != ")":
                raise PatternError("missing ')' for this group", start)
            self.emit(")", self.i)
            self.i += 1
        elif ch == "[":
            self.emit(self.char_class(), start)
        elif ch == ".":
            dot = UNIVERSE if self.dot_all else _complement(_LINE_TERMINATORS)
            self.emit(_ecma_class(dot), start)
            self.i += 1
        elif ch == "\\":
            ranges = self.class_escape(start, in_class=False)
            self.emit(_esc(self.character_escape(in_class=False)) if ranges is None else _ecma_class(ranges),
                      start)
        elif self.lenient and (ch in "]}" or ch == "{" and not _QUANTIFIER_LIKE.match(self.p, start)):
            self.emit(_esc(ord(ch)), start)  # Annex B: the character itself
            self.i += 1
        elif ch in "*+?{":
            raise PatternError(f"nothing to repeat before {ch!r} (write \\{ch} for the character)", start)
        elif ch in "]}":
            raise PatternError(f"lone {ch!r}: write \\{ch} for the character (u flag)", start)
        else:
            self.emit(_esc(ord(ch)), start)
            self.i += 1

    def class_escape(self, start: int, in_class: bool) -> Ranges | None:
        """The set of a ``\\d \\D \\s \\S \\w \\W`` escape at ``start`` (None: not one);
        raises for escapes that are not regular or not supported."""
        c = self.peek(1)
        sets = {"d": _ECMA_DIGIT, "s": _ECMA_SPACE, "w": self.word}
        if c and c.lower() in sets:
            self.i += 2
            base = sets[c.lower()]
            return _intersect(_complement(base), UNIVERSE) if c.isupper() else base
        if c in ("p", "P"):
            raise PatternError(f"Unicode property escape \\{c}{{...}} is not supported", start)
        if c == "k":
            raise PatternError("named backreference \\k<...> is not supported (not regular)", start)
        if c and c in "123456789":
            raise PatternError("backreference \\" + c + " is not supported (not regular)", start)
        return None

    def character_escape(self, in_class: bool) -> int:
        start, c = self.i, self.peek(1)
        if c == "":
            raise PatternError("pattern ends with a lone backslash", start)
        if c in _CONTROL_ESCAPES:
            self.i += 2
            return _CONTROL_ESCAPES[c]
        if c == "c":
            letter = self.peek(2)
            if not ("a" <= letter <= "z" or "A" <= letter <= "Z"):
                raise PatternError("\\c must be followed by an ASCII letter", start)
            self.i += 3
            return ord(letter) % 32
        if c == "0":
            if self.peek(2).isdigit():
                raise PatternError("octal escape \\0" + self.peek(2) + " is not allowed (u flag)", start)
            self.i += 2
            return 0
        if c == "x":
            m = re.compile(r"[0-9A-Fa-f]{2}").match(self.p, start + 2)
            if not m:
                raise PatternError("\\x must be followed by two hex digits", start)
            self.i = m.end()
            return int(m.group(0), 16)
        if c == "u":
            return self.unicode_escape(start)
        if c in _SYNTAX_CHARACTERS or c == "/" or (in_class and c == "-"):
            self.i += 2
            return ord(c)
        if in_class and c == "b":
            self.i += 2
            return 0x08
        if self.lenient and c in string.punctuation:  # Annex B identity escape: \: \- \_ \@
            self.i += 2
            return ord(c)
        raise PatternError(f"invalid escape \\{c} (with the u flag only syntax characters, / and, "
                           "in a class, - may be escaped)", start)

    def unicode_escape(self, start: int) -> int:
        if self.peek(2) == "{":
            m = re.compile(r"\{([0-9A-Fa-f]+)\}").match(self.p, start + 2)
            if not m or int(m.group(1), 16) > MAX_CODEPOINT:
                raise PatternError("\\u{...} must hold a code point up to 10FFFF in hex", start)
            self.i = m.end()
            return int(m.group(1), 16)
        m = _HEX4.match(self.p, start + 2)
        if not m:
            raise PatternError("\\u must be followed by four hex digits or {code point}", start)
        cp = int(m.group(0), 16)
        self.i = m.end()
        if 0xD800 <= cp <= 0xDBFF and self.p.startswith("\\u", self.i):
            trail = _HEX4.match(self.p, self.i + 2)
            if trail and 0xDC00 <= int(trail.group(0), 16) <= 0xDFFF:  # a surrogate pair: one code point
                self.i = trail.end()
                return 0x10000 + ((cp - 0xD800) << 10) + int(trail.group(0), 16) - 0xDC00
        return cp

    def class_atom(self) -> tuple[Ranges | None, int]:
        """One class atom: (a set, -1) for a class escape, (None, code point) otherwise."""
        start = self.i
        if self.peek() != "\\":
            self.i += 1
            return None, ord(self.p[start])
        ranges = self.class_escape(start, in_class=True)
        if ranges is not None:
            return ranges, -1
        if self.peek(1) == "B":
            raise PatternError("invalid escape \\B in a character class", start)
        return None, self.character_escape(in_class=True)

    def char_class(self) -> str:
        start = self.i
        self.i += 1
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        ranges: list[tuple[int, int]] = []
        while True:
            if self.i >= len(self.p):
                raise PatternError("missing ']' for this character class", start)
            if self.peek() == "]":
                self.i += 1
                break
            atom_start = self.i
            low_set, low = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                high_set, high = self.class_atom()
                if low_set is not None or high_set is not None:
                    raise PatternError("a class escape (\\d, \\w, \\s...) cannot bound a range", atom_start)
                if low > high:
                    raise PatternError("range out of order in character class", atom_start)
                ranges.append((low, high))
            elif low_set is not None:
                ranges.extend(low_set)
            else:
                ranges.append((low, low))
        positive = normalize_ranges(ranges)
        if not positive:  # [] matches nothing, [^] any character
            return _ecma_class(UNIVERSE if negate else ())
        return f"[{'^' if negate else ''}{_ecma_body(positive)}]"


def translate_ecma(pattern: str, *, ignore_case: bool = False, multiline: bool = False,
                   dot_all: bool = False, lenient_syntax: bool = False) -> EcmaTranslation:
    """Python ``re`` text with exactly the meaning of the ECMA-262 ``pattern`` under the u
    flag (and i / m / s as given), to be read by :func:`parse_regex` (with
    ``case_folding="simple"`` under i); raises :class:`PatternError`.

    ECMA semantics kept: ``.`` excludes only \\n \\r U+2028 U+2029 (s: nothing); \\d \\w
    ASCII (with i, \\w also holds ſ and the Kelvin sign); \\s ECMA's whitespace and line
    terminators; ``$`` the end only and ``^`` the start only (m: line ends and starts);
    ``[]`` nothing and ``[^]`` anything; ``\\u{...}``, surrogate pairs ``\\uD83D\\uDE00``
    as one code point, ``\\cX``, ``\\0``, ``(?<name>...)``. Rejected: backreferences
    (``\\1``, ``\\k<name>``), lookarounds, ``\\b`` / ``\\B``, ``\\p{...}``, inline
    modifiers, and whatever the u flag makes a syntax error (``a{``, lone ``]`` / ``}``,
    identity escapes of letters, octal escapes).

    ``lenient_syntax=True`` (JSON Schema patterns, often written for engines without the
    u flag) also takes what Annex B gives one meaning: an escaped ASCII punctuation
    character (``\\:``, ``\\-``, ``\\_``) and a lone ``]``, ``}`` or a ``{`` that cannot
    be read as a quantifier are the characters themselves. The meaning stays the u flag's."""
    if not isinstance(pattern, str):
        raise PatternError(f"a pattern must be a string, not {type(pattern).__name__}")
    try:
        return _EcmaTranslator(pattern, ignore_case, multiline, dot_all, lenient_syntax).run()
    except RecursionError:
        raise PatternError("pattern is nested too deeply") from None


def parse_ecma_regex(pattern: str, flags: int | str = "", *, source: str | None = None) -> Regex:
    """The lexeme AST of the strings the whole ECMA-262 ``pattern`` matches, as JavaScript's
    ``new RegExp("^(?:" + pattern + ")$", "u" + flags)`` would accept them.

    ``flags``: ECMA letters (``"ims"``; ``d g u y`` change nothing here) or ``re.I`` /
    ``re.M`` / ``re.S``. Errors carry the line/column inside ``pattern``."""
    ignore_case, multiline, dot_all = _ecma_flags(flags)
    try:
        translation = translate_ecma(pattern, ignore_case=ignore_case, multiline=multiline, dot_all=dot_all)
    except PatternError as exc:
        raise _error(exc.message, pattern, exc.offset, source) from None
    py_flags = (re.I if ignore_case else 0) | (re.M if multiline else 0)
    try:
        if not translation.anchored:
            return parse_regex(translation.python, py_flags, case_folding="simple")
        bos, eos = ANCHOR_MARKERS
        core = parse_regex(translation.python, py_flags, anchor_markers=ANCHOR_MARKERS, case_folding="simple")
        wrapped = Seq((Repeat(CharRanges(((bos, bos),)), 0, None), core, Repeat(CharRanges(((eos, eos),)), 0, None)))
        return as_regex(strip_markers(dfa_from_regex(wrapped), bos, eos))
    except GrammarError as exc:
        at = translation.origin(getattr(exc, "offset", 0))
        raise _error(exc.message, pattern, at, source) from None


def _ecma_flags(flags: int | str) -> tuple[bool, bool, bool]:
    """(ignore_case, multiline, dot_all) from ECMA flag letters or re.I / re.M / re.S."""
    if isinstance(flags, str):
        for letter in flags:
            if letter == "v":
                raise ConfigurationError("the ECMA-262 v flag (unicodeSets) is not supported; "
                                         "patterns are read with the u flag")
            if letter not in _ECMA_FLAG_LETTERS:
                raise ConfigurationError(f"unknown ECMA-262 regex flag {letter!r}: use letters of "
                                         f"{_ECMA_FLAG_LETTERS!r} or re.I / re.M / re.S")
        return "i" in flags, "m" in flags, "s" in flags
    if isinstance(flags, bool) or not isinstance(flags, int):
        raise ConfigurationError(f"flags must be an int or a string of flag letters, not {type(flags).__name__}")
    value = int(flags)
    if value & ~int(re.I | re.M | re.S | re.U):
        raise ConfigurationError(f"flags {value:#x}: with flavor='ecma' only re.I, re.M and re.S "
                                 "(or the letters 'ims') apply")
    return bool(value & re.I), bool(value & re.M), bool(value & re.S)
