"""The token classes every JSON Schema grammar of one layout shares, made once per vocabulary.

Whatever the schema, its grammar's strings, numbers, literals and the whitespace and
punctuation between them are the same lexemes, so their dense states (a string body, a
run of whitespace before a value, a string a few characters before its ``maxLength``, a
long string's 64-character blocks) have the same futures and follow bytes in every schema
of a layout: ``TokenClasses._classify`` finds them by that key. Classifying one against a
128k-token vocabulary is a walk of 0.1-0.3 ms, and the first masks of a schema meet
several: that was most of the mask tail of a fresh schema (the first visits). A few
small schemas made of those values alone are compiled for the vocabulary the first time
a JSON Schema grammar of that layout is compiled for it; their classes are kept in
``TokenTable.standard_classes`` for the table's life (like the token table, which
``gramgen._lru.clear_all`` does not empty either). A per-tokenizer cache of the common
lexemes, made from fixed schemas: nothing of the user's schemas is kept there. The DFAs of
those lexemes are kept as well (per layout, ``automata.dfa.keep_standard``).

Exact whatever it holds: a state's classes are a function of its key alone.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..automata.dfa import keep_standard
from ..grammar.grammar import Grammar

__all__ = ["ensure_standard_classes", "STANDARD_SCHEMAS"]

#: vocabularies smaller than this are classified quickly enough on first use
MIN_VOCAB = 4096
#: most layouts with standard classes per vocabulary (each ~16 MB at 128k tokens)
MAX_LAYOUTS = 4

_VALUES = {"s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer"},
           "b": {"type": "boolean"}, "z": {"type": "null"},
           # bounded strings: the states a few characters before a maxLength (any bound:
           # their futures are alike), and the 64-character blocks of a long string's count
           "sb": {"type": "string", "maxLength": 256}, "sl": {"type": "string", "maxLength": 1024},
           "as": {"type": "array", "items": {"type": "string"}},
           "an": {"type": "array", "items": {"type": "number"}},
           "ai": {"type": "array", "items": {"type": "integer"}},
           "o": {"type": "object"}, "a": {"type": "array"}, "x": {}}
_SCALARS = ("s", "n", "i", "b", "z", "sb", "sl")

#: the schemas whose classes are kept: each kind of value as an optional property (a comma
#: or the closing brace may follow it), as a required one (a comma must follow all but the
#: last), and as array items
STANDARD_SCHEMAS: tuple[dict, ...] = (
    {"type": "object", "properties": _VALUES},
    {"type": "object", "properties": _VALUES, "required": list(_VALUES)},
    *({"type": "array", "items": _VALUES[k]} for k in _SCALARS),
)

_LOCK = threading.Lock()


def ensure_standard_classes(token_table, vocab, layout: tuple,
                            compiled_of: Callable[[Grammar], Any]) -> None:
    """Make the standard classes of ``layout`` (``Grammar.ir.meta["json_layout"]``: the
    layout options of ``Grammar.from_json_schema``) for ``vocab``'s ``token_table``, unless
    made already, being made (by this thread, through the compiles below, or another),
    the vocabulary is small, or MAX_LAYOUTS layouts have them. ``compiled_of``: a grammar
    compiled for ``vocab`` (a ``CompiledGrammar``) without precompute (which drops exits:
    not shareable). The DFAs of those grammars' lexemes are kept too
    (``automata.dfa.keep_standard``): a schema's values and punctuation that equal them are
    not built again."""
    if vocab.size < MIN_VOCAB:
        return
    with _LOCK:
        done = token_table.standard_layouts
        if layout in done or len(done) >= MAX_LAYOUTS:
            return
        done.add(layout)
    standard = token_table.standard_classes
    for schema in STANDARD_SCHEMAS:
        compiled = compiled_of(Grammar.from_json_schema(schema, **dict(layout)))
        keep_standard(compiled.ir, dict(zip(compiled.tables.lexeme_names, compiled.tables.lex_dfas)),
                      compiled.options.max_dfa_states)
        classes = compiled.classes
        for key, lexeme, state in classes.shared_states():
            if key not in standard:
                standard[key] = classes.lexeme_tokens(lexeme, state)
