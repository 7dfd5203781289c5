"""JSON strings: escaped spellings of decoded characters, ECMA-262 patterns, formats.

String keywords (``pattern``, ``format``, ``minLength``/``maxLength``, ``enum`` of strings,
``propertyNames``) constrain the *decoded* text. We intersect them as code-point automata
(:mod:`gramgen.grammar.cpdfa`) and only at the end spell every decoded character the ways
JSON allows: raw (except ``"``, ``\\`` and controls), a short escape (``\\n``, ``\\"``...),
or ``\\u00XX`` for the other controls (see :func:`json_char` for the one documented
limitation: characters that may stand raw are spelled raw).
"""

from __future__ import annotations

import functools
import re

# cpdfa by its own name: ``from .. import cpdfa`` would import the package gramgen.grammar
import gramgen.grammar.cpdfa as cpdfa

from ..._lru import cleared_with_all
from ...errors import GrammarError
from ..ir import EMPTY, NOTHING, Alt, Automaton, CharRanges, Regex, Repeat, Seq, char, literal, normalize_ranges
from ..regex import ANCHOR_MARKERS, PatternError, parse_regex, translate_ecma
from ..regex import intersect_ranges as _intersect
from ..simplify import alt, seq

Ranges = tuple[tuple[int, int], ...]

_SHORT_ESCAPES = {0x22: '"', 0x5C: "\\", 0x2F: "/", 0x08: "b", 0x0C: "f", 0x0A: "n", 0x0D: "r", 0x09: "t"}
_UNICODE_ESCAPED: Ranges = ((0x00, 0x07), (0x0B, 0x0B), (0x0E, 0x1F))
"""Controls without a short escape: written ``\\u00XX``."""
_RAW_OK: Ranges = ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, 0x10FFFF))


def _hex_digit(lo: int, hi: int) -> Regex:
    """One hex digit with value in lo..hi, either case."""
    ranges = []
    for v in range(lo, hi + 1):
        for ch in {f"{v:x}", f"{v:X}"}:
            ranges.append((ord(ch), ord(ch)))
    return CharRanges(normalize_ranges(ranges))


def fixed_width_range(lo: int, hi: int, width: int, base: int, digit) -> Regex:
    """Numerals of exactly ``width`` digits (leading zeros kept) with value in [lo, hi];
    ``digit(a, b)`` is the regex of one digit with value a..b."""
    if lo > hi:
        return NOTHING
    if width == 0:
        return EMPTY
    unit = base ** (width - 1)
    a, b = divmod(lo, unit)[0], divmod(hi, unit)[0]
    if a == b:
        return seq([digit(a, a), fixed_width_range(lo - a * unit, hi - a * unit, width - 1, base, digit)])
    parts = []
    lo_rest, hi_rest = lo - a * unit, hi - b * unit
    first, last = a, b
    if lo_rest != 0:
        parts.append(seq([digit(a, a), fixed_width_range(lo_rest, unit - 1, width - 1, base, digit)]))
        first = a + 1
    if hi_rest != unit - 1:
        last = b - 1
    if first <= last:
        parts.append(seq([digit(first, last), Repeat(digit(0, base - 1), width - 1, width - 1)
                          if width > 1 else EMPTY]))
    if hi_rest != unit - 1:
        parts.append(seq([digit(b, b), fixed_width_range(0, hi_rest, width - 1, base, digit)]))
    return alt(parts)


def _hex4(lo: int, hi: int) -> Regex:
    return fixed_width_range(lo, hi, 4, 16, _hex_digit)


def json_char(ranges: Ranges) -> Regex:
    """The JSON spellings we generate for one character whose code point is in
    ``ranges``: raw wherever JSON allows it, ``\\"`` and ``\\\\``, the short escapes of
    controls, and ``\\u00XX`` (either hex case) for the other controls. Escapes of
    characters that may stand raw (``\\u00e9``, ``\\/``) are not generated: one spelling
    per character keeps string automata small (documented over-constraint)."""
    try:
        found = _CONSTANT_SPELLINGS.get(ranges)
        return found if found is not None else _json_char(ranges)
    except TypeError:  # ranges given as lists
        return _json_char(normalize_ranges(ranges))


