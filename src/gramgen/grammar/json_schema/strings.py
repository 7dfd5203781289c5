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

# cpdfa by its own name: ``from .. import cpdfa`` would import the package gramgen.grammar
import gramgen.grammar.cpdfa as cpdfa

from ...errors import GrammarError
from ..ir import EMPTY, NOTHING, CharRanges, Regex, Repeat, literal, normalize_ranges
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
    return _json_char(normalize_ranges(ranges))


@functools.lru_cache(maxsize=8192)
def _json_char(ranges: tuple) -> Regex:
    parts: list[Regex] = []
    raw = _intersect(ranges, _RAW_OK)
    if raw:
        parts.append(CharRanges(raw))
    for cp, letter in _SHORT_ESCAPES.items():
        if cp != 0x2F and _intersect(ranges, ((cp, cp),)):
            parts.append(literal("\\" + letter))
    for lo, hi in _intersect(ranges, _UNICODE_ESCAPED):
        parts.append(seq([literal("\\u"), _hex4(lo, hi)]))
    return alt(parts)


ANY_JSON_CHAR = json_char(cpdfa.ANY_CHAR)


def quoted(content: Regex) -> Regex:
    """``"`` content ``"`` (content is already spelled in escaped form)."""
    return seq([literal('"'), content, literal('"')])


def spelled(dfa: cpdfa.CodepointDFA) -> Regex:
    """A JSON string literal whose decoded content ``dfa`` accepts."""
    return quoted(cpdfa.to_automaton(dfa, json_char))


def string_literal(value: str) -> Regex:
    """All spellings of exactly this decoded string."""
    return quoted(seq([json_char(((ord(c), ord(c)),)) for c in value]))


# ------------------------------------------------------------------ ECMA-262 patterns


def ecma_to_python(pattern: str) -> str:
    """Python ``re`` syntax with the meaning of the ECMA-262 ``pattern`` (u flag): the one
    translator of :func:`gramgen.grammar.regex.translate_ecma`, shared with
    ``Grammar.from_regex(flavor="ecma")``; raises :class:`PatternError`."""
    return translate_ecma(pattern).python


@functools.lru_cache(maxsize=1024)
def pattern_dfa(pattern: str) -> cpdfa.CodepointDFA:
    """The decoded strings in which the ECMA-262 ``pattern`` finds a match (JSON Schema
    patterns are not anchored), as a code-point DFA (shared: treat as read-only).

    ``^`` and ``$`` may stand anywhere (``^$|^\\S+$``, ``(^a|b$)``, ``^(x($|/))*$``): the
    pattern is searched in ``bos text eos`` with the anchors reading the markers."""
    translation = translate_ecma(pattern)
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
_HOSTNAME = rf"{_LABEL}(?:\.{_LABEL}){{0,7}}"
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
    "hostname": _HOSTNAME,
    "email": rf"[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+)*@{_HOSTNAME}",
    "uuid": "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "uri": _URI,
    "uri-reference": f"(?:{_URI}|{_RELATIVE})",
    "json-pointer": "(?:/(?:[^~/]|~[01])*)*",
    "relative-json-pointer": "(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)",
    # subsets made of ASCII: an ASCII URI is an IRI, an ASCII address or name without
    # A-labels is an internationalized one
    "iri": _URI,
    "iri-reference": f"(?:{_URI}|{_RELATIVE})",
    "idn-hostname": _HOSTNAME,
    "regex": _REGEX_SUBSET,
    "uri-template": _URI_TEMPLATE,
}
FORMATS["idn-email"] = FORMATS["email"]
"""Format name -> Python regex (fullmatch) over the decoded string. Each accepts a subset
of what the format's RFC allows (see README: hostname labels <= 30 characters and <= 8 of
them, email local parts in dot-atom form, no leap seconds; URIs are RFC 3986 exactly)."""


def format_regex(name: str) -> Regex | None:
    """The decoded strings we accept for a format (None: not a format we know)."""
    if name not in FORMATS:
        return None
    if name not in _cache:
        rx = parse_regex(FORMATS[name])
        if name in ("hostname", "email", "idn-hostname", "idn-email"):
            # RFC 5891: "--" in positions 3-4 marks an A-label (punycode), whose validity is
            # not regular in practice; such labels are left out (over-constraint)
            dashes = parse_regex(r"(?s:.*)(?:^|\.|@)[^.@]{2}--(?s:.*)".replace("(?:^|", "(?:"))
            starts = parse_regex(r"[^.@]{2}--(?s:.*)")
            rx = cpdfa.as_regex(cpdfa.difference(cpdfa.difference(cpdfa.from_regex(rx), cpdfa.from_regex(dashes)),
                                                 cpdfa.from_regex(starts)))
        _cache[name] = rx
    return _cache[name]


_cache: dict[str, Regex] = {}

