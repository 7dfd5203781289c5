"""llama.cpp's GBNF, lowered to the IR.

The parser follows llama.cpp's ``grammar_parser`` (names, escapes, char classes, ``.``,
``*`` ``+`` ``?`` ``{m}`` ``{m,}`` ``{m,n}``, ``#`` comments) with three deliberate
differences, all of which only turn llama.cpp errors into sensible grammars or clearer
errors:

* ``_`` is allowed in rule names (transformers-CFG grammars use it) and ``{,n}`` means
  ``{0,n}``;
* a rule may continue on the next line: a newline ends a rule only when the next
  non-blank line starts a new rule (``name ::=``) or the text ends, so ``a ::= x`` followed
  by an indented ``| y`` is one rule (llama.cpp needs the ``|`` at the end of the line);
* defining a rule twice is an error (llama.cpp silently keeps the last definition).

Left recursion is fine here (llama.cpp rejects it): the engine is a general CFG parser.
Literals and char classes become lexemes, groups and repetitions become helper rules
(``name/1``, ...); :func:`~gramgen.grammar.simplify.collapse_regular` then folds all
non-recursive rules into lexemes so the parser does not work per character.
"""

from __future__ import annotations

import re

from ..errors import GrammarError, position_to_line_col
from .ir import MAX_CODEPOINT, CharRanges, GrammarIR, Regex, Rule, normalize_ranges
from .simplify import collapse_regular, seq
from .split import CountedRules

__all__ = ["gbnf_to_ir", "MAX_REPETITION"]

#: Bound on ``{m,n}`` counts. Counts cost O(log n) rules (llama.cpp, which unrolls them,
#: stops at 2,000); this only keeps a typo from asking for a text no model will write.
MAX_REPETITION = 1_000_000

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
_DIGITS = frozenset("0123456789")
_RULE_HEAD = re.compile(r"[A-Za-z0-9_-]+[ \t]*::=")
_TOKEN_REF = re.compile(r"!?<[^>\s]*>?")
_SIMPLE_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_ANY = CharRanges(((0, MAX_CODEPOINT),))

Body = tuple[str, ...]


def gbnf_to_ir(text: str, start: str = "root", source: str = "<gbnf>", *,
               collapse: bool = True) -> GrammarIR:
    """Parse a GBNF grammar; ``collapse=False`` skips :func:`collapse_regular` (for tests)."""
    parser = _Parser(text, source)
    try:
        parser.parse()
    except RecursionError:
        raise parser.error("grouping is nested too deeply") from None
    ir = parser.to_ir(start)
    return collapse_regular(ir) if collapse else ir


