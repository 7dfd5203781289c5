"""Exact digit-level constructions for JSON numbers under bounds and ``multipleOf``.

Bounds become regexes over canonical numerals (no leading zeros, no exponent, no ``-0``);
``multipleOf`` becomes a remainder automaton. Several constraints meet by automaton
intersection (:mod:`gramgen.grammar.cpdfa`), so any combination stays exact.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

# cpdfa by its own name: ``from .. import cpdfa`` would import the package gramgen.grammar
import gramgen.grammar.cpdfa as cpdfa

from ...errors import CompileLimitError
from ..ir import EMPTY, NOTHING, CharRanges, Regex, Repeat, literal
from ..simplify import alt, seq
from .strings import fixed_width_range

MAX_MODULUS = 100_000
"""Largest scaled ``multipleOf`` (e.g. 0.25 -> 25 with 2 decimals) we build an automaton for."""


def _digit(a: int, b: int) -> CharRanges:
    return CharRanges(((48 + a, 48 + b),))


DIGITS = Repeat(_digit(0, 9), 0, None)
DIGITS1 = Repeat(_digit(0, 9), 1, None)
FRACTION = seq([literal("."), DIGITS1])
EXPONENT = seq([CharRanges(((69, 69), (101, 101))), Repeat(CharRanges(((43, 43), (45, 45))), 0, 1), DIGITS1])
NATURAL = alt([literal("0"), seq([_digit(1, 9), DIGITS])])
INTEGER = seq([Repeat(literal("-"), 0, 1), NATURAL])
NUMBER = seq([INTEGER, Repeat(FRACTION, 0, 1), Repeat(EXPONENT, 0, 1)])
CANONICAL_DECIMAL = seq([Repeat(literal("-"), 0, 1), NATURAL, Repeat(FRACTION, 0, 1)])
NON_INTEGER = seq([Repeat(literal("-"), 0, 1), NATURAL, literal("."), DIGITS, _digit(1, 9), DIGITS])
NEGATIVE_ZERO = seq([literal("-0"), Repeat(seq([literal("."), Repeat(literal("0"), 1, None)]), 0, 1)])


def spellings(value) -> Regex:
    """Every canonical numeral (no exponent) of a JSON number: trailing zeros allowed."""
    d = as_decimal(value)
    text = format(d.normalize(), "f") if d else "0"
    if "." in text:
        return seq([literal(text), Repeat(literal("0"), 0, None)])
    return seq([literal(text), Repeat(seq([literal("."), Repeat(literal("0"), 1, None)]), 0, 1)])


def naturals(lo: int, hi: int | None) -> Regex:
    """Canonical numerals of the integers in [lo, hi] (lo >= 0; hi None = unbounded)."""
    lo = max(lo, 0)
    if hi is not None and hi < lo:
        return NOTHING
    parts = []
    width = 1
    while True:
        first = 0 if width == 1 else 10 ** (width - 1)
        last = 10 ** width - 1
        if hi is not None and first > hi:
            break
        if hi is None and first > lo:
            parts.append(seq([_digit(1, 9), Repeat(_digit(0, 9), width - 1, None)]))
            break
        a, b = max(lo, first), last if hi is None else min(hi, last)
        if a <= b:
            parts.append(fixed_width_range(a, b, width, 10, _digit))
        width += 1
    return alt(parts)


def integers(lo: int | None, hi: int | None) -> Regex:
    """Canonical integers in [lo, hi] (None = unbounded); ``-0`` is never produced."""
    parts = []
    if hi is None or hi >= 0:
        parts.append(naturals(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        top = None if lo is None else -lo
        bottom = 1 if hi is None or hi >= 0 else -hi
        if top is None or bottom <= top:
            parts.append(seq([literal("-"), naturals(bottom, top)]))
    return alt(parts)


# ------------------------------------------------------------------ decimal bounds


def as_decimal(value) -> Decimal:
    if isinstance(value, bool):
        raise TypeError("a boolean is not a number")
    try:
        return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except (InvalidOperation, ValueError) as exc:
        raise TypeError(f"not a number: {value!r}") from exc


def _split(magnitude: Decimal) -> tuple[int, str]:
    """A non-negative decimal as (integer part, fraction digits without trailing zeros)."""
    text = format(magnitude, "f")
    whole, _, frac = text.partition(".")
    return int(whole), frac.rstrip("0")


def _frac_cmp(op: str, f: str) -> Regex:
    """Optional fractions ``(\\.D)?`` whose value compares ``op`` with 0.f."""
    if not f:
        return {">=": Repeat(FRACTION, 0, 1), ">": seq([literal("."), DIGITS, _digit(1, 9), DIGITS]),
                "<=": Repeat(seq([literal("."), Repeat(literal("0"), 1, None)]), 0, 1), "<": NOTHING}[op]
    parts = []
    for i, ch in enumerate(f):
        d = int(ch)
        if op in (">", ">=") and d < 9:
            parts.append(seq([literal(f[:i]), _digit(d + 1, 9), DIGITS]))
        if op in ("<", "<=") and d > 0:
            parts.append(seq([literal(f[:i]), _digit(0, d - 1), DIGITS]))
    if op == ">=":
        parts.append(seq([literal(f), DIGITS]))
    elif op == ">":
        parts.append(seq([literal(f), DIGITS, _digit(1, 9), DIGITS]))
    else:
        parts.extend(literal(f[:j]) for j in range(1, len(f)))
        if op == "<=":
            parts.append(seq([literal(f), Repeat(literal("0"), 0, None)]))
    present = seq([literal("."), alt(parts)])
    return present if op in (">", ">=") else alt([EMPTY, present])


def _magnitudes(op: str, bound: Decimal) -> Regex:
    """Unsigned canonical decimals ``I(.F)?`` whose value compares ``op`` with ``bound >= 0``."""
    a, f = _split(bound)
    frac_any = Repeat(FRACTION, 0, 1)
    if op in (">", ">="):
        return alt([seq([naturals(a + 1, None), frac_any]), seq([naturals(a, a), _frac_cmp(op, f)])])
    return alt([seq([naturals(0, a - 1), frac_any]) if a > 0 else NOTHING,
                seq([naturals(a, a), _frac_cmp(op, f)])])


_FLIP = {">": "<", ">=": "<=", "<": ">", "<=": ">="}


def compare(op: str, bound: Decimal) -> Regex:
    """Canonical decimals (no exponent) x with ``x op bound``; never ``-0``."""
    nonneg_all = seq([NATURAL, Repeat(FRACTION, 0, 1)])
    if bound >= 0:
        if op in (">", ">="):
            return _magnitudes(op, bound)
        return alt([_magnitudes(op, bound), _negatives(None)])
    if op in (">", ">="):  # x >= -b: all non-negatives, negatives with |x| <= b
        return alt([nonneg_all, _negatives((_FLIP[op], -bound))])
    return _negatives((_FLIP[op], -bound))


def _negatives(cmp: tuple[str, Decimal] | None) -> Regex:
    """``-m`` for magnitudes m > 0 (and ``m cmp bound`` when given)."""
    positive = _magnitudes(">", Decimal(0))
    if cmp is None:
        return seq([literal("-"), positive])
    return seq([literal("-"), cpdfa.regex_and(positive, _magnitudes(*cmp))])


# ------------------------------------------------------------------ multipleOf


class _States:
    """A DFA built by exploring keyed states: :meth:`state` numbers a key on first sight
    and queues it (``todo``) for its edges to be filled in."""

    def __init__(self):
        self.index: dict[tuple, int] = {}
        self.edges: list[list[tuple[int, int, int]]] = []
        self.accepting: list[bool] = []
        self.todo: list[tuple] = []

    def state(self, key: tuple, accepts: bool = False) -> int:
        if key not in self.index:
            self.index[key] = len(self.accepting)
            self.edges.append([])
            self.accepting.append(accepts)
            self.todo.append(key)
        return self.index[key]

    def regex(self) -> Regex:
        for out in self.edges:
            out.sort()
        return cpdfa.as_regex(cpdfa.trim(cpdfa.CodepointDFA(self.edges, self.accepting)))


def multiple_of(step: Decimal, allow_fraction: bool) -> Regex:
    """Numerals (canonical integer part, any fraction digits) that are exact multiples of
    ``step > 0``: a remainder automaton over the digits of ``value * 10**scale``.

    An integer step ``c * 10**k`` (``c`` not a multiple of 10) costs ``c * (k + 1)``
    states, not ``c * 10**k``: n is a multiple of it iff n ends in k zeros and what comes
    before them is a multiple of ``c`` (``1e30`` is 31 states)."""
    step = step.normalize()
    _, _, exp = step.as_tuple()
    if int(exp) > 0:
        return _integer_step(step, int(exp), allow_fraction)
    scale = max(0, -int(exp))
    modulus = int(step.scaleb(scale))
    if modulus > MAX_MODULUS:
        raise CompileLimitError(f"multipleOf {step} needs {modulus} remainder states (limit {MAX_MODULUS})")
    states = _States()
    edges, accepting, todo, index, state = (states.edges, states.accepting, states.todo,
                                            states.index, states.state)

    def divisible(r: int, used: int) -> bool:
        return r * 10 ** (scale - used) % modulus == 0

    state(("start",))
    while todo:
        key = todo.pop()
        s = index[key]
        out = edges[s]
        kind = key[0]
        if kind in ("start", "minus"):
            neg = kind == "minus"
            if not neg:
                out.append((45, 45, state(("minus",))))
            out.append((48, 48, state(("zero", neg))))
            out.extend((48 + d, 48 + d, state(("int", d % modulus, neg))) for d in range(1, 10))
            continue
        if kind == "zero":  # a leading 0 ends the integer part ("-0" alone is not canonical)
            neg = key[1]
            accepting[s] = not neg
            r = 0
        elif kind == "int":
            _, r, neg = key
            accepting[s] = divisible(r, 0)
            out.extend((48 + d, 48 + d, state(("int", (10 * r + d) % modulus, neg))) for d in range(10))
        elif kind == "dot":
            _, r, neg = key
            if scale:
                out.extend((48 + d, 48 + d, state(("frac", (10 * r + d) % modulus, 1, neg)))
                           for d in range(10))
            else:  # an integer step: the fraction can only be zeros
                out.append((48, 48, state(("frac", r, 0, neg))))
            continue
        else:  # frac
            _, r, used, neg = key
            accepting[s] = divisible(r, min(used, scale))
            if used < scale:
                out.extend((48 + d, 48 + d, state(("frac", (10 * r + d) % modulus, used + 1, neg)))
                           for d in range(10))
            else:  # digits past the step's precision change nothing only when they are 0
                out.append((48, 48, state(("frac", r, used, neg))))
            continue
        if allow_fraction:
            out.append((46, 46, state(("dot", r, neg))))
    return states.regex()


def _integer_step(step: Decimal, zeros: int, allow_fraction: bool) -> Regex:
    """Multiples of ``c * 10**zeros`` (``c`` the step's digits; ``zeros`` > 0). States of
    the integer part: ``("run", p, z)``, z < ``zeros`` zeros after digits whose value is p
    mod c; ``("tail", q)``, at least ``zeros`` zeros, q the value mod c of the digits
    before the last ``zeros`` of them. A fraction can only be zeros."""
    c = int(step.scaleb(-zeros))
    if c * (zeros + 1) > MAX_MODULUS:
        raise CompileLimitError(f"multipleOf {step} needs {c * (zeros + 1)} states (limit {MAX_MODULUS})")
    states = _States()
    edges, accepting, todo, index, state = (states.edges, states.accepting, states.todo,
                                            states.index, states.state)

    def run(p: int, z: int, neg: bool) -> int:
        return state(("tail", p % c, neg), p % c == 0) if z == zeros else state(("run", p % c, z, neg))

    state(("start",))
    while todo:
        key = todo.pop()
        s = index[key]
        out = edges[s]
        kind, neg = key[0], key[-1]
        if kind == "start":
            out.append((45, 45, state(("minus", True))))
            neg = False
        if kind in ("start", "minus"):
            out.append((48, 48, state(("zero", neg), not neg)))   # "-0" is not canonical
            out.extend((48 + d, 48 + d, run(d, 0, neg)) for d in range(1, 10))
            continue
        if kind in ("dot", "frac"):
            out.append((48, 48, state(("frac", key[1], neg), key[1])))
            continue
        if kind == "run":
            _, p, z, _ = key
            out.append((48, 48, run(p, z + 1, neg)))
            out.extend((48 + d, 48 + d, run(p * 10 ** (z + 1) + d, 0, neg)) for d in range(1, 10))
        elif kind == "tail":
            q = key[1]
            out.append((48, 48, run(10 * q, zeros, neg)))
            out.extend((48 + d, 48 + d, run(q * 10 ** (zeros + 1) + d, 0, neg)) for d in range(1, 10))
        if allow_fraction:   # "zero" too: 0.000 is 0
            out.append((46, 46, state(("dot", accepting[s], neg))))
    return states.regex()


def number_regex(integer: bool, minimum=None, maximum=None, exclusive_minimum=None,
                 exclusive_maximum=None, multiple=None) -> Regex:
    """Numerals of an ``integer`` / ``number`` under bounds (Decimals or None) and
    ``multipleOf``. Constrained numbers are written without exponent (documented)."""
    bounds = [(op, b) for op, b in ((">=", minimum), ("<=", maximum), (">", exclusive_minimum),
                                     ("<", exclusive_maximum)) if b is not None]
    if multiple is None and not bounds:
        return INTEGER if integer else NUMBER
    if integer and multiple is None:
        lo, hi = None, None
        for op, b in bounds:
            if op == ">=":
                v = int(b.to_integral_value(rounding="ROUND_CEILING"))
                lo = v if lo is None else max(lo, v)
            elif op == ">":
                v = int(b.to_integral_value(rounding="ROUND_FLOOR")) + 1
                lo = v if lo is None else max(lo, v)
            elif op == "<=":
                v = int(b.to_integral_value(rounding="ROUND_FLOOR"))
                hi = v if hi is None else min(hi, v)
            else:
                v = int(b.to_integral_value(rounding="ROUND_CEILING")) - 1
                hi = v if hi is None else min(hi, v)
        return integers(lo, hi)
    parts = [INTEGER if integer else CANONICAL_DECIMAL]
    parts.extend(compare(op, b) for op, b in bounds)
    if multiple is not None:
        parts.append(multiple_of(multiple, not integer))
    result = parts[0]
    for p in parts[1:]:
        result = cpdfa.regex_and(result, p)
    return result
