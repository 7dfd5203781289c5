"""gramgen.Infiller against brute force, on small grammars.

The oracle (``infill_oracle.py``) knows nothing of gramgen: lark's Earley parser decides
words, and a depth-first enumeration of every filling (strings over a small alphabet for
byte holes, sequences of a toy vocabulary's tokens for token holes) decides templates.
Bounded byte holes (``max_bytes <= 4``) and token holes (``<= 3`` tokens) are decided
exactly by both, so the answers must be equal both ways; an unbounded hole is enumerated
up to a few bytes only, so there a "yes" of the oracle must be a yes of gramgen, and every
yes of gramgen must come with a witness that lark parses (which makes the test two-sided
with no length bound). The case counts are in each test's docstring; the whole file takes
about half a minute on two cores (``GRAMGEN_TEST_SCALE`` multiplies the counts).
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from dataclasses import dataclass
from pathlib import Path

import lark
import numpy as np
import pytest
from conftest import SCALE
from infill_oracle import Oracle, splits_into
from synthetic import small_vocab

import gramgen
from gramgen import Hole
from gramgen.testing import accepts

DATA = Path(__file__).resolve().parent / "data"

PARENS = r'''
start: s
s: | "(" s ")" s | "a" s
'''
PARENS_FOR_ORACLE = r'''
start: s
s: ("(" s ")" | "a")*
'''

ARITH = r'''
start: e
e: e "+" t | t
t: t "*" f | f
f: "(" e ")" | N
N: /[0-9]+/
'''

JSON = r'''
start: value
?value: object | array | STRING | INT
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
array: "[" [value ("," value)*] "]"
STRING: /"[ab]*"/
INT: /-?(0|[1-9][0-9]*)/
'''

JSON_WS = JSON + '%ignore " "\n'

#: name -> (grammar, alphabet, toy vocabulary). The alphabet holds one character of every
#: class the grammar treats alike (one digit where any digit does), so enumerating over it
#: decides the same question as enumerating over all bytes.
GRAMMARS = {
    "parens": (PARENS, "()a", ["(", ")", "a", "((", "))", "()", "a(", ")a", "(a", "a)"]),
    "arith": (ARITH, "1+*()", ["1", "2", "+", "*", "(", ")", "12", "1+", "*(", ")*"]),
    "json": (JSON, '{}[],:"ab01-', ["{", "}", "[", "]", ",", ":", '"', '"a', 'b"', "1", "0", "-1"]),
    "json_ws": (JSON_WS, '{}[],:"ab01- ', ["{", "}", "[", "]", ",", ":", '"', '"a', 'b"', "1", "0", " ", ' "']),
}
NAMES = list(GRAMMARS)

C_LIKE = (DATA / "clike" / "c_like.lark").read_text()
C_ALPHABET = "abcdefhilnorstuwxyz_0129 \n=+-*/<>!(){};,"
C_PIECES = ["int", " ", "x", "=", "1", ";", "(", ")", "{", "}", "return", "+", " x", "\n", "if", "//"]

UNBOUNDED = ("any", "min")
BOUNDED = ("bytes", "tokens", "max_tokens")


@dataclass
class Setup:
    name: str
    oracle: Oracle
    pieces: list[str]
    vocab: gramgen.Vocabulary
    cg: gramgen.CompiledGrammar
    infiller: gramgen.Infiller

    def word(self, rng: random.Random) -> str:
        """A random word (for the C-like grammar: a longer one, with more white space)."""
        if self.name == "c_like":
            return self.oracle.random_word(rng, ignore_rate=0.6, min_len=12)
        return self.oracle.random_word(rng)

    @property
    def piece_bytes(self) -> list[bytes]:
        return [p.encode() for p in self.pieces]

    @property
    def cap(self) -> int:
        """How many bytes the enumeration puts in an unbounded hole (fewer for a larger
        alphabet, to bound its time)."""
        return 4 if len(self.oracle.alphabet) <= 5 else 3


@functools.cache
def setup(name: str) -> Setup:
    if name == "c_like":
        text, alphabet, pieces = C_LIKE, C_ALPHABET, C_PIECES
    else:
        text, alphabet, pieces = GRAMMARS[name]
    vocab = small_vocab(pieces)
    cg = gramgen.compile(gramgen.Grammar.from_lark(text), vocab)
    oracle = Oracle(text, alphabet, recognise=PARENS_FOR_ORACLE if name == "parens" else None)
    return Setup(name, oracle, pieces, vocab, cg, gramgen.Infiller(cg))


def n_cases(n: int) -> int:
    return max(1, int(n * SCALE))


# -- templates -------------------------------------------------------------------------------

def make_hole(rng: random.Random, kind: str) -> Hole:
    if kind == "any":
        return Hole()
    if kind == "min":
        return Hole(min_bytes=rng.randint(1, 3))
    if kind == "bytes":
        lo = rng.randint(0, 2)
        return Hole(min_bytes=lo, max_bytes=rng.randint(max(lo, 1), 4))
    if kind == "tokens":
        return Hole(tokens=rng.randint(1, 3))
    return Hole(max_tokens=rng.randint(1, 3))


def random_segment(rng: random.Random, s: Setup, from_word: float = 0.5) -> str:
    """A substring of a valid word (often cut inside a lexeme) at rate ``from_word``,
    else random text over the alphabet."""
    if rng.random() < from_word:
        word = s.word(rng)
        i = rng.randint(0, len(word))
        return word[i:i + rng.randint(0, 6)]
    return "".join(rng.choice(s.oracle.alphabet) for _ in range(rng.randint(0, 4)))


def random_template(rng: random.Random, s: Setup, kinds: list[str]) -> list:
    """Segments and holes: ``kinds`` gives each hole's kind. A quarter of the templates
    are a valid word with pieces cut out (likely feasible); in the rest each segment is a
    substring of a word at rate 1/3, else random: half the segments come from words."""
    holes = [make_hole(rng, k) for k in kinds]
    if rng.random() < 1 / 4:
        word = s.word(rng)
        cuts = sorted(rng.randint(0, len(word)) for _ in range(2 * len(holes)))
        texts = [word[a:b] for a, b in zip([0] + cuts[1::2], cuts[0::2] + [len(word)])]
    else:
        texts = [random_segment(rng, s, from_word=1 / 3) for _ in range(len(holes) + 1)]
    segments: list = []
    for i, text in enumerate(texts):
        if text:
            segments.append(text.encode())
        if i < len(holes):
            segments.append(holes[i])
    return segments


def hole_kinds(rng: random.Random, pool, must=None) -> list[str]:
    kinds = [rng.choice(pool) for _ in range(rng.randint(1, 3))]
    if must is not None:
        kinds[rng.randrange(len(kinds))] = rng.choice(must)
    return kinds


def describe(s: Setup, segments, expected, got) -> str:
    return f"grammar {s.name}, segments {segments!r}: expected {expected}, got {got}"


def assert_witness(s: Setup, segments, result) -> None:
    """The witness fills the holes of ``segments``, each within its bounds, and lark
    parses it."""
    assert result.witness is not None and result.fillings is not None, describe(s, segments, "a witness", result)
    holes = [seg for seg in segments if isinstance(seg, Hole)]
    assert len(result.fillings) == len(holes), describe(s, segments, f"{len(holes)} fillings", result.fillings)
    fills = iter(result.fillings)
    rebuilt = b"".join(next(fills) if isinstance(seg, Hole) else seg for seg in segments)
    assert result.witness == rebuilt, describe(s, segments, f"witness {rebuilt!r}", result.witness)
    for hole, fill in zip(holes, result.fillings):
        if hole.tokens is not None:
            ok = splits_into(fill, s.piece_bytes, hole.tokens, hole.tokens)
        elif hole.max_tokens is not None:
            ok = splits_into(fill, s.piece_bytes, 0, hole.max_tokens)
        else:
            ok = hole.min_bytes <= len(fill) and (hole.max_bytes is None or len(fill) <= hole.max_bytes)
        assert ok, describe(s, segments, f"a filling of {hole!r}", fill)
    assert s.oracle.lark_accepts(result.witness), describe(s, segments, "a witness lark parses", result.witness)


# -- the oracle itself --------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_oracle_agrees_with_lark(name):
    """The oracle's recogniser (on its own form of the grammar) and lark (on the grammar
    gramgen reads) agree on every string over the alphabet up to ~1,000 strings, on 150
    random words, 450 near misses of them and 200 random strings; the oracle's
    enumeration equals trying every filling with lark on 10 templates (at most 600
    fillings each)."""
    s = setup(name)
    rng = random.Random(f"oracle-{name}")
    alphabet = s.oracle.alphabet
    texts, length = [], 0
    while len(alphabet) ** length <= 1000:
        texts += ["".join(t) for t in itertools.product(alphabet, repeat=length)]
        length += 1
    words = [s.word(rng) for _ in range(n_cases(150))]
    texts += words
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(n_cases(200))]
    for word in words:  # near misses: one character inserted, deleted or replaced
        i = rng.randint(0, len(word))
        texts += [word[:i] + rng.choice(alphabet) + word[i:], word[:i] + word[i + 1:],
                  word[:i] + rng.choice(alphabet) + word[i + 1:]]
    for text in texts:
        assert s.oracle.accepts(text) == s.oracle.lark_accepts(text), (name, text)
    shapes = [Hole(max_bytes=1), Hole(max_bytes=2), Hole(min_bytes=1, max_bytes=2), Hole(tokens=1),
              Hole(tokens=2), Hole(max_tokens=2)]
    sizes = {h: len(s.oracle.brute_fillings(h, s.pieces)) for h in shapes}
    tried = 0
    while tried < n_cases(10):
        holes = [rng.choice(shapes) for _ in range(rng.randint(1, 2))]
        if math.prod(sizes[h] for h in holes) > 600:
            continue
        tried += 1
        segments = [random_segment(rng, s).encode()]
        for h in holes:
            segments += [h, random_segment(rng, s).encode()]
        found = s.oracle.search(segments, s.pieces)
        assert found.feasible == s.oracle.brute_force(segments, s.pieces), (name, segments)
        if found.feasible:
            fills = iter(found.fillings)
            word = "".join(next(fills) if isinstance(x, Hole) else x.decode() for x in segments)
            assert s.oracle.lark_accepts(word), (name, segments, found.fillings)


# -- decisions against enumeration ------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_bounded_holes_agree_with_enumeration_exactly(name):
    """200 templates per grammar with 1-3 holes, each a bounded byte hole (max_bytes <= 4),
    a token hole (tokens <= 3) or a max_tokens hole (<= 3): the decision equals the
    enumeration's in both directions; every yes has a valid witness; feasible() agrees."""
    s = setup(name)
    rng = random.Random(f"bounded-{name}")
    counts = {True: 0, False: 0}
    for _ in range(n_cases(200)):
        segments = random_template(rng, s, hole_kinds(rng, BOUNDED))
        expected = s.oracle.search(segments, s.pieces)
        assert expected.exact
        result = s.infiller.check(segments)
        assert not result.exhausted, describe(s, segments, "a decision", "budget exhausted")
        assert result.feasible == expected.feasible, describe(
            s, segments, f"feasible={expected.feasible} (e.g. {expected.fillings})", f"feasible={result.feasible}")
        assert s.infiller.feasible(segments) == result.feasible, describe(s, segments, "feasible() == check()", "not")
        if result.feasible:
            assert_witness(s, segments, result)
        else:
            assert result.witness is None and result.fillings is None
        counts[expected.feasible] += 1
    assert min(counts.values()) >= n_cases(200) // 10, counts  # both answers are exercised


