"""JSON Schema coverage on JSONSchemaBench: compile each schema with gramgen, walk every
valid and invalid instance token by token (``check`` before every ``advance``) with real
tokenizers, and write per-category rates to ``bench/results/JSONSCHEMABENCH.md`` + ``.json``.

    python tools/jsonschemabench_walk.py [--per-category N] [--tokenizers smollm2,llama3] [--time-limit S]

Instances are serialized the way the compiled grammar writes JSON: compact, keys in schema
order (``tests/jsonschema_harness.order_like_schema``), raw characters. A valid instance
that is rejected is counted as an over-constraint; an invalid one that is accepted is an
under-constraint, the number that must stay 0.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import gramgen  # noqa: E402
from conftest import SHARED, hf_tokenizer, vocabulary  # noqa: E402
from gramgen.grammar.json_schema.loader import Resolver  # noqa: E402
from jsonschema_harness import compact, order_like_schema  # noqa: E402
from textgen import tokenize  # noqa: E402

BENCH = SHARED / "data" / "jsonschemabench"


class _Timeout(Exception):
    pass


def _alarm(*_):
    raise _Timeout()


def records(per_category: int | None):
    for folder in sorted(p for p in BENCH.iterdir() if p.is_dir()):
        lines = [x for x in (folder / "dev.jsonl").read_text(encoding="utf-8").split("\n") if x.strip()]
        random.Random(0).shuffle(lines)
        for line in lines[:per_category] if per_category else lines:
            yield folder.name, json.loads(line)


def walk(cg, ids: list[int], eos: int) -> bool:
    m = cg.matcher()
    for t in ids:
        if not m.check(t):
            return False
        m.advance(t)
    return m.check(eos)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-category", type=int, default=None)
    ap.add_argument("--tokenizers", default="smollm2,llama3")
    ap.add_argument("--time-limit", type=float, default=20.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    toks = {name: (vocabulary(name), hf_tokenizer(name)) for name in args.tokenizers.split(",")}
    rows: dict[str, Counter] = defaultdict(Counter)
    problems = []
    compile_s: list[float] = []
    t_start = time.time()
    for category, rec in records(args.per_category):
        c = rows[category]
        c["schemas"] += 1
        try:
            signal.setitimer(signal.ITIMER_REAL, args.time_limit)
            t0 = time.perf_counter()
            grammar = gramgen.Grammar.from_json_schema(rec["schema"])
            compiled = {name: gramgen.compile(grammar, v) for name, (v, _) in toks.items()}
            compile_s.append((time.perf_counter() - t0) / len(toks))
            signal.setitimer(signal.ITIMER_REAL, 0)
        except _Timeout:
            c["timeout"] += 1
            continue
        except (gramgen.SchemaError, gramgen.CompileLimitError):
            signal.setitimer(signal.ITIMER_REAL, 0)
            c["unsupported"] += 1
            continue
        c["compiled"] += 1
        resolver = Resolver(rec["schema"], 2020, None)
        for case in rec["tests"]:
            data = order_like_schema(case["data"], resolver.root, resolver.resolve)
            text = compact(data)
            for name, (vocab, tok) in toks.items():
                ok = walk(compiled[name], tokenize(text, tok, vocab), vocab.eos_token_ids[0])
                kind = "valid" if case["valid"] else "invalid"
                c[f"{kind}"] += 1
                c[f"{kind}_ok"] += ok == case["valid"]
                if ok and not case["valid"]:
                    problems.append((rec["id"], name, text[:200].decode("utf-8", "replace")))
    total = sum(rows.values(), Counter())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    compile_s.sort()
    summary = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "tokenizers": list(toks), "per_category": args.per_category, "seconds": round(time.time() - t_start),
               "categories": {k: dict(v) for k, v in rows.items()}, "total": dict(total),
               "under_constrained": problems,
               "compile_s_p50": compile_s[len(compile_s) // 2] if compile_s else None,
               "compile_s_p90": compile_s[int(len(compile_s) * 0.9)] if compile_s else None}
    (out / "jsonschemabench.json").write_text(json.dumps(summary, indent=1))
    lines = ["# gramgen on JSONSchemaBench (dev split)\n",
             f"`{summary['command']}` — {summary['date']}, {summary['seconds']} s, tokenizers: "
             f"{', '.join(toks)}; {'all schemas' if not args.per_category else f'{args.per_category} per category (seeded)'}; "
             f"compile limit {args.time_limit} s per schema (both tokenizers).\n",
             "Instance counts are per tokenizer walk (each instance is walked once per tokenizer).\n",
             "| category | schemas | compiled | unsupported (SchemaError / limit) | timeout | valid accepted | invalid rejected |",
             "|---|---|---|---|---|---|---|"]

    def pct(a, b):
        return f"{a}/{b} ({100 * a / b:.1f} %)" if b else "–"

    for name, c in sorted(rows.items()) + [("**total**", total)]:
        lines.append(f"| {name} | {c['schemas']} | {pct(c['compiled'], c['schemas'])} | {c['unsupported']} | "
                     f"{c['timeout']} | {pct(c['valid_ok'], c['valid'])} | {pct(c['invalid_ok'], c['invalid'])} |")
    lines.append(f"\nInvalid instances accepted (under-constraints): **{len(problems)}**.")
    lines.append(f"Compile time per schema and tokenizer: p50 {summary['compile_s_p50']:.3f} s, "
                 f"p90 {summary['compile_s_p90']:.3f} s (this machine, 2 cores).")
    (out / "JSONSCHEMABENCH.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
