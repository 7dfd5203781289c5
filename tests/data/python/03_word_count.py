#!/usr/bin/env python3
# -*- coding: utf-8 -*-
"""Count words in files given on the command line."""
import sys
import re
from collections import Counter
from pathlib import Path

WORD = re.compile(r"[A-Za-z']+")


def count_words(path, *, lower=True):
    counts = Counter()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            words = WORD.findall(line.lower() if lower else line)
            counts.update(words)
    return counts


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    total = Counter()
    for name in argv:
        p = Path(name)
        if not p.exists():
            print(f"skipping {name}: no such file", file=sys.stderr)
            continue
        total += count_words(p)
    for word, n in total.most_common(10):
        print(f"{word:<20} {n:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