@pytest.mark.parametrize("name", NAMES)
def test_witness_is_shortest(name):
    """The witness is a shortest completion: on 40 feasible templates with one or two
    bounded byte holes (at most 3,000 fillings in all), its fillings are exactly as long,
    together, as the shortest accepted filling that enumeration finds."""
    s = setup(name)
    rng = random.Random(f"shortest-{name}")
    tested = tried = 0
    while tested < n_cases(40):
        tried += 1
        assert tried < 5000, f"only {tested} feasible templates found"
        segments = random_template(rng, s, ["bytes"] * rng.randint(1, 2))
        holes = [x for x in segments if isinstance(x, Hole)]
        choices = [s.oracle.brute_fillings(h) if isinstance(h, Hole) else [h.decode()] for h in segments]
        if math.prod(len(c) for c in choices) > 3000:
            continue
        lengths = [sum(len(c[i]) for i, x in enumerate(segments) if isinstance(x, Hole))
                   for c in itertools.product(*choices) if s.oracle.accepts("".join(c))]
        result = s.infiller.check(segments)
        assert result.feasible == bool(lengths), describe(s, segments, bool(lengths), result.feasible)
        if not lengths:
            continue
        tested += 1
        assert_witness(s, segments, result)
        got = sum(len(f) for f in result.fillings)
        assert got == min(lengths), describe(s, segments, f"fillings of {min(lengths)} bytes in all",
                                             f"{result.fillings} ({len(holes)} holes)")


