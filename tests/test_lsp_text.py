"""The language server's documents: LSP positions in UTF-8/16/32 code units, line breaks
as LSP counts them, edits, the identifier before the cursor, the prompt window."""

from __future__ import annotations

import random
import re

import pytest

from gramgen.lsp.text import Document, identifier_before, prompt_start, units

CODECS = {"utf-8": ("utf-8", 1), "utf-16": ("utf-16-le", 2), "utf-32": ("utf-32-le", 4)}
#: \x0c (form feed), \x0b, \x85 and U+2028 end lines for str.splitlines, not for LSP
TEXT = ("import os\r\n\x0cdef f(café):  # 😀 a 🐍 b\n    return 'x\u2028y' + \"\x0b\x85\"\r"
        "é = 1\r\n\n\u00e9\u0301t\u00e9 = '𝔘𝔫𝔦'\n")


def oracle_position(text: str, offset: int, encoding: str) -> tuple[int, int]:
    """(line, character) of ``offset`` counted the slow way."""
    breaks = [m.end() for m in re.finditer(r"\r\n|\r|\n", text) if m.end() <= offset]
    start = breaks[-1] if breaks else 0
    codec, width = CODECS[encoding]
    return len(breaks), len(text[start:offset].encode(codec, "surrogatepass")) // width


def inside_crlf(text: str, offset: int) -> bool:
    return 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n"


def test_units_count_code_units():
    assert [units("aé😀", e) for e in ("utf-8", "utf-16", "utf-32")] == [1 + 2 + 4, 1 + 1 + 2, 3]
    assert units("plain", "utf-16") == 5


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
def test_positions_round_trip_against_the_oracle(encoding):
    doc = Document("file:///t.py", TEXT, encoding=encoding)
    assert len(doc.line_starts) == 7   # \r\n, \n, \r, \r\n, \n, \n: form feed and U+2028 are not breaks
    for offset in range(len(TEXT) + 1):
        if inside_crlf(TEXT, offset):
            continue
        position = doc.position_at(offset)
        assert position == oracle_position(TEXT, offset, encoding), offset
        assert doc.offset_at(*position) == offset


def test_positions_past_a_line_or_inside_a_character_are_clamped():
    doc = Document("file:///t.py", "a😀b\r\nxy\n")
    assert doc.offset_at(0, 99) == 3          # the end of the line, before \r\n
    assert doc.offset_at(0, 2) == 1           # inside the emoji's surrogate pair: its start
    assert doc.offset_at(0, 3) == 2           # after the emoji (two UTF-16 units)
    assert doc.offset_at(5, 0) == len(doc.text)
    assert doc.offset_at(2, 0) == len(doc.text)   # the empty line after the last break
    assert doc.position_at(4) == (0, 4)       # between \r and \n: the end of line 0
    utf8 = Document("file:///t.py", "é😀x", encoding="utf-8")
    assert utf8.offset_at(0, 1) == 0 and utf8.offset_at(0, 2) == 1 and utf8.offset_at(0, 6) == 2


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16", "utf-32"])
def test_random_edits_match_string_splicing(encoding):
    rng = random.Random(7)
    pieces = ["a", "é", "😀", "\n", "\r\n", "\r", " ", "\x0c", "\u2028", "def ", "𝔘"]
    text = "".join(rng.choice(pieces) for _ in range(60))
    doc = Document("file:///t.py", text, encoding=encoding)
    for _ in range(300):
        a, b = sorted(rng.randrange(len(text) + 1) for _ in range(2))
        if inside_crlf(text, a) or inside_crlf(text, b):
            continue
        new = "".join(rng.choice(pieces) for _ in range(rng.randrange(4)))
        start, end = doc.position_at(a), doc.position_at(b)
        doc.apply(new, (start, end) if rng.random() < 0.8 else (end, start))
        text = text[:a] + new + text[b:]
        assert doc.text == text
    doc.apply("whole new text")
    assert doc.text == "whole new text" and doc.offset_at(0, 5) == 5


def test_an_unknown_encoding_is_refused():
    with pytest.raises(ValueError, match="position encoding"):
        Document("file:///t.py", "", encoding="utf-7")


@pytest.mark.parametrize("before, typed", [
    ("obj.ap", "ap"), ("obj.", ""), ("x = 1.5", ""), ("x = café", "café"), ("f(a1", "a1"),
    ("    return", "return"), ("x = 12ab", ""), ("", ""), ("a.b_", "b_"),
])
def test_identifier_before_the_cursor(before, typed):
    assert identifier_before(before + " tail", len(before)) == typed


def test_prompt_window_starts_at_a_line_and_stays_put_while_typing():
    text = "".join(f"line_{i} = {i}\n" for i in range(2000))
    max_chars = 400
    starts = []
    for end in range(len(text) - 1000, len(text)):
        start = prompt_start(text, end, max_chars)
        assert end - start <= max_chars
        assert start == 0 or text[start - 1] == "\n"
        starts.append(start)
    # a new start at most once per max_chars // 4 characters typed
    assert len(set(starts)) <= 1000 // (max_chars // 4) + 1
    assert prompt_start(text, 300, max_chars) == 0