class _Parser:
    """Recursive descent over the text; emits rules and lexemes while it parses."""

    def __init__(self, text: str, source: str):
        self.text = text
        self.source = source
        self.pos = 0
        self.rules: dict[str, list[Body]] = {}
        self.defined_at: dict[str, int] = {}
        self.refs: list[tuple[str, int]] = []
        self.lexemes: dict[str, Regex] = {}
        self._lexeme_by_key: dict[object, str] = {}
        self._helpers = 0

    # -- errors and low-level scanning -------------------------------------------------

    def error(self, message: str, pos: int | None = None) -> GrammarError:
        line, col = position_to_line_col(self.text, self.pos if pos is None else pos)
        return GrammarError(message, line, col, self.source)

    def peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.text[i] if i < len(self.text) else ""

    def _skip(self, newlines: bool) -> None:
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c == "#":
                while self.pos < n and text[self.pos] not in "\r\n":
                    self.pos += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            else:
                break

    def space(self, nested: bool) -> None:
        """Skip blanks; at top level a newline is a blank unless a new rule follows."""
        self._skip(nested)
        if not nested and self.peek() in ("\r", "\n"):
            save = self.pos
            self._skip(True)
            if self.pos >= len(self.text) or _RULE_HEAD.match(self.text, self.pos):
                self.pos = save

    # -- grammar structure -------------------------------------------------------------

    def parse(self) -> None:
        self._skip(True)
        while self.pos < len(self.text):
            self.parse_rule()

    def parse_rule(self) -> None:
        at = self.pos
        name = self.parse_name()
        self._skip(False)
        if not self.text.startswith("::=", self.pos):
            raise self.error("expecting '::=' after the rule name")
        if name in self.defined_at:
            line, _ = position_to_line_col(self.text, self.defined_at[name])
            raise self.error(f"rule {name!r} is defined twice (first on line {line})", at)
        self.defined_at[name] = at
        self.rules[name] = []  # reserve the position of the rule in the output order
        self.pos += 3
        self._skip(True)
        self.rules[name] = self.parse_alternates(name, nested=False)
        c = self.peek()
        if c == "\r":
            self.pos += 2 if self.peek(1) == "\n" else 1
        elif c == "\n":
            self.pos += 1
        elif c:
            raise self.unexpected()
        self._skip(True)

    def unexpected(self) -> GrammarError:
        c = self.peek()
        if c == "<" or (c == "!" and self.peek(1) == "<"):
            m = _TOKEN_REF.match(self.text, self.pos)
            token = m.group(0) if m else c
            return self.error(f"token reference {token!r} is not supported (llama.cpp token syntax)")
        if c == ")":
            return self.error("unmatched ')'")
        return self.error(f"unexpected {c!r}: expecting a newline or the end of the rule")

    def parse_name(self) -> str:
        start = self.pos
        while self.peek() in _NAME_CHARS:
            self.pos += 1
        if self.pos == start:
            c = self.peek()
            if c == "<":
                raise self.unexpected()
            raise self.error(f"expecting a rule name, found {c!r}" if c else "expecting a rule name")
        return self.text[start:self.pos]

    def parse_alternates(self, rule: str, nested: bool) -> list[Body]:
        alts = [self.parse_sequence(rule, nested)]
        while self.peek() == "|":
            self.pos += 1
            self._skip(True)
            alts.append(self.parse_sequence(rule, nested))
        return alts

    def parse_sequence(self, rule: str, nested: bool) -> Body:
        items: list[Body] = []  # each item is a run of symbols; postfix ops apply to the last
        while self.pos < len(self.text):
            c = self.peek()
            at = self.pos
            if c == '"':
                items.append(self.parse_literal())
            elif c == "[":
                items.append((self.parse_class(),))
            elif c in _NAME_CHARS:
                name = self.parse_name()
                self.refs.append((name, at))
                items.append((name,))
            elif c == "(":
                self.pos += 1
                self._skip(True)
                alts = self.parse_alternates(rule, nested=True)
                if self.peek() != ")":
                    found = "end of input" if not self.peek() else repr(self.peek())
                    raise self.error(f"expecting ')', found {found}")
                self.pos += 1
                items.append(alts[0] if len(alts) == 1 else (self.helper(rule, alts),))
            elif c == ".":
                self.pos += 1
                items.append((self.lexeme(".", ".", _ANY),))
            elif c == "<" or (c == "!" and self.peek(1) == "<"):
                raise self.unexpected()
            elif c in "*+?{":
                if not items:
                    raise self.error(f"expecting an item before {c!r}")
                lo, hi = self.parse_repetition()
                items[-1] = self.repeat(rule, items[-1], lo, hi)
            else:
                break
            self.space(nested)
        return tuple(s for item in items for s in item)

    def parse_repetition(self) -> tuple[int, int | None]:
        c = self.peek()
        self.pos += 1
        if c != "{":
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        self._skip(False)
        lo = self.parse_int() if self.peek() in _DIGITS else None
        self._skip(False)
        if self.peek() == "}":
            if lo is None:
                raise self.error("expecting a number in '{...}'")
            hi: int | None = lo
        elif self.peek() == ",":
            self.pos += 1
            self._skip(False)
            hi = self.parse_int() if self.peek() in _DIGITS else None
            self._skip(False)
            if self.peek() != "}":
                raise self.error("expecting '}'")
            lo = lo or 0
        else:
            raise self.error("expecting ',' or '}' in '{...}'")
        self.pos += 1
        if hi is not None and hi < lo:
            raise self.error(f"repetition {{{lo},{hi}}} has max < min")
        return lo, hi

    def parse_int(self) -> int:
        start = self.pos
        while self.peek() in _DIGITS:
            self.pos += 1
        value = int(self.text[start:self.pos])
        if value > MAX_REPETITION:
            raise self.error(f"repetition count {value} exceeds the limit of {MAX_REPETITION}", start)
        return value

    # -- characters --------------------------------------------------------------------

    def parse_char(self) -> int:
        c = self.peek()
        if not c:
            raise self.error("unexpected end of input")
        if c != "\\":
            self.pos += 1
            return ord(c)
        e = self.peek(1)
        if e in _SIMPLE_ESCAPES:
            self.pos += 2
            return ord(_SIMPLE_ESCAPES[e])
        if e in _HEX_ESCAPES:
            size = _HEX_ESCAPES[e]
            digits = self.text[self.pos + 2:self.pos + 2 + size]
            if len(digits) != size or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise self.error(f"expecting {size} hex digits after '\\{e}'")
            self.pos += 2 + size
            return int(digits, 16)
        if not e:
            raise self.error("unexpected end of input after '\\'")
        raise self.error(f"unknown escape '\\{e}'")

    def parse_literal(self) -> Body:
        start = self.pos
        self.pos += 1
        cps: list[int] = []
        while self.peek() != '"':
            if not self.peek():
                raise self.error("unterminated string literal", start)
            cps.append(self.parse_char())
        self.pos += 1
        if not cps:
            return ()
        rx = seq(_code_point(c) for c in cps)
        return (self.lexeme(("lit", tuple(cps)), self.text[start:self.pos], rx),)

    def parse_class(self) -> str:
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            if not self.peek():
                raise self.error("unterminated character class", start)
            lo = hi = self.parse_char()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                hi = self.parse_char()
            ranges.append((lo, min(hi, MAX_CODEPOINT)))
        self.pos += 1
        ranges = list(normalize_ranges(ranges))
        if negated:
            ranges = _complement(ranges)
        return self.lexeme(("cls", tuple(ranges)), self.text[start:self.pos], CharRanges(tuple(ranges)))

    # -- lowering ----------------------------------------------------------------------

    def lexeme(self, key: object, spelling: str, rx: Regex) -> str:
        """One lexeme per distinct literal / class, named by its first spelling."""
        name = self._lexeme_by_key.get(key)
        if name is None:
            name = spelling if spelling not in self.lexemes else f"{spelling}~{len(self.lexemes)}"
            self._lexeme_by_key[key] = name
            self.lexemes[name] = rx
        return name

    def helper(self, rule: str, alts: list[Body] | None = None) -> str:
        """A fresh rule ``rule/N`` (``/`` cannot occur in GBNF names, so no clash)."""
        self._helpers += 1
        name = f"{rule}/{self._helpers}"
        self.rules[name] = alts or []
        return name

    def repeat(self, rule: str, item: Body, lo: int, hi: int | None) -> Body:
        """``item{lo,hi}``: ``*``/``+`` as left recursion, counts in O(log n) rules."""
        if not item or hi == 0:
            return ()
        x = item[0] if len(item) == 1 else self.helper(rule, [item])
        if hi is None:
            star = self.helper(rule)
            self.rules[star] = [(), (star, x)]
            if lo == 0:
                return (star,)
            return (x,) * lo + (star,)
        return CountedRules(lambda alts: self.helper(rule, list(alts))).between(x, lo, hi)

    def to_ir(self, start: str) -> GrammarIR:
        for name, at in self.refs:
            if name not in self.rules:
                raise self.error(f"undefined rule {name!r}", at)
        if start not in self.rules:
            raise GrammarError(f"start rule {start!r} is not defined", 1, 1, self.source)
        rules = [Rule(lhs, body) for lhs, bodies in self.rules.items() for body in bodies]
        return GrammarIR(rules=rules, lexemes=dict(self.lexemes), start=start, source=self.source,
                         meta={"format": "gbnf"})


def _code_point(c: int) -> CharRanges:
    return CharRanges(((c, c),) if c <= MAX_CODEPOINT else ())


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, nxt = [], 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODEPOINT:
        out.append((nxt, MAX_CODEPOINT))
    return out
