"""Lark grammars, lowered to the IR with lark's own grammar loader.

Reusing ``lark.load_grammar`` means every construct lark accepts (templates, ``?rule``
inlining, ``~`` repetition, ``%import`` of ``common.lark``, ``%override`` / ``%extend``,
``%ignore``, ``%declare``) is expanded exactly as lark does it: we only translate lark's
compiled BNF rules and terminal patterns.

Semantics (as lark's Earley parser with a dynamic lexer): a string is in the language if
it splits into terminals, in any way, that parse by the rules, with ``%ignore`` terminals
allowed between any two terminals and at both ends. Rule and terminal priorities only pick
among parses under Earley, so they do not change the language and are ignored; so are
aliases, ``!``/``?``/``_`` tree shaping and ``keep_all_tokens``. Two deliberate
differences from ``Lark(..., lexer="dynamic")`` itself: lark matches each terminal with
Python ``re`` at each position and keeps only that one match (``lexer="dynamic_complete"``
also tries its prefixes), while here every split counts, so gramgen's language can be a
superset (e.g. ``start: A A`` with ``A: /a+/`` accepts ``aa``, which lark's ``dynamic``
lexer rejects); and zero-width terminals, which lark's Earley refuses, are allowed (their
empty match moves into the rules, see :func:`~gramgen.grammar.simplify.split_nullable_lexemes`).

Terminals ``%declare``-d without a pattern are produced by a postlexer. The one postlexer
supported is lark's ``PythonIndenter``: when a grammar declares ``_INDENT`` and ``_DEDENT``
(its newline terminal, ``_NEWLINE`` in lark's python.lark, must take the spaces and tabs
that follow a line end, as lark's does), the two become *marker* lexemes (one byte that UTF-8 text never
holds, :data:`INDENT_MARKER` / :data:`DEDENT_MARKER`, then optional spaces and tabs) that
the matcher inserts itself where the indenter would emit them (see
:mod:`gramgen.runtime.indenter`); ``ir.meta["indenter"]`` says so. Any other declared-only
terminal raises :class:`GrammarError`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

from ..errors import GramgenError, GrammarError
from .ir import ByteRanges, CharRanges, GrammarIR, Regex, Repeat, Rule, Seq, literal
from .regex import parse_regex
from .simplify import split_nullable_lexemes

__all__ = ["BRACKET_NEWLINE", "DEDENT_MARKER", "INDENT_MARKER", "INDENTER_TERMINALS", "lark_to_ir"]

#: the bytes the matcher inserts for an indent / a dedent, and feeds instead of a line end
#: inside brackets (ignored there, as the indenter drops those newlines); none is UTF-8
INDENT_MARKER, DEDENT_MARKER, BRACKET_NEWLINE = 0xFE, 0xFF, 0xFD
#: the name of the ignored lexeme that matches BRACKET_NEWLINE
_BRACKET_NEWLINE_LEXEME = "%bracket_newline"
#: the terminal names of lark's PythonIndenter: (newline, indent, dedent); the matcher finds
#: line ends itself, so only the last two are looked for
INDENTER_TERMINALS = ("_NEWLINE", "_INDENT", "_DEDENT")


def _marker(byte: int) -> Regex:
    """A marker lexeme: its byte, then optional spaces and tabs (the indentation of the
    line, when the matcher checks a token that starts with it; see runtime/indenter.py)."""
    return Seq((ByteRanges(((byte, byte),)), Repeat(CharRanges(((9, 9), (32, 32))), 0, None)))

_LINE_COL = re.compile(r"line (\d+),? col(?:umn)? (\d+)")
_QUOTED = re.compile(r"'([^'\s]+)'")
_RELATIVE_IMPORT = re.compile(r"^[ \t]*%import[ \t]+\.", re.MULTILINE)


def lark_to_ir(text: str, start: str = "start", source: str = "<lark>", *,
               import_paths: Sequence[str] = ()) -> GrammarIR:
    """Lower a Lark grammar to the IR.

    ``import_paths``: folders searched for ``%import name.X`` before lark's bundled
    grammars (``common``, ``unicode``, ...). Relative imports (``%import .name.X``) resolve
    against the folder of ``source`` when ``source`` is a file (``Grammar.from_file`` passes
    the path), else only against ``import_paths``.
    """
    if not isinstance(text, str):
        raise GrammarError(f"a Lark grammar must be text, not {type(text).__name__}", source=source)
    try:
        terminals, rules, ignore = _compile_with_lark(text, start, source, list(import_paths))
        ir = _to_ir(text, start, source, terminals, rules, ignore)
        return split_nullable_lexemes(ir)
    except GramgenError:  # GrammarError, or CompileLimitError from a huge regex
        raise
    except RecursionError:
        raise GrammarError("grammar is nested too deeply", source=source) from None
    except Exception as exc:  # lark raises many types on malformed input; keep its message
        raise _convert(exc, text, source) from exc


def _compile_with_lark(text: str, start: str, source: str, import_paths: list[str]):
    from lark.load_grammar import load_grammar

    if not os.path.isfile(source) and not import_paths and _RELATIVE_IMPORT.search(text):
        m = _RELATIVE_IMPORT.search(text)
        raise _located("a relative %import needs the grammar's file (use Grammar.from_file) "
                       "or import_paths", text, m.start() if m else 0, source)
    grammar, _files = load_grammar(text, source, import_paths, False)
    for name, _params, tree, _options in grammar.rule_defs:
        if tree is None:  # lark itself crashes on these in compile()
            raise _located(f"rule {name} is %declare-d but never defined", text,
                           _find_name(text, name), source)
    return grammar.compile([start], set())


def _to_ir(text: str, start: str, source: str, terminals, rules, ignore) -> GrammarIR:
    rule_names = {str(r.origin.name) for r in rules}
    if start not in rule_names:
        raise GrammarError(f"start rule {start!r} is not defined", 1, 1, source)

    # postlexer-only terminals first: only lark's PythonIndenter's are supported
    defined = {str(t.name) for t in terminals}
    _newline, indent, dedent = INDENTER_TERMINALS
    used = [*(str(s.name) for r in rules for s in r.expansion if s.is_term), *map(str, ignore)]
    indenter = indent in used and dedent in used and not {indent, dedent} & defined
    lexemes: dict[str, Regex] = {}
    if indenter:
        lexemes[indent], lexemes[dedent] = _marker(INDENT_MARKER), _marker(DEDENT_MARKER)
        lexemes[_BRACKET_NEWLINE_LEXEME] = ByteRanges(((BRACKET_NEWLINE, BRACKET_NEWLINE),))
        ignore = [*ignore, _BRACKET_NEWLINE_LEXEME]
    for name in used:
        if name not in defined and name not in lexemes:
            raise _declared_only(name, text, source)

    rename: dict[str, str] = {}
    for t in terminals:
        name = str(t.name)  # lark's names may be Token (a str subclass): keep plain str
        if name in rule_names:  # lark keeps these apart; make sure the IR does too
            rename[name] = name = f"{name}#terminal"
        lexemes[name] = _pattern_regex(t, text, source)

    out: list[Rule] = []
    for r in rules:
        body = tuple(rename.get(str(sym.name), str(sym.name)) if sym.is_term else str(sym.name)
                     for sym in r.expansion)
        out.append(Rule(str(r.origin.name), body))
    return GrammarIR(rules=out, lexemes=lexemes, start=start,
                     ignore=tuple(rename.get(n, n) for n in dict.fromkeys(map(str, ignore))),
                     source=source, meta={"format": "lark", **({"indenter": "python"} if indenter else {})})


# lark's common.lark spells ESCAPED_STRING with a lookbehind, to stop its lazy regex at the
# first unescaped quote. Under lark's own lexers that means: a double-quoted string without
# newlines in which a backslash escapes the next character. That language is regular; use
# it instead of rejecting the most imported terminal of all.
_KNOWN_LOOKAROUND_PATTERNS = {
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
    # python.lark's strings: a quote, then up to the first closing quote(s) not escaped by a
    # backslash (lark's lazy match). Two differences: a backslash-newline continues a
    # one-quote string, as in Python (lark's `.` stops at the newline); and `(?!"")` after
    # the opening quote looks past the lexeme (`""` followed by `"`), which a lexeme DFA
    # cannot see: ``""`` is allowed there (under any split, `"""` read as `""` `"` only
    # makes adjacent strings)
    r'''([ubf]?r?|r[ubf])("(?!"").*?(?<!\\)(\\\\)*?"|'(?!'').*?(?<!\\)(\\\\)*?')''':
        r'''([ubf]?r?|r[ubf])("(?:[^"\\\n]|\\(?:\r\n|[\s\S]))*"|'(?:[^'\\\n]|\\(?:\r\n|[\s\S]))*')''',
    r'''([ubf]?r?|r[ubf])(""".*?(?<!\\)(\\\\)*?"""|'''
    r"""'''.*?(?<!\\)(\\\\)*?''')""":
        r'''([ubf]?r?|r[ubf])("""(?:[^"\\]|\\[\s\S]|"[^"\\]|"\\[\s\S]|""[^"\\]|""\\[\s\S])*"""|'''
        r"""'''(?:[^'\\]|\\[\s\S]|'[^'\\]|'\\[\s\S]|''[^'\\]|''\\[\s\S])*''')""",
    # python.lark's DEC_NUMBER: `0` may not be followed by a digit 1-9; no rule puts a
    # lexeme that starts with a digit right after a number, so the lookahead changes nothing
    r'(?:0(?:(?:_)?0)*(?![1-9])|[1-9](?:(?:_)?[0-9])*)': r'(?:0(?:(?:_)?0)*|[1-9](?:(?:_)?[0-9])*)',
}


