"""``gramgen._lru.LRU``: the count-bounded cache of masks and exit walks."""

from __future__ import annotations

import threading

import pytest

from gramgen._lru import LRU


def test_bounded_by_count_least_recent_out_first():
    cache = LRU(3)
    for k in "abcd":
        cache.put(k, k.upper())
    assert len(cache) == 3 and "a" not in cache and cache.get("b") == "B"
    cache.put("e", "E")  # "b" was just used: "c" goes
    assert "c" not in cache and "b" in cache and "d" in cache and "e" in cache


def test_peek_leaves_the_order():
    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1
    cache.put("c", 3)  # "a" is still the oldest
    assert "a" not in cache and cache.peek("b") == 2 and cache.peek("missing") is None


def test_put_of_a_present_key_keeps_its_place():
    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)  # replaced, not made recent
    cache.put("c", 3)
    assert "a" not in cache and cache.get("b") == 2 and cache.get("c") == 3


def test_zero_keeps_nothing_and_clear():
    empty = LRU(0)
    empty.put("a", 1)
    assert len(empty) == 0 and empty.get("a") is None
    cache = LRU(4)
    cache.put("a", 1)
    cache.clear()
    assert len(cache) == 0 and cache.get("a") is None
    with pytest.raises(ValueError):
        LRU(-1)


def test_threads_share_one_bound():
    cache = LRU(64)
    errors = []

    def work(seed: int):
        try:
            for i in range(5000):
                key = (seed * 7919 + i) % 200
                if cache.get(key) is None:
                    cache.put(key, key)
                assert len(cache) <= 64 + 8  # a put in flight in each other thread at most
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 64
    assert all(cache.peek(k) == k for k in range(200) if k in cache)


def test_clear_all_empties_the_function_caches_of_compile_products():
    """A cold compile after clear_all() builds its string character classes, pattern
    automata and UTF-8 automata anew (the bench's compile times rely on it); the static
    tables (Unicode categories) stay."""
    import gramgen
    from gramgen._lru import clear_all
    from gramgen.automata import utf8
    from gramgen.grammar import regex
    from gramgen.grammar.json_schema import strings

    gramgen.Grammar.from_json_schema({"type": "string", "pattern": "^[a-zé]+x$", "maxLength": 9})
    gramgen.Grammar.from_regex("(?i)[a-zé]+ß")
    caches = [strings._json_char, strings.pattern_dfa, utf8.utf8_automaton]
    assert regex._simple_fold_closure.cache_info().currsize or regex._casefold_matches.cache_info().currsize
    assert all(f.cache_info().currsize for f in caches)
    clear_all()
    assert [f.cache_info().currsize for f in caches] == [0, 0, 0]
    assert regex._simple_fold_closure.cache_info().currsize == regex._casefold_matches.cache_info().currsize == 0
