"""Moved to :mod:`gramgen.automata.bitmask`; this re-export stays only while
``gramgen/__init__.py`` and ``gramgen/integrations/`` still import it from here."""

from ..automata.bitmask import allocate_token_bitmask, count, n_words, pack, set_bits, unpack, write_row

__all__ = ["allocate_token_bitmask", "count", "n_words", "pack", "set_bits", "unpack", "write_row"]
