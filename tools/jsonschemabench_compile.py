"""Compile every JSONSchemaBench dev schema (all 3,411) against one tokenizer, without walking
instances: the compile rate over the whole split, per category.

    python tools/jsonschemabench_compile.py [--tokenizer smollm2] [--time-limit 10] [--categories A,B]

A schema counts as compiled when ``Grammar.from_json_schema(schema, lenient_formats=True)``
(unknown ``format`` names as annotations, as the peers take them) and ``gramgen.compile``
both finish within the time limit; a ``SchemaError``, ``CompileLimitError`` or timeout counts
against it. ``tools/jsonschemabench_walk.py`` walks the instances of a sample.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import gramgen  # noqa: E402
from conftest import vocabulary  # noqa: E402
from jsonschemabench_walk import _alarm, _Timeout, records  # noqa: E402 - tools/ is on sys.path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", default="smollm2")
    ap.add_argument("--time-limit", type=int, default=10)
    ap.add_argument("--categories", default="", help="comma-separated category names (default: all)")
    ap.add_argument("--cold", action="store_true",
                    help="forget the automata of earlier schemas before each compile (by default equal "
                         "lexemes share one automaton across schemas, as in a long-lived process)")
    args = ap.parse_args()
    wanted = set(filter(None, args.categories.split(",")))
    vocab = vocabulary(args.tokenizer)
    signal.signal(signal.SIGALRM, _alarm)
    per: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    times: list[float] = []
    start = time.time()
    for category, rec in records(None):
        if wanted and category not in wanted:
            continue
        per[category][1] += 1
        t = time.perf_counter()
        try:
            signal.alarm(args.time_limit)
            if args.cold:
                from gramgen._lru import clear_all

                clear_all()
            gramgen.compile(gramgen.Grammar.from_json_schema(rec["schema"], lenient_formats=True), vocab)
        except (_Timeout, gramgen.GramgenError, RecursionError):
            continue
        finally:
            signal.alarm(0)
        per[category][0] += 1
        times.append(time.perf_counter() - t)
    ok, total = sum(a for a, _ in per.values()), sum(b for _, b in per.values())
    print(f"{ok}/{total} = {100 * ok / total:.1f} % compile ({args.tokenizer}, {args.time_limit} s limit"
          f"{', cold' if args.cold else ''}), "
          f"{time.time() - start:.0f} s")
    for name, (a, b) in sorted(per.items()):
        print(f"{name}: {a}/{b} ({100 * a / b:.1f} %)")
    times.sort()
    if times:
        print(f"compile p50 {1e3 * times[len(times) // 2]:.1f} ms, p90 {1e3 * times[int(len(times) * 0.9)]:.1f} ms, "
              f"p99 {1e3 * times[int(len(times) * 0.99)]:.1f} ms (schemas that compiled)")


if __name__ == "__main__":
    main()