@pytest.mark.parametrize("name", NAMES)
def test_unbounded_holes(name):
    """200 templates per grammar with 1-3 holes, at least one unbounded (Hole() or
    Hole(min_bytes=k)), the others of any kind: when filling the unbounded holes with at
    most 3 bytes (4 for the 3- and 5-letter alphabets) makes a word, check() says
    feasible; every yes has a witness that lark parses, made of the segments in order and
    fillings within their bounds."""
    s = setup(name)
    rng = random.Random(f"unbounded-{name}")
    yes = 0
    for _ in range(n_cases(200)):
        segments = random_template(rng, s, hole_kinds(rng, UNBOUNDED + BOUNDED, must=UNBOUNDED))
        expected = s.oracle.search(segments, s.pieces, cap=s.cap)
        result = s.infiller.check(segments)
        assert not result.exhausted, describe(s, segments, "a decision", "budget exhausted")
        if expected.feasible:
            assert result.feasible, describe(s, segments, f"feasible (e.g. {expected.fillings})", "infeasible")
        assert s.infiller.feasible(segments) == result.feasible
        if result.feasible:
            assert_witness(s, segments, result)
            yes += 1
    assert yes >= n_cases(200) // 10


@pytest.mark.parametrize("name", NAMES + ["c_like"])
def test_cut_words_are_feasible(name):
    """40 valid words per grammar with 1-3 pieces cut out and replaced by holes that can
    hold them (any, at least k bytes, k..m bytes, exactly n toy tokens; the piece is a
    filling): always feasible, with a valid witness."""
    s = setup(name)
    rng = random.Random(f"cut-{name}")
    for _ in range(n_cases(40)):
        word = s.word(rng).encode()
        cuts = sorted(rng.randint(0, len(word)) for _ in range(2 * rng.randint(1, 3)))
        segments: list = [word[:cuts[0]]]
        for k in range(0, len(cuts), 2):
            piece = word[cuts[k]:cuts[k + 1]]
            follow = word[cuts[k + 1]:cuts[k + 2] if k + 2 < len(cuts) else len(word)]
            kind = rng.choice(["any", "min", "bytes", "tokens"] if len(piece) <= 8 else ["any", "min"])
            n_tokens = [n for n in range(1, 4) if splits_into(piece, s.piece_bytes, n, n)]
            if kind == "tokens" and n_tokens:
                segments.append(Hole(tokens=rng.choice(n_tokens)))
            elif kind in ("any", "tokens"):
                segments.append(Hole())
            elif kind == "min":
                segments.append(Hole(min_bytes=rng.randint(0, min(len(piece), 8))))
            else:
                segments.append(Hole(min_bytes=rng.randint(0, len(piece)),
                                     max_bytes=len(piece) + rng.randint(0, 2)))
            segments.append(follow)
        result = s.infiller.check(segments)
        assert not result.exhausted, describe(s, segments, "a decision", result)
        assert result.feasible, describe(s, segments, "feasible (the cut word fills it)", result)
        assert_witness(s, segments, result)


