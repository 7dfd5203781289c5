"""Why gramgen's slowest masks in a bench run were slow.

``python -m bench.why_slow [--results bench/results/results.json] [--workload jsonschema]
[--tokenizer llama3] [-n 10] [--max-work N] [--between LO_US HI_US]``

Each of gramgen's ``n`` slowest masks of one workload × tokenizer is replayed as the bench
made it: every cache emptied, the case compiled, its texts walked in the run's order (masks
where the run timed them) up to that step. There the mask is computed once more with its
parts timed:

* **classify**: lexeme states met for the first time, each classified against the whole
  vocabulary (which tokens stay inside the lexeme, which may end it);
* **walk**: the parser's walk of the tokens that may end a lexeme (C), with its work
  (tokens looked at, a parser step as 8: the unit of ``Matcher.fill_bitmask(max_work=)``)
  and parser steps;
* **rest**: signatures, caches, bit operations in Python.

The run's own time for the mask and the garbage collector's share of it (when the run
recorded it) come first. With ``--between LO_US HI_US``, ``n`` masks that took that long in
the run (a fixed-seed sample) instead of the slowest: what the masks around a percentile are.

With ``--max-work`` the same mask is also computed with that bound on a fresh replay, and
its time is shown (what ``Constrained(max_mask_work=...)`` would spend before drawing by
single-token checks). Timings come from this process, not the run: a replayed mask can be
faster than the bench's (the run's machine was busier) or slower (first calls).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))


def _run_args(meta: dict):
    """The bench's arguments and workload sizes of the run (from its recorded command)."""
    import dataclasses

    from bench.__main__ import _parse_args
    from bench.workloads import FULL, QUICK

    argv = shlex.split(meta["command"])
    argv = argv[argv.index("bench") + 1:] if "bench" in argv else argv[1:]
    args = _parse_args(argv)
    sizes = FULL if args.full else QUICK
    if args.schemas_per_category is not None:
        sizes = dataclasses.replace(sizes, schemas_per_category=args.schemas_per_category)
    return args, sizes


class _Parts:
    """Times the parts of masks while installed (patches two methods, restored on exit)."""

    def __init__(self):
        self.classify_s = 0.0
        self.classified = 0
        self.walk_s = 0.0
        self.work = 0
        self.steps = 0

    def __enter__(self):
        from gramgen.automata.token_classes import TokenClasses
        from gramgen.runtime.matcher import Matcher

        parts = self
        self._saved = (TokenClasses.lexeme_tokens, Matcher._native_walk)
        lexeme_tokens, native_walk = self._saved

        def timed_classes(classes, lexeme, state):
            known = (lexeme, state) in classes._lexeme_tokens
            t0 = time.perf_counter()
            try:
                return lexeme_tokens(classes, lexeme, state)
            finally:
                if not known:
                    parts.classify_s += time.perf_counter() - t0
                    parts.classified += 1

        def timed_walk(matcher, chart, far, ranks, limit=None):
            import numpy as np

            tt = matcher._cg.token_table
            t0 = time.perf_counter()
            walked = matcher._tables.native.walk_exits(chart, far, ranks, tt.blob, tt.offsets, 1, 1,
                                                       -1 if limit is None else limit)
            parts.walk_s += time.perf_counter() - t0
            if walked is None:
                return None
            parts.steps += walked[2]
            parts.work += walked[3]
            matcher._walk_work = walked[3] + (matcher._walk_work or 0)   # as Matcher._native_walk
            return np.frombuffer(walked[0], dtype=np.int32), np.frombuffer(walked[1], dtype=np.int32)

        TokenClasses.lexeme_tokens = timed_classes
        Matcher._native_walk = timed_walk
        return self

    def __exit__(self, *exc):
        from gramgen.automata.token_classes import TokenClasses
        from gramgen.runtime.matcher import Matcher

        TokenClasses.lexeme_tokens, Matcher._native_walk = self._saved