#: (each entry is a small regex tree that the garbage collector tracks: a few hundred
#: keep the distinct character classes of many schemas without weighing on collections)
@cleared_with_all
@functools.lru_cache(maxsize=512)
def _json_char(ranges: tuple) -> Regex:
    ranges = normalize_ranges(ranges)
    raw = _intersect(ranges, _RAW_OK)
    escaped = _intersect(ranges, _NEEDS_ESCAPE)
    if not escaped:
        return CharRanges(raw) if raw else NOTHING
    # (every character that needs one, as in the "any other character" edges of keys'
    # automata: a constant of JSON, not a compile product)
    escapes = _ALL_ESCAPES if escaped == _NEEDS_ESCAPE else _escapes(escaped)
    if not raw:
        return escapes
    return alt([CharRanges(raw), escapes])


_NEEDS_ESCAPE: Ranges = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C))
"""The characters JSON never spells raw: controls, ``"`` and ``\\``."""


@cleared_with_all
@functools.lru_cache(maxsize=64)
def _escapes(ranges: tuple) -> Regex:
    """The escaped spellings of the characters in ``ranges`` (within :data:`_NEEDS_ESCAPE`):
    the escape part of many classes is the same (every control and ``"`` and ``\\``,
    in the "any other character" edges of a key's automaton), built once."""
    parts: list[Regex] = []
    for cp, letter in _SHORT_ESCAPES.items():
        if cp != 0x2F and _intersect(ranges, ((cp, cp),)):
            parts.append(literal("\\" + letter))
    for lo, hi in _intersect(ranges, _UNICODE_ESCAPED):
        parts.append(seq([literal("\\u"), _hex4(lo, hi)]))
    return alt(parts)


_ALL_ESCAPES = _escapes(_NEEDS_ESCAPE)
ANY_JSON_CHAR = _json_char(cpdfa.ANY_CHAR)
#: the spellings of the classes that every "any other key" automaton has (every character,
#: and all but the printable ASCII ones): constants of JSON, read before the cache of
#: :func:`json_char`, which every cold compile empties
_CONSTANT_SPELLINGS = {cpdfa.ANY_CHAR: ANY_JSON_CHAR, cpdfa.SEVERAL_OF_ANY: _json_char(cpdfa.SEVERAL_OF_ANY)}


#: characters that some name may hold but that :func:`json_char` does not spell as their
#: own UTF-8 bytes (controls, ``"``, ``\\``), or cannot spell (lone surrogates)
_NOT_RAW = re.compile('[\x00-\x1f"\\\\\ud800-\udfff]')
#: the most spellings :func:`spellings` lists for one text
MAX_SPELLINGS = 256


def spellings(text: str) -> list[bytes] | None:
    """Every byte string that spells ``text`` the way :func:`json_char` spells characters
    (one spelling per character but the ``\\u00XX`` escapes, in either hex case); None
    where a character has no spelling (a lone surrogate) or there are more than
    :data:`MAX_SPELLINGS`."""
    if _NOT_RAW.search(text) is None:
        return [text.encode()]
    out = [b""]
    for ch in text:
        options = _char_spellings(ord(ch))
        if not options or len(out) * len(options) > MAX_SPELLINGS:
            return None
        out = [a + o for a in out for o in options]
    return out


@functools.lru_cache(maxsize=256)
def _char_spellings(cp: int) -> tuple[bytes, ...]:
    """The spellings of one character, read from :func:`json_char`'s regex (a constant of
    JSON per character, not a compile product)."""
    return tuple(sorted(_words_of(json_char(((cp, cp),)))))


def _words_of(rx: Regex) -> set[bytes]:
    """The words of a regex without repetition (a character's spellings), as UTF-8."""
    if isinstance(rx, CharRanges):
        return {chr(c).encode("utf-8", "surrogatepass") for lo, hi in rx.ranges for c in range(lo, hi + 1)}
    if isinstance(rx, Seq):
        out = {b""}
        for item in rx.items:
            out = {a + b for a in out for b in _words_of(item)}
        return out
    if isinstance(rx, Alt):
        return set().union(*(_words_of(item) for item in rx.items))
    if isinstance(rx, Repeat) and rx.max is not None:
        one, out, words = _words_of(rx.item), set(), {b""}
        for n in range(rx.max + 1):
            if n >= rx.min:
                out |= words
            words = {a + b for a in words for b in one}
        return out
    raise TypeError(f"not a finite spelling: {type(rx).__name__}")


def quoted(content: Regex) -> Regex:
    """``"`` content ``"`` (content is already spelled in escaped form)."""
    return seq([literal('"'), content, literal('"')])