# -- monotonicity and reuse ------------------------------------------------------------------

def refine(rng: random.Random, s: Setup, segments: list) -> list | None:
    """``segments`` with part of one hole replaced by known bytes (or by tokens, in a
    token hole): every text it stands for is one ``segments`` stands for. None if the
    chosen hole cannot take the change."""
    slots = [i for i, seg in enumerate(segments) if isinstance(seg, Hole)]
    if not slots:
        return None
    i = rng.choice(slots)
    hole, head, tail = segments[i], segments[:i], segments[i + 1:]
    if hole.tokens is not None or hole.max_tokens is not None:
        n = hole.tokens if hole.tokens is not None else hole.max_tokens
        if n == 0:
            return head + tail
        at = rng.randrange(n)
        piece = rng.choice(s.piece_bytes)
        after = Hole(tokens=n - at - 1) if hole.tokens is not None else Hole(max_tokens=n - at - 1)
        return head + [Hole(tokens=at), piece, after] + tail
    text = "".join(rng.choice(s.oracle.alphabet) for _ in range(rng.randint(1, 2))).encode()
    n = len(text)
    if hole.max_bytes is not None and n > hole.max_bytes:
        return head + [b""] + tail if hole.min_bytes == 0 else None
    lo, hi = max(0, hole.min_bytes - n), None if hole.max_bytes is None else hole.max_bytes - n
    where = rng.choice(["start", "end", "middle", "all"])
    if where == "all":  # the hole is filled completely
        return head + [text] + tail if hole.min_bytes <= n else None
    if where == "middle":
        if lo:
            return None
        if hi is None:
            return head + [Hole(), text, Hole()] + tail
        a = rng.randint(0, hi)
        return head + [Hole(max_bytes=a), text, Hole(max_bytes=hi - a)] + tail
    rest = Hole(min_bytes=lo, max_bytes=hi)
    return head + ([text, rest] if where == "start" else [rest, text]) + tail


@pytest.mark.parametrize("name", NAMES)
def test_monotone_under_filling(name):
    """40 random fill sequences per grammar (up to 8 steps each, holes of every kind):
    once infeasible, filling more never makes it feasible; a fresh Infiller (nothing to
    reuse) answers as the shared one does; bounded states agree with the enumeration."""
    s = setup(name)
    rng = random.Random(f"monotone-{name}")
    became_infeasible = 0
    for _ in range(n_cases(40)):
        segments = random_template(rng, s, hole_kinds(rng, UNBOUNDED + BOUNDED))
        history = []
        for _step in range(8):
            feasible = s.infiller.check(segments).feasible
            fresh = gramgen.Infiller(s.cg).feasible(segments)
            assert fresh == feasible, describe(s, segments, f"a fresh Infiller's answer {fresh}", feasible)
            expected = s.oracle.search(segments, s.pieces, cap=2)
            if expected.exact:
                assert feasible == expected.feasible, describe(s, segments, expected.feasible, feasible)
            elif expected.feasible:
                assert feasible, describe(s, segments, "feasible", feasible)
            if history and not history[-1][1]:
                assert not feasible, f"grammar {name}: {history[-1][0]!r} is infeasible but its refinement " \
                                     f"{segments!r} is feasible"
            if history and history[-1][1] and not feasible:
                became_infeasible += 1
            history.append((segments, feasible))
            nxt = None
            for _try in range(5):
                nxt = refine(rng, s, segments)
                if nxt is not None:
                    break
            if nxt is None:
                break
            segments = nxt
    assert became_infeasible >= 5


# -- one token at one slot ------------------------------------------------------------------

def placed(s: Setup, segments: list, slot: int, token: int, at: int) -> list | None:
    """What putting ``token`` at ``at`` in hole ``segments[slot]`` means, written here from
    the interface (None: not allowed whatever the rest is)."""
    hole, head, tail = segments[slot], segments[:slot], segments[slot + 1:]
    last = slot == len(segments) - 1
    if token in s.vocab.eos_token_ids:  # the text ends here: allowed in a last hole
        if not last or hole.tokens is not None:
            return None
        if hole.max_tokens is not None:
            return head + [Hole(tokens=at)]
        if at == 0:
            return head if hole.min_bytes == 0 else None
        return segments
    if token in s.vocab.special_ids:
        return None
    data = s.vocab.token_bytes(token)
    if hole.tokens is not None:
        return head + [Hole(tokens=at), data, Hole(tokens=hole.tokens - at - 1)] + tail
    if hole.max_tokens is not None:
        return head + [Hole(tokens=at), data, Hole(max_tokens=hole.max_tokens - at - 1)] + tail
    if hole.max_bytes is not None and len(data) > hole.max_bytes:
        return None
    rest = Hole(min_bytes=max(0, hole.min_bytes - len(data)),
                max_bytes=None if hole.max_bytes is None else hole.max_bytes - len(data))
    return head + ([data, rest] if at == 0 else [rest, data]) + tail


