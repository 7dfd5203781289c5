"""Greedy ``gramgen.generate`` outputs on the end-to-end bench prompts, to compare two versions.

    python tools/greedy_outputs.py out.json                 # this checkout
    python tools/greedy_outputs.py --compare a.json b.json  # same tokens, logprobs, counts?

Each of ``bench.e2e``'s prompts (3 Lark grammars x 2 prompts, 10 JSONSchemaBench dev schemas)
is generated greedily (jump-forward on, 96 new tokens, SmolLM2 on the CPU, one torch thread),
then the first four prompts as one batch under the first grammar. A refactoring of the
generation layer must leave every token, finish reason and forced-token count as it was.
Runs from any checkout: it puts that checkout's ``src/`` first on the path.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def generate_all(out: Path) -> None:
    sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
    import torch

    import gramgen
    from bench import e2e

    torch.set_num_threads(1)
    model = gramgen.load_model("smollm2", device="cpu")
    items, _ = e2e.workloads(model, 10, 0, 2500)
    found: dict = {}
    for workload, label, prompt, make in items:
        cg = gramgen.compile(make(), model.vocab)
        r = gramgen.generate(model, prompt, grammar=cg, max_new_tokens=96)
        found[f"{workload}|{label}"] = {"tokens": r.tokens, "finish": r.finish_reason,
                                        "logprob": r.logprob, "forced": r.stats.forced_tokens,
                                        "forwards": r.stats.forward_passes}
        print(workload, label[:40], len(r.tokens), r.finish_reason, file=sys.stderr)
    cg = gramgen.compile(items[0][3](), model.vocab)
    batch = gramgen.generate(model, [p for _, _, p, _ in items[:4]], grammar=cg, max_new_tokens=60)
    found["batch"] = [r.tokens for r in batch]
    out.write_text(json.dumps(found, indent=0))


def compare(a_path: Path, b_path: Path) -> int:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    differ = 0
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if key == "batch" or x is None or y is None:
            same = x == y
        else:
            same = (x["tokens"], x["finish"], x["forced"], x["forwards"]) == \
                   (y["tokens"], y["finish"], y["forced"], y["forwards"])
            same = same and abs(x["logprob"] - y["logprob"]) < 1e-4
        differ += not same
        print(("same   " if same else "DIFFER ") + key[:70])
    print(f"{len(set(a) | set(b)) - differ} same, {differ} differ")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--compare", action="store_true", help="compare two output files")
    args = ap.parse_args()
    if args.compare:
        if len(args.paths) != 2:
            ap.error("--compare takes two files")
        return compare(*args.paths)
    generate_all(args.paths[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