def spelled(dfa: cpdfa.CodepointDFA) -> Regex:
    """A JSON string literal whose decoded content ``dfa`` accepts (made once for a
    format's automaton, :func:`format_dfa`). For "any string but some words"
    (:func:`cpdfa.all_but`) the automaton is made when first read
    (:meth:`~gramgen.grammar.ir.Automaton.deferred`): as an object's other keys, its DFA is
    cut from any key's instead (see ``_note_without_prefixes`` in the compiler)."""
    kept = _spelled_formats.get(id(dfa))
    if kept is not None and kept[0] is dfa:
        return kept[1]
    if dfa.__class__ is cpdfa.AllBut:
        return quoted(Automaton.deferred(functools.partial(_spelled_all_but, dfa.words)))
    return quoted(cpdfa.to_automaton(dfa, json_char))


def _spelled_all_but(words: tuple[str, ...]) -> tuple:
    """The fields of ``to_automaton(all_but(words), json_char)`` (an :class:`Automaton`:
    all_but's free state has edges), for :func:`spelled`."""
    made = cpdfa.to_automaton(cpdfa.all_but(words), json_char)
    if made.__class__ is not Automaton:
        raise TypeError(f"all_but spelled to a {type(made).__name__}, not an Automaton")
    return made.n_states, made.start, made.edges, made.accepting


#: id of a format's automaton -> (it, its spelling): both constants (see :func:`format_dfa`)
_spelled_formats: dict[int, tuple] = {}


def is_format_spelling(rx: Regex) -> bool:
    """Whether ``rx`` is a format's spelling that :func:`spelled` keeps (a constant)."""
    return id(rx) in _format_spellings


#: the ids of the spellings in :data:`_spelled_formats` (kept alive there)
_format_spellings: set[int] = set()


def string_literal(value: str) -> Regex:
    """All spellings of exactly this decoded string."""
    if _NOT_RAW.search(value) is None:   # (most names: every character spelled as itself)
        return seq([_QUOTE, *map(char, value), _QUOTE])
    return quoted(seq([char(c) if _raw_ok(c) else json_char(((ord(c), ord(c)),)) for c in value]))


_QUOTE = char('"')


def _raw_ok(c: str) -> bool:
    """Whether JSON spells ``c`` raw only (:func:`json_char` of it is ``c`` itself)."""
    o = ord(c)
    return (0x20 <= o < 0xD800 and o != 0x22 and o != 0x5C) or o >= 0xE000


# ------------------------------------------------------------------ ECMA-262 patterns


def ecma_to_python(pattern: str) -> str:
    """Python ``re`` syntax with the meaning of the ECMA-262 ``pattern`` (u flag): the one
    translator of :func:`gramgen.grammar.regex.translate_ecma`, shared with
    ``Grammar.from_regex(flavor="ecma")``, with the lenient syntax real schemas need
    (``\\-``, ``\\:``, a literal ``{``); raises :class:`PatternError`."""
    return translate_ecma(pattern, lenient_syntax=True).python


@cleared_with_all
@functools.lru_cache(maxsize=256)
def pattern_dfa(pattern: str) -> cpdfa.CodepointDFA:
    """The decoded strings in which the ECMA-262 ``pattern`` finds a match (JSON Schema
    patterns are not anchored; u-flag meaning, lenient syntax as :func:`ecma_to_python`),
    as a code-point DFA (shared: treat as read-only).

    ``^`` and ``$`` may stand anywhere (``^$|^\\S+$``, ``(^a|b$)``, ``^(x($|/))*$``): the
    pattern is searched in ``bos text eos`` with the anchors reading the markers."""
    translation = translate_ecma(pattern, lenient_syntax=True)
    try:
        core = parse_regex(translation.python, anchor_markers=ANCHOR_MARKERS)
    except GrammarError as exc:
        raise PatternError(exc.message, translation.origin(getattr(exc, "offset", 0))) from None
    dfa = cpdfa.from_regex(seq([_SEARCH_PAD, core, _SEARCH_PAD]))
    return cpdfa.strip_markers(dfa, *ANCHOR_MARKERS)


_SEARCH_PAD = Repeat(CharRanges(normalize_ranges(cpdfa.ANY_CHAR + tuple((m, m) for m in ANCHOR_MARKERS))), 0, None)


# ------------------------------------------------------------------ formats