@pytest.mark.parametrize("name", NAMES)
def test_allows_and_mask(name):
    """10 random templates per grammar (holes of every kind) and 4 made of one hole; at
    each hole (token holes at their first, last and a random slot, byte holes at 0 and -1)
    and for every token of the toy vocabulary, EOS and the special id included:
    mask() == allows() == check(place());
    allows() equals the enumeration of the placed template when all its holes are bounded
    (the interface's meaning of placing, written here: ``placed``)."""
    s = setup(name)
    rng = random.Random(f"allows-{name}")
    allowed = 0
    alone = [[Hole()], [Hole(min_bytes=2, max_bytes=2)], [Hole(tokens=2)], [Hole(max_tokens=2)]]
    for segments in alone + [random_template(rng, s, hole_kinds(rng, UNBOUNDED + BOUNDED))
                             for _ in range(n_cases(10))]:
        for slot, hole in enumerate(segments):
            if not isinstance(hole, Hole):
                continue
            n = hole.tokens if hole.tokens is not None else hole.max_tokens
            ats = sorted({0, n - 1, rng.randrange(n)}) if n is not None else [0, -1]
            for at in ats:
                mask = s.infiller.mask(segments, slot, at)
                assert mask.dtype == np.bool_ and mask.shape == (s.vocab.size,)
                for token in range(s.vocab.size):
                    got = s.infiller.allows(segments, slot, token, at)
                    where = f"token {token} ({s.vocab.token_bytes(token)!r}) at {at} in slot {slot}"
                    assert bool(mask[token]) == got, describe(s, segments, f"mask == allows for {where}", mask[token])
                    mine = placed(s, segments, slot, token, at)
                    if mine is None:
                        assert not got, describe(s, segments, f"{where} refused", got)
                        continue
                    theirs = s.infiller.place(segments, slot, token, at)
                    assert s.infiller.check(theirs).feasible == got, describe(
                        s, segments, f"allows == check(place()) for {where}", got)
                    if all(x.max_bytes is not None or x.counts_tokens for x in mine if isinstance(x, Hole)):
                        expected = s.oracle.search(mine, s.pieces).feasible
                        assert got == expected, describe(s, segments, f"{where}: {expected}", got)
                    allowed += got
    assert allowed > 0


# -- the work budget -------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES + ["c_like"])
def test_budget_fails_safe(name):
    """10 feasible templates per grammar under budgets 1, 4, 16, ...: an exhausted check
    answers no (never a false yes) with no witness, one that finishes answers as the
    default budget does; budget 1 is always exhausted."""
    s = setup(name)
    rng = random.Random(f"budget-{name}")
    done = 0
    while done < n_cases(10):
        segments = random_template(rng, s, hole_kinds(rng, UNBOUNDED + BOUNDED))
        if not s.infiller.check(segments).feasible:
            continue
        done += 1
        budget = 1
        while True:
            result = gramgen.Infiller(s.cg, budget=budget).check(segments)
            if budget == 1:
                assert result.exhausted, describe(s, segments, "budget 1 exhausted", result)
            if result.exhausted:
                assert not result.feasible and result.witness is None, describe(
                    s, segments, f"no when exhausted (budget {budget})", result)
            else:
                assert result.feasible, describe(s, segments, f"feasible with budget {budget}", result)
                break
            budget *= 4


# -- UTF-8 split across holes -----------------------------------------------------------------

UJSON = r'''
start: value
?value: array | STRING
array: "[" [value ("," value)*] "]"
STRING: /"[^"\\]*"/
'''
#: one byte of each class that matters: ASCII in a string, the structure, a lead byte of a
#: 2-, 3- and 4-byte character, a continuation byte valid after each of them
U_BYTES = [b"a", b'"', b"[", b"]", b",", b"\xc3", b"\xe2", b"\xf0", b"\xa9"]
U_PIECES = [b"a", b'"', b"[", b"]", b"\xc3", b"\xa9", b"\xa9\xa9", b'\xa9"', b"\xe2\xa9"]
U_WORDS = ['["é"]', '["aé","€"]', '"\U00029a69a"', '[["€é"],"a"]', '"é€\U00029a69"']


def brute_force_bytes(oracle: Oracle, segments, units: list[bytes], pieces: list[bytes], cap: int) -> bool:
    """Every filling over ``units`` (byte holes, unbounded ones up to ``cap``) or
    ``pieces`` (token holes), each text decided by lark (not UTF-8: not a word)."""
    choices = []
    for seg in segments:
        if not isinstance(seg, Hole):
            choices.append([seg])
            continue
        if seg.tokens is not None:
            lo, hi, alphabet = seg.tokens, seg.tokens, pieces
        elif seg.max_tokens is not None:
            lo, hi, alphabet = 0, seg.max_tokens, pieces
        else:
            lo, hi, alphabet = seg.min_bytes, seg.max_bytes, units
            hi = max(lo, cap) if hi is None else hi
        choices.append(sorted({b"".join(t) for n in range(lo, hi + 1) for t in itertools.product(alphabet, repeat=n)}))
    return any(oracle.lark_accepts(b"".join(c)) for c in itertools.product(*choices))