def _replay(cg_of, case, texts_in_order, ids_of, target_text: str, target_step: int):
    """A matcher at the target step, every mask before it computed as in the run."""
    import numpy as np

    from gramgen.automata import bitmask

    cg = cg_of(case)
    row = np.zeros((1, bitmask.n_words(cg.vocab_size)), dtype=np.int32)
    for text in texts_in_order:
        m = cg.matcher()
        timed = bool(text.get("mask_ns"))
        for step, tok in enumerate(ids_of(text["id"])):
            if text["id"] == target_text and step == target_step:
                return cg, m
            if timed:
                m.fill_bitmask(row)
            try:
                m.advance(tok)
            except Exception:   # noqa: BLE001 - an invalid instance stops here, as in the run
                break
    raise LookupError(f"step {target_step} of {target_text} not reached")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.why_slow", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(REPO / "bench" / "results" / "results.json"))
    ap.add_argument("--workload", default="jsonschema")
    ap.add_argument("--tokenizer", default=None, help="default: the first the run used for the workload")
    ap.add_argument("-n", type=int, default=10)
    ap.add_argument("--max-work", type=int, default=None)
    ap.add_argument("--between", type=float, nargs=2, metavar=("LO_US", "HI_US"), default=None,
                    help="a sample of the masks that took this long in the run, not the slowest")
    opts = ap.parse_args(argv)

    import numpy as np
    from transformers import AutoTokenizer

    from bench.__main__ import _tokenizer_path
    from bench.adapters import make_adapter
    from bench.report import cases, mask_gc_us, masks_between, slowest_masks
    from bench.workloads import load
    from gramgen.automata import bitmask

    results = json.loads(Path(opts.results).read_text())
    runs = [r for r in results["runs"] if r["lib"] == "gramgen" and r["workload"] == opts.workload
            and (opts.tokenizer is None or r["tokenizer"] == opts.tokenizer)]
    if not runs:
        print(f"no gramgen run of {opts.workload} in {opts.results}", file=sys.stderr)
        return 2
    run = runs[0]
    args, sizes = _run_args(results["meta"])
    workload = load(opts.workload, args, sizes)
    by_id = {c.id: c for c in workload.cases}
    tok = AutoTokenizer.from_pretrained(_tokenizer_path(run["tokenizer"]))
    run_cases = {c["id"]: c for c in cases(run)}
    # the bench's own gramgen adapter, every compile cold: each replay starts as the run's
    # case did in a cold run
    adapter = make_adapter("gramgen", {"gramgen_caches": "cold"})
    adapter.load()
    adapter.prepare(tok, _tokenizer_path(run["tokenizer"]))

    def cg_of(case):
        adapter.cold_start()
        return adapter.compile(adapter.grammar_for(case.to_job(), opts.workload))

    which = "slowest masks" if opts.between is None else f"masks of {opts.between[0]:,g}-{opts.between[1]:,g} µs"
    print(f"# gramgen's {which}: {opts.workload} × {run['tokenizer']} "
          f"({results['meta']['command'].strip()}, gramgen {results['meta']['versions'].get('gramgen_git', '?')})\n")
    head = "| run µs | run gc µs | replay µs | classify µs (new states) | walk µs | walk work | steps | rest µs |"
    head += " bounded µs |" if opts.max_work is not None else ""
    print(head + " case | step | text before the step |")
    print("|" + "---|" * (head.count("|") + 2))
    picked = slowest_masks(run, opts.n) if opts.between is None else masks_between(run, *opts.between, opts.n)
    for us, case_id, text_id, step in picked:
        case = by_id[case_id]
        texts = {t.id: t for t in case.texts}
        order = run_cases[case_id]["texts"]

        def ids_of(tid):
            return tok.encode(texts[tid].text, add_special_tokens=False)

        cg, m = _replay(cg_of, case, order, ids_of, text_id, step)
        row = np.zeros((1, bitmask.n_words(cg.vocab_size)), dtype=np.int32)
        with _Parts() as parts:
            t0 = time.perf_counter()
            m.fill_bitmask(row)
            total = time.perf_counter() - t0
        rest = total - parts.classify_s - parts.walk_s
        gc_us = mask_gc_us(run, case_id, text_id, step)
        cells = [f"{us:,.0f}", "—" if gc_us is None else f"{gc_us:,.0f}", f"{total * 1e6:,.0f}", f"{parts.classify_s * 1e6:,.0f} ({parts.classified})",
                 f"{parts.walk_s * 1e6:,.0f}", f"{parts.work:,}", f"{parts.steps:,}", f"{rest * 1e6:,.0f}"]
        if opts.max_work is not None:
            _, m2 = _replay(cg_of, case, order, ids_of, text_id, step)
            t0 = time.perf_counter()
            m2.bounded_words(opts.max_work)
            cells.append(f"{(time.perf_counter() - t0) * 1e6:,.0f}")
        before = tok.decode(ids_of(text_id)[:step])[-40:]
        cells += [case_id, str(step), "`" + " ".join(before.split()).replace("|", "/").replace("`", "'") + "`"]
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