def _date_regex() -> str:
    day31 = "(?:0[1-9]|[12][0-9]|3[01])"
    day30 = "(?:0[1-9]|[12][0-9]|30)"
    day28 = "(?:0[1-9]|1[0-9]|2[0-8])"
    # leap years: YY % 4 == 0 with YY != 00, or YY == 00 and CC % 4 == 0
    mult4 = "(?:[02468][048]|[13579][26])"
    leap = f"(?:[0-9]{{2}}(?:0[48]|[2468][048]|[13579][26])|{mult4}00)"
    return (f"(?:[0-9]{{4}}-(?:(?:0[13578]|1[02])-{day31}|(?:0[469]|11)-{day30}|02-{day28})"
            f"|{leap}-02-29)")


_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_DATE = _date_regex()
_DEC_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = rf"{_DEC_OCTET}(?:\.{_DEC_OCTET}){{3}}"
_H16 = "[0-9a-fA-F]{1,4}"
_LS32 = f"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6 = "(?:" + "|".join([
    f"(?:{_H16}:){{6}}{_LS32}",
    f"::(?:{_H16}:){{5}}{_LS32}",
    f"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
    f"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
    f"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
    f"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    f"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
    f"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
    f"(?:(?:{_H16}:){{0,6}}{_H16})?::",
]) + ")"
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,28}[A-Za-z0-9])?"
# RFC 3986, ASCII only
_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_PCT = "%[0-9A-Fa-f]{2}"
_PCHAR = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_SEGMENT = f"{_PCHAR}*"
_SEGMENT_NZ = f"{_PCHAR}+"
_SEGMENT_NZ_NC = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})+"
_REG_NAME = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*"
_IP_LITERAL = rf"\[(?:{_IPV6}|[vV][0-9A-Fa-f]+\.[{_UNRESERVED}{_SUB_DELIMS}:]+)\]"
_AUTHORITY = (rf"(?:(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*@)?(?:{_IP_LITERAL}|{_IPV4}|{_REG_NAME})"
              r"(?::[0-9]*)?")
_PATH_ABEMPTY = f"(?:/{_SEGMENT})*"
_QUERY = rf"(?:\?(?:{_PCHAR}|[/?])*)?"
_FRAGMENT = rf"(?:#(?:{_PCHAR}|[/?])*)?"
_HIER = f"(?://{_AUTHORITY}{_PATH_ABEMPTY}|/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?|{_SEGMENT_NZ}(?:/{_SEGMENT})*|)"
_URI = rf"[A-Za-z][A-Za-z0-9+\-.]*:{_HIER}{_QUERY}{_FRAGMENT}"
_RELATIVE = (f"(?://{_AUTHORITY}{_PATH_ABEMPTY}|/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
             f"|{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*|){_QUERY}{_FRAGMENT}")
# regexes valid in both ECMA-262 and Python's re, without groups or counted repeats (so
# no nesting to balance and no bounds to order): atoms (a literal, an escaped punctuation
# character or class escape, ".", a class of single characters) each with at most one of
# * + ?, in branches joined by |, optionally anchored at the two ends
_RX_SPECIAL = r"\\^$.|?*+()\[\]{}"
_RX_ESCAPE = r"\\(?:[\\^$.|?*+()\[\]{}/]|[dwsDWS])"  # identity escapes valid with the u flag too
_RX_ATOM = rf"(?:[^{_RX_SPECIAL}]|{_RX_ESCAPE}|\.|\[\^?(?:[^\\\]\[^\-]|{_RX_ESCAPE}|\\-)+\])"
_RX_BRANCH = rf"(?:{_RX_ATOM}[*+?]?)*"
_REGEX_SUBSET = rf"\^?{_RX_BRANCH}(?:\|{_RX_BRANCH})*\$?"
# RFC 6570 level-4 templates, ASCII literals
_UT_VARCHAR = rf"(?:[A-Za-z0-9_]|{_PCT})"
_UT_VARSPEC = rf"{_UT_VARCHAR}(?:\.?{_UT_VARCHAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
_URI_TEMPLATE = (rf"(?:[!#$&(-;=?-\[\]_a-z~]|{_PCT}"
                 rf"|\{{[+#./;?&=,!@|]?{_UT_VARSPEC}(?:,{_UT_VARSPEC})*\}})*")