def test_utf8_split_across_holes():
    """Mini-JSON with any characters in strings; 40 templates cut from words with 2-, 3-
    and 4-byte characters at random byte offsets (segments ending or starting inside a
    character), one or two holes of at most 2 bytes or 2 tokens, the first may be unbounded:
    bounded decisions equal byte-level enumeration (with lark on the decoded text), and
    every witness is valid UTF-8 that lark parses. Plus fixed cases around "é"."""
    pieces = U_PIECES
    vocab = gramgen.Vocabulary(pieces + [b"", b""], eos_token_ids=[len(pieces) + 1], special_ids=[len(pieces)])
    cg = gramgen.compile(gramgen.Grammar.from_lark(UJSON), vocab)
    inf = gramgen.Infiller(cg)
    oracle = Oracle(UJSON, "a")

    def witness_ok(segments, result):
        assert result.witness is not None
        fills = iter(result.fillings)
        assert result.witness == b"".join(next(fills) if isinstance(x, Hole) else x for x in segments)
        assert oracle.lark_accepts(result.witness), (segments, result.witness)
        for hole, fill in zip([x for x in segments if isinstance(x, Hole)], result.fillings):
            if hole.tokens is not None:
                assert splits_into(fill, pieces, hole.tokens, hole.tokens), (segments, fill)
            elif hole.max_tokens is not None:
                assert splits_into(fill, pieces, 0, hole.max_tokens), (segments, fill)
            else:
                assert hole.min_bytes <= len(fill) and (hole.max_bytes is None or len(fill) <= hole.max_bytes)

    e = "é".encode()  # c3 a9
    fixed = [
        ([b'["' + e[:1], Hole(max_bytes=1), b'"]'], True),
        ([b'["' + e[:1], Hole(max_bytes=0), b'"]'], False),
        ([b'["' + e[:1], Hole(min_bytes=2, max_bytes=2), b'"]'], True),  # a9 a
        ([b'["' + e[:1], Hole(min_bytes=1, max_bytes=1), b'a"]'], True),
        ([b'["' + e[:1], Hole(min_bytes=1, max_bytes=1), b'\xa9"]'], False),  # c3 has one continuation
        ([b'["', Hole(max_bytes=1), e[1:] + b'"]'], True),
        ([b'"\xe2', Hole(max_bytes=1), b'"'], False),  # a 3-byte lead needs two more
        ([b'"\xe2', Hole(max_bytes=2), b'"'], True),
        ([b'"\xf0', Hole(tokens=1), b'"'], False),  # no single token is three continuation bytes
        ([b'"\xf0', Hole(tokens=2), b'"'], True),   # a9 + a9a9
        ([b'"', Hole(), b"\xa9\xa9\xa9" + b'"'], True),
        ([b'"' + e[:1], Hole(), e + b'"'], True),
        ([b'"' + e[:1], Hole(), e[:1] + b'"'], False),  # the last c3 has no continuation
        ([b'"a\xa9', Hole(), b'"'], False),  # a stray continuation byte
    ]
    for segments, expected in fixed:
        result = inf.check(segments)
        assert result.feasible == expected, (segments, expected, result)
        assert brute_force_bytes(oracle, segments, U_BYTES, pieces, cap=3) == expected, segments
        if result.feasible:
            witness_ok(segments, result)

    rng = random.Random("utf8")
    for _ in range(n_cases(40)):
        word = rng.choice(U_WORDS).encode()
        n_holes = rng.randint(1, 2)
        cuts = sorted(rng.randint(0, len(word)) for _ in range(2 * n_holes))
        texts = [word[a:b] for a, b in zip([0] + cuts[1::2], cuts[0::2] + [len(word)])]
        segments: list = []
        for i, text in enumerate(texts):
            if rng.random() < 0.3:  # a random byte or two in place of the text
                text = b"".join(rng.choice(U_BYTES) for _ in range(rng.randint(0, 2)))
            if text:
                segments.append(text)
            if i < n_holes:
                kind = rng.choice(["bytes", "tokens", "max_tokens"] + (["any"] if i == 0 else []))
                segments.append(Hole(max_bytes=rng.randint(0, 2)) if kind == "bytes" else
                                Hole(tokens=rng.randint(1, 2)) if kind == "tokens" else
                                Hole(max_tokens=2) if kind == "max_tokens" else Hole())
        result = inf.check(segments)
        expected = brute_force_bytes(oracle, segments, U_BYTES, pieces, cap=2)
        if all(x.max_bytes is not None or x.counts_tokens for x in segments if isinstance(x, Hole)):
            assert result.feasible == expected, (segments, expected, result.feasible)
        elif expected:
            assert result.feasible, segments
        if result.feasible:
            witness_ok(segments, result)


# -- the C-like grammar ------------------------------------------------------------------------