def _pattern_regex(term, text: str, source: str) -> Regex:
    from lark.lexer import PatternStr

    pattern = term.pattern
    flags = "".join(sorted(pattern.flags))
    if not isinstance(pattern, PatternStr) and pattern.value in _KNOWN_LOOKAROUND_PATTERNS:
        return parse_regex(_KNOWN_LOOKAROUND_PATTERNS[pattern.value], flags, source=source)
    try:
        if isinstance(pattern, PatternStr):
            if not flags:
                return literal(pattern.value)
            # case-insensitive strings match as lark does: re's IGNORECASE on the escaped text
            return parse_regex(re.escape(pattern.value), flags, source=source, max_expanded=None)
        return parse_regex(pattern.value, flags, source=source, max_expanded=None)
    except GrammarError as exc:
        pos = _find_terminal(text, term.name, getattr(pattern, "raw", None))
        raise _located(f"terminal {term.name}: {exc.message}", text, pos, source) from None


# -- error locations ----------------------------------------------------------------------


def _declared_only(name: str, text: str, source: str) -> GrammarError:
    m = re.search(r"%declare\b[^\n]*\b" + re.escape(name) + r"\b", text)
    pos = m.end() - len(name) if m else _find_name(text, name)
    return _located(f"terminal {name} is %declare-d without a pattern: it would come from a "
                    "postlexer (e.g. an indenter), which gramgen does not support", text, pos, source)