_DUR_TIME = r"T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = r"(?:[0-9]+D|[0-9]+M(?:[0-9]+D)?|[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?)"

FORMATS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}[Tt]{_TIME}",
    "duration": f"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)",
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "uuid": "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": _URI,
    "uri-reference": f"(?:{_URI}|{_RELATIVE})",
    "json-pointer": "(?:/(?:[^~/]|~[01])*)*",
    "relative-json-pointer": "(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)",
    # subsets made of ASCII: an ASCII URI is an IRI
    "iri": _URI,
    "iri-reference": f"(?:{_URI}|{_RELATIVE})",
    "regex": _REGEX_SUBSET,
    "uri-template": _URI_TEMPLATE,
}
"""Format name -> Python regex (fullmatch) over the decoded string, for the formats that
are one regex; hostnames and e-mail addresses are built from parts (:func:`format_regex`).
The language of every format is in the table of :func:`format_regex`."""

# RFC 5321 Mailbox pieces
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT_STRING = rf"{_ATEXT}+(?:\.{_ATEXT}+)*"
_QUOTED_STRING = r'"(?:[ !#-\[\]-~]|\\[ -~])+"'
_IPV6_COMPRESSED = "|".join(
    (f"{_H16}(?::{_H16}){{{a - 1}}}" if a else "") + "::" + (f"(?:{_H16}(?::{_H16}){{0,{5 - a}}})?" if a < 6 else "")
    for a in range(7))
_IPV6V4_COMPRESSED = "|".join(
    (f"{_H16}(?::{_H16}){{{a - 1}}}" if a else "") + f"::(?:{_H16}:){{0,{4 - a}}}{_IPV4}" for a in range(5))
_IPV6_SMTP = (f"(?:{_H16}(?::{_H16}){{7}}|{_IPV6_COMPRESSED}"
              f"|{_H16}(?::{_H16}){{5}}:{_IPV4}|{_IPV6V4_COMPRESSED})")
_ADDRESS_LITERAL = rf"\[(?:{_IPV4}|[Ii][Pp][Vv]6:{_IPV6_SMTP})\]"
_MAX_LOCAL_PART = 64
"""RFC 5321 4.5.3.1.1: at most 64 octets (here ASCII characters) before the @."""

_ANY_TEXT = "(?s:.*)"
_FORMAT_BUILDERS = {
    "hostname": lambda: _hostname(f"[xX][nN]--{_ANY_TEXT}"),
    "idn-hostname": lambda: _hostname(f"..--{_ANY_TEXT}"),
    "email": lambda: _email(format_regex("hostname")),
    "idn-email": lambda: _email(format_regex("hostname")),
}


def _dfa(python_regex: str) -> cpdfa.CodepointDFA:
    return cpdfa.from_regex(parse_regex(python_regex))


def _hostname(excluded_label: str) -> Regex:
    """1 to 8 LDH labels of 1 to 30 characters joined by dots, without the labels that
    fully match ``excluded_label``."""
    label = cpdfa.as_regex(cpdfa.difference(_dfa(_LABEL), _dfa(excluded_label)))
    return seq([label, Repeat(seq([literal("."), label]), 0, 7)])


def _email(domain: Regex) -> Regex:
    """RFC 5321 Mailbox: a dot-string or quoted local part of at most 64 characters, "@",
    then a domain or an IPv4 / IPv6 address literal."""
    local = cpdfa.intersect(_dfa(f"{_DOT_STRING}|{_QUOTED_STRING}"), _dfa(f"(?s:.){{1,{_MAX_LOCAL_PART}}}"))
    return seq([cpdfa.as_regex(local), literal("@"), alt([domain, parse_regex(_ADDRESS_LITERAL)])])


def format_subset(name: str) -> Regex | None:
    """A smaller automaton for a format whose full language is too big to intersect with a
    length bound (None: the format has none): ``email`` / ``idn-email`` with ``maxLength``
    become a dot-string local part, ``@`` and a hostname without ``--`` in positions 3-4 of
    any label (the idn-hostname language). A subset: it only leaves out valid addresses
    (quoted local parts, address literals, A-labels), never admits an invalid one."""
    if name not in ("email", "idn-email"):
        return None
    if name not in _subset_cache:
        _subset_cache[name] = seq([parse_regex(_DOT_STRING), literal("@"), format_regex("idn-hostname")])
    return _subset_cache[name]


_subset_cache: dict[str, Regex] = {}