C_VALID = [
    "",
    "int x;",
    "int x = 1;",
    "int x=1;int y=x;",
    "int f() {}",
    "int f(int a, int b) { return a + b; }",
    "int f(int a) { if (a < 2) return 1; else return a * f(a - 1); }",
    "int main() { int i = 0; while (i != 10) { i = i + 1; } return i; }",
    "int g() { f(); f(1, 2 * (3 + x)); return; }",
    "int f() { { { } } }",
    "// a comment\nint x = 1; // another\n",
    "int f() {\n\tif (a == b) if (c >= d) x = 1; else x = 2;\n}",
    "int f(){return(((1)));}",
    "intx;",                  # "int" "x": keywords need no space after them
    "int f() { returnx; }",   # "return" "x"
    "int f() { if(x)y=1;elsey=2; }",
    "int x = a / b - c * d;",
    "int x = f(g(h()), 1) <= 2;",
    "int f(int a) { while (a > 0) a = a - 1; }",
    "int x = 1 // one\n;",
]
C_INVALID = [
    "int x",
    "x = 1;",                 # no statements at the top level
    "int x = ;",
    "int f() { return 1 }",
    "int f( { }",
    "int f() { if x) y = 1; }",
    "int f() { else x = 1; }",
    "int x = 1 + ;",
    "int x = (1;",
    "int x = 1 < 2 < 3;",     # comparisons do not chain
    "int f() { 1; }",         # a bare expression is no statement
    "int f(a) {}",
    "int f(int a,) {}",
    "int x = 1; // no line end",
    "int x = 1 / / 2;",
    "int 1x;",
    "int x = 1;}",
    "int f() { while () x = 1; }",
    "int x = f(,);",
    "int X = 1;",             # names are lower case
]


def test_c_like_grammar_gramgen_and_lark_agree():
    """40 hand-written texts (20 words, 20 not): gramgen, lark (dynamic_complete and
    dynamic lexers) and the oracle's recogniser all give the expected answer."""
    assert len(C_VALID) == 20 and len(C_INVALID) == 20
    grammar = gramgen.Grammar.from_lark(C_LIKE)
    oracle = setup("c_like").oracle
    dynamic = lark.Lark(C_LIKE, parser="earley", lexer="dynamic")
    for text, expected in [(t, True) for t in C_VALID] + [(t, False) for t in C_INVALID]:
        try:
            dynamic.parse(text)
            by_dynamic = True
        except lark.exceptions.LarkError:
            by_dynamic = False
        got = (accepts(grammar, text), oracle.lark_accepts(text), by_dynamic, oracle.accepts(text))
        assert got == (expected,) * 4, f"{text!r}: expected {expected}, (gramgen, lark, lark dynamic, oracle) = {got}"


C_FIXED = [
    ([b"while (x)", Hole()], False),  # a text starts with a declaration or a function
    ([Hole(), b"while (x)", Hole()], True),
    ([b"int f(", Hole(max_bytes=2), b") { return 1; }"], True),
    ([b"int f() { return ", Hole(min_bytes=1, max_bytes=1), b" 1; }"], True),  # a space
    ([b"int f() { return 1 ", Hole(max_bytes=1), b" 2; }"], True),              # an operator
    ([b"int f() { return 1 ", Hole(max_bytes=0), b" 2; }"], False),
    ([b"int x = 1", Hole(max_bytes=3), b"2;"], True),
    ([b"int x = 1", Hole(tokens=1), b"2;"], True),    # "+" or "1"
    ([b"int x = 1", Hole(tokens=1), b"y;"], True),    # "+"
    ([b"int x = 1", Hole(tokens=1), b");"], False),   # nothing opens the parenthesis
    ([b"int x = 1", Hole(), b");"], True),            # "+f(1"
    ([b"int f() { if (x) ", Hole(max_bytes=4), b" else y = 2; }"], True),  # "x=1;" / "{}"
    ([b"int f() { if (x) ", Hole(max_bytes=1), b" else y = 2; }"], False),
    ([b"int f() {", Hole(tokens=2), b"}"], True),     # "{" "}"
    ([b"int x = 1; /", Hole(), b"int y;"], True),     # a comment line
    ([b"int x = 1; /", Hole(max_bytes=3), b"int y;"], True),   # "/\n" (a comment "//\n")
    ([b"int x = 1; /", Hole(max_bytes=0), b"int y;"], False),
    ([b"int x = 1; //", Hole(max_bytes=3), b"y;"], False),   # a comment needs its line end
    ([b"int x = 1; //", Hole(max_bytes=4), b"y;"], True),    # "\nint": "int" "y" needs no space
]


# -- hand-decided cases ------------------------------------------------------------------------