def _find_name(text: str, name: str) -> int:
    m = re.search(r"(?<![\w.])" + re.escape(name.lstrip("?!")) + r"(?!\w)", text)
    return m.start() if m else 0


def _definitions(text: str, name: str) -> list[int]:
    """Offsets of the lines that define ``name`` (``name:``, ``?name:``, ``name{x}:``, ``NAME.2:``)."""
    pattern = r"^[ \t]*(?:%override[ \t]+|%extend[ \t]+)?[?!]?(" + re.escape(name) + r")\b(?=[^:\n]*:)"
    return [m.start(1) for m in re.finditer(pattern, text, re.MULTILINE)]


def _find_terminal(text: str, name: str, raw: str | None) -> int:
    m = re.search(r"^[ \t]*" + re.escape(name) + r"\b", text, re.MULTILINE)
    if m:
        return m.end() - len(name)
    if raw and raw in text:
        return text.index(raw)
    return _find_name(text, name)


def _located(message: str, text: str, pos: int, source: str) -> GrammarError:
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return GrammarError(message, line, col, source)


def _convert(exc: Exception, text: str, source: str) -> GrammarError:
    """A lark (or other) exception as a GrammarError at the best position we can find."""
    message = str(exc) or type(exc).__name__
    hints: list[str] = []
    if isinstance(exc, OSError) and getattr(exc, "filename", None):
        message = f"cannot %import {exc.filename!s}: {exc.strerror or message}"
        hints.append(os.path.basename(str(exc.filename)).split(".")[0])
    elif len(exc.args) == 2 and isinstance(exc.args[1], Exception):  # (literal, SyntaxError)
        detail = exc.args[1].args[0] if exc.args[1].args else exc.args[1]
        message = f"invalid literal {exc.args[0]}: {detail}"
        hints.append(str(exc.args[0]))
    message = message.strip()

    line, col = getattr(exc, "line", None), getattr(exc, "column", None)
    if isinstance(line, int) and isinstance(col, int) and line >= 1 and col >= 1:
        return GrammarError(message, line, col, source)
    m = _LINE_COL.search(message)
    if m:
        return GrammarError(message, max(1, int(m.group(1))), max(1, int(m.group(2))), source)
    redefined = re.match(r"(?:Rule|Terminal) '([^']+)' defined more than once", message)
    if redefined:
        defs = _definitions(text, redefined.group(1))
        if len(defs) > 1:
            return _located(message, text, defs[1], source)
    for q in hints + _QUOTED.findall(message):
        if q in text:
            pos = _find_name(text, q) if re.fullmatch(r"\w+", q) else text.index(q)
            return _located(message, text, pos, source)
    return GrammarError(message, 1, 1, source)