def format_regex(name: str) -> Regex | None:
    """The decoded strings we accept for a format (None: not a format we know).

    Each is the format's RFC language or a documented subset of it (a subset only
    rejects some valid values; no format accepts an invalid one):

    ===================== ====================================================== ===========================================
    format                accepted                                               deliberately not accepted (valid but left out)
    ===================== ====================================================== ===========================================
    date                  RFC 3339 full-date ``YYYY-MM-DD``, real days only      --
                          (Feb 29 in Gregorian leap years)
    time                  RFC 3339 full-time ``HH:MM:SS[.frac]`` + ``Z``/``z``   leap second ``:60``
                          or ``+HH:MM``/``-HH:MM``
    date-time             date ``T``/``t`` time                                  leap second ``:60``
    duration              RFC 3339 Appendix A (``P1Y2M3DT4H5M6S``, ``P2W``)      --
    ipv4                  dotted quad, octets 0-255 without leading zeros        --
    ipv6                  RFC 4291 text forms (``::``, embedded IPv4)            zone ids (``%eth0``)
    hostname              RFC 1123 LDH labels joined by ``.``; ``--`` anywhere   labels over 30 characters, more than 8
                          inside a label (``ab--cd``)                            labels, a trailing dot, A-labels
                                                                                 (``xn--...``: punycode not checked)
    idn-hostname          as hostname, without any label with ``--`` in          U-labels (non-ASCII), A-labels
                          positions 3-4 (RFC 5891 4.2.3.1)
    email                 RFC 5321 Mailbox: dot-string local part (atext) or     general address literals
                          quoted string (printable ASCII, ``\\`` pairs), at     (``[tag:...]``), an empty quoted string
                          most 64 characters; ``@``; a hostname (as above) or    ``""``, octets with leading zeros in a
                          an address literal ``[127.0.0.1]``,                    literal, RFC 5322 comments and folding
                          ``[IPv6:::1]`` (RFC 5321 IPv6-addr)                    whitespace, hostnames left out above
    idn-email             as email                                               non-ASCII (RFC 6531 UTF-8 addresses)
    uuid                  8-4-4-4-12 hex digits, either case, any version        --
    uri                   RFC 3986 URI (scheme required)                         --
    uri-reference         RFC 3986 URI-reference (URI or relative reference)     --
    iri, iri-reference    as uri, uri-reference (ASCII)                          non-ASCII characters (RFC 3987)
    json-pointer          RFC 6901 (``""`` or ``/``-tokens, ``~0`` ``~1``)       --
    relative-json-pointer non-negative integer without leading zeros, then       index manipulation (``0+1``)
                          ``#`` or a JSON pointer
    regex                 ECMA-262 subset: characters, escaped punctuation,      groups, counted repeats, and everything
                          ``\\d\\w\\s`` (and upper case), ``.``, classes,  else ECMA-262 allows
                          each with at most one ``* + ?``; ``|``; ``^``, ``$``
                          at the two ends
    uri-template          RFC 6570 level 4, ASCII literals                       non-ASCII literals
    ===================== ====================================================== ===========================================
    """
    if name in _cache:
        return _cache[name]
    if name in _FORMAT_BUILDERS:
        rx = _FORMAT_BUILDERS[name]()
    elif name in FORMATS:
        rx = parse_regex(FORMATS[name])
    else:
        return None
    _cache[name] = rx
    return rx


FORMAT_NAMES = frozenset(FORMATS) | frozenset(_FORMAT_BUILDERS)
"""Every format :func:`format_regex` knows."""


def format_dfa(name: str) -> cpdfa.CodepointDFA | None:
    """The code-point automaton of :func:`format_regex` (None: not a format we know), made
    once per process and kept, as the regex is: a constant of the format, not a compile
    product (its subset construction took 0.3-10 ms, ``uri`` 4 ms and ``email`` 9 ms, in
    every compile of a schema with the format). Its JSON spelling (:func:`spelled`) is kept
    with it. :class:`CompileLimitError` where it is too big (not kept)."""
    found = _format_dfas.get(name)
    if found is None:
        rx = format_regex(name)
        if rx is None:
            return None
        found = cpdfa.from_regex(rx)
        spelling = quoted(cpdfa.to_automaton(found, json_char))
        _spelled_formats[id(found)] = (found, spelling)
        _format_spellings.add(id(spelling))
        _format_dfas[name] = found
    return found


_format_dfas: dict[str, cpdfa.CodepointDFA] = {}

_cache: dict[str, Regex] = {}