FIXED = {
    "parens": [
        ([b"(", Hole(), b")"], True),
        ([b")", Hole()], False),                       # nothing closes before it opens
        ([b"((", Hole(max_bytes=0), b")"], False),
        ([b"((", Hole(max_bytes=1), b")"], True),      # ")"
        ([b"((", Hole(tokens=1), b"a"], True),         # "))"
        ([b"(((", Hole(tokens=1)], False),             # no token is ")))"
    ],
    "arith": [
        ([b"1+", Hole(), b"*2"], True),
        ([b"1+", Hole(max_bytes=0), b"*2"], False),
        ([b"(", Hole(max_bytes=1), b")"], True),
        ([b"+", Hole()], False),
        ([b"12", Hole(tokens=1), b"3"], True),
        ([b"(1", Hole(tokens=1)], True),               # ")"
    ],
    "json": [
        ([b'{"a":', Hole(), b"}"], True),
        ([b'{"a"', Hole(max_bytes=0), b"1}"], False),
        ([b'"a', Hole(max_bytes=1)], True),
        ([b"-", Hole(max_bytes=1), b"1"], True),       # "-11" ("-01" has a leading zero)
        ([b"0", Hole(min_bytes=1, max_bytes=1)], False),
        ([b"[0", Hole(min_bytes=1, max_bytes=1)], True),
    ],
    "json_ws": [
        ([b"1 "], True),                               # ignored text at the end
        ([b' "a" ', Hole(min_bytes=1, max_bytes=2)], True),
        ([b'"a" ', Hole(min_bytes=1, max_bytes=1), b"1"], False),
        ([b"[1 , 0 ] ", Hole(max_bytes=1)], True),
        ([b'{ "a" :', Hole(tokens=1), b"}"], True),
        ([b" ", Hole(max_bytes=0)], False),             # white space is no value
    ],
    "c_like": C_FIXED,
}


@pytest.mark.parametrize("name", NAMES + ["c_like"])
def test_fixed_cases(name):
    """Hand-decided templates (6 per small grammar, 19 on the C-like one); every yes has a
    witness lark parses."""
    s = setup(name)
    for segments, expected in FIXED[name]:
        result = s.infiller.check(segments)
        assert result.feasible == expected, describe(s, segments, expected, result.feasible)
        if expected:
            assert_witness(s, segments, result)
        if all(x.max_bytes is not None or x.counts_tokens for x in segments if isinstance(x, Hole)) \
                and name != "c_like":
            assert s.oracle.search(segments, s.pieces).feasible == expected, (name, segments)


def test_c_like_witnesses():
    """100 random templates on the C-like grammar (holes of every kind): every yes has a
    witness that lark parses, made of the segments and fillings within bounds; an
    infeasible template stays so with its holes emptied where they can be."""
    s = setup("c_like")
    rng = random.Random("c_like")
    yes = 0
    for _ in range(n_cases(100)):
        segments = random_template(rng, s, hole_kinds(rng, UNBOUNDED + BOUNDED))
        result = s.infiller.check(segments)
        assert not result.exhausted, describe(s, segments, "a decision", "budget exhausted")
        if result.feasible:
            assert_witness(s, segments, result)
            yes += 1
        elif all(x.min_bytes == 0 and not x.tokens for x in segments if isinstance(x, Hole)):
            empty = b"".join(x for x in segments if not isinstance(x, Hole))
            assert not s.oracle.lark_accepts(empty), describe(s, segments, f"feasible ({empty!r})", "infeasible")
    assert yes >= n_cases(100) // 10


# -- bad input ---------------------------------------------------------------------------------

def test_bad_input_is_a_clear_gramgen_error():
    """Malformed holes and segments, a slot that is no hole, an `at` outside the hole."""
    s = setup("parens")
    inf = s.infiller
    cases = [
        (lambda: Hole(min_bytes=5, max_bytes=2), r"min_bytes.*max_bytes"),
        (lambda: Hole(min_bytes=-1), r"negative|-1"),
        (lambda: Hole(max_bytes=-3), r"negative|-3"),
        (lambda: Hole(tokens=-1), r"negative|-1"),
        (lambda: Hole(max_tokens=-2), r"negative|-2"),
        (lambda: Hole(tokens=2, min_bytes=1), r"tokens.*bytes|bytes.*tokens"),
        (lambda: Hole(max_tokens=2, max_bytes=4), r"tokens.*bytes|bytes.*tokens"),
        (lambda: Hole(tokens=1, max_tokens=2), r"tokens"),
        (lambda: inf.check([b"(", "a", Hole()]), r"\bstr\b"),
        (lambda: inf.check([b"(", 7, Hole()]), r"\bint\b"),
        (lambda: inf.check([]), r"empty"),
        (lambda: inf.check(b"()"), r"list|segments"),
        (lambda: inf.allows([b"(", Hole()], 0, 0), r"Hole"),
        (lambda: inf.allows([b"(", Hole()], 5, 0), r"slot|index"),
        (lambda: inf.allows([b"(", Hole(tokens=2)], 1, 0, at=2), r"\bat\b"),
        (lambda: inf.allows([b"(", Hole(tokens=2)], 1, 0, at=-1), r"\bat\b"),
        (lambda: inf.allows([b"(", Hole()], 1, 0, at=3), r"\bat\b"),
        (lambda: inf.mask([b"(", Hole(max_tokens=1)], 1, at=1), r"\bat\b"),
        (lambda: inf.allows([b"(", Hole()], 1, s.vocab.size), r"token"),
        (lambda: gramgen.Infiller(s.cg, budget=0), r"budget"),
        (lambda: gramgen.Infiller("not a grammar"), r"CompiledGrammar"),
    ]
    for make, message in cases:
        with pytest.raises(gramgen.GramgenError, match=message):
            make()
