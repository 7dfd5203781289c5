"""JSON Schema coverage on JSONSchemaBench: compile each schema with gramgen, walk every
valid and invalid instance token by token (``check`` before every ``advance``) with real
tokenizers, optionally sample random outputs, and write per-category rates to
``bench/results/JSONSCHEMABENCH.md`` + ``.json``.

    python tools/jsonschemabench_walk.py [--per-category N] [--tokenizers smollm2,llama3]
        [--time-limit S] [--generate 20] [--jobs 2]

Schemas compile with ``lenient_formats=True`` (an unknown ``format`` name is an annotation, as
the peers take it). Instances are serialized the way the compiled grammar writes JSON: compact, keys in schema
order (``tests/jsonschema_harness.order_like_schema``), raw characters. A valid instance
that is rejected is counted as an over-constraint; an invalid one that is accepted is an
under-constraint, the number that must stay 0.

``--generate N`` samples N outputs per compiling schema with the first tokenizer: at each
step a token drawn uniformly from the mask (EOS included when allowed), no model. Every
output that ends with EOS within ``--gen-max-tokens`` is parsed and validated with the
``jsonschema`` package (formats asserted with its format checker); one that fails is an
under-constraint too. Outputs still open at the token or time budget are counted apart.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

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


def _validator(schema):
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def generate(cg, vocab, n: int, max_tokens: int, time_limit: float, seed: str):
    """n outputs sampled uniformly over the mask: (completed texts, unfinished, dead ends).

    A dead end (an empty mask before EOS) would be a bug: every viable prefix continues."""
    eos = set(vocab.eos_token_ids)
    done: list[bytes] = []
    unfinished = dead = 0
    t_end = time.perf_counter() + time_limit
    for k in range(n):
        rng = random.Random(f"{seed}/{k}")
        m = cg.matcher()
        finished = False
        for _ in range(max_tokens + 1):
            if time.perf_counter() > t_end:
                break
            allowed = np.flatnonzero(m.mask())
            if not allowed.size:
                dead += 1
                break
            t = int(allowed[rng.randrange(allowed.size)])
            if t in eos:
                done.append(m.text_bytes())
                finished = True
                break
            m.advance(t)
        unfinished += not finished
    return done, unfinished - dead, dead


def _exact_multiples(schema, text: bytes) -> bool:
    """The same validation with every JSON number read as a Decimal (schema and output)."""
    from decimal import Decimal

    decimal_schema = json.loads(json.dumps(schema), parse_float=Decimal)
    return _validator(decimal_schema).is_valid(json.loads(text.decode("utf-8"), parse_float=Decimal))


_TOKS: dict = {}
_ARGS = None


def _init(args) -> None:
    global _ARGS
    _ARGS = args
    signal.signal(signal.SIGALRM, _alarm)
    for name in args.tokenizers.split(","):
        _TOKS[name] = (vocabulary(name), hf_tokenizer(name))


def run_schema(job) -> dict:
    """Everything measured on one schema (runs in a worker process)."""
    category, rec = job
    args = _ARGS
    out: dict = {"category": category, "id": rec["id"], "problems": [], "c": Counter()}
    c = out["c"]
    c["schemas"] += 1
    try:
        signal.setitimer(signal.ITIMER_REAL, args.time_limit)
        t0 = time.perf_counter()
        grammar = gramgen.Grammar.from_json_schema(rec["schema"], lenient_formats=True)
        compiled = {name: gramgen.compile(grammar, v) for name, (v, _) in _TOKS.items()}
        out["compile_s"] = (time.perf_counter() - t0) / len(_TOKS)
        signal.setitimer(signal.ITIMER_REAL, 0)
    except _Timeout:
        c["timeout"] += 1
        return out
    except (gramgen.SchemaError, gramgen.CompileLimitError, gramgen.GrammarError):
        signal.setitimer(signal.ITIMER_REAL, 0)
        c["unsupported"] += 1
        return out
    c["compiled"] += 1
    resolver = Resolver(rec["schema"], 2020, None)
    for case in rec["tests"]:
        data = order_like_schema(case["data"], resolver.root, resolver.resolve)
        text = compact(data)
        for name, (vocab, tok) in _TOKS.items():
            ok = walk(compiled[name], tokenize(text, tok, vocab), vocab.eos_token_ids[0])
            kind = "valid" if case["valid"] else "invalid"
            c[kind] += 1
            c[f"{kind}_ok"] += ok == case["valid"]
            if ok and not case["valid"]:
                out["problems"].append(("instance", rec["id"], name, text[:200].decode("utf-8", "replace")))
    if args.generate:
        name = next(iter(_TOKS))
        texts, unfinished, dead = generate(compiled[name], _TOKS[name][0], args.generate, args.gen_max_tokens,
                                           args.gen_time_limit, rec["id"])
        c["gen"] += args.generate
        c["gen_unfinished"] += unfinished
        if dead:
            out["problems"].append(("dead end", rec["id"], name, f"{dead} outputs met an empty mask"))
        try:
            validator = _validator(rec["schema"])
        except Exception:  # noqa: BLE001 - jsonschema itself cannot load this schema
            c["gen_unvalidated"] += len(texts)
            return out
        for text in texts:
            c["gen_done"] += 1
            try:
                value = json.loads(text.decode("utf-8"))
                errors = list(validator.iter_errors(value))
                if errors and all(e.validator == "multipleOf" for e in errors) and _exact_multiples(rec["schema"], text):
                    # jsonschema divides binary floats (8.53 / 0.01 is not whole there);
                    # in decimal arithmetic the number is a multiple, as the spec means
                    c["gen_float_artifact"] += 1
                    errors = []
                errors = [e.message for e in errors]
            except (ValueError, UnicodeDecodeError) as exc:
                errors = [f"not JSON: {exc}"]
            except Exception:  # noqa: BLE001 - jsonschema failed on this schema (e.g. a remote $ref)
                c["gen_unvalidated"] += 1
                continue
            if errors:
                out["problems"].append(("generated", rec["id"], name, text[:200].decode("utf-8", "replace"),
                                        errors[0][:200]))
            else:
                c["gen_valid"] += 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--per-category", type=int, default=None)
    ap.add_argument("--tokenizers", default="smollm2,llama3")
    ap.add_argument("--time-limit", type=float, default=20.0, help="compile limit per schema (all tokenizers)")
    ap.add_argument("--generate", type=int, default=0, help="random outputs per compiling schema")
    ap.add_argument("--gen-max-tokens", type=int, default=400)
    ap.add_argument("--gen-time-limit", type=float, default=20.0, help="seconds per schema for all its outputs")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    t_start = time.time()
    jobs = list(records(args.per_category))
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs, _init, (args,), maxtasksperchild=200) as pool:
            results = list(pool.imap_unordered(run_schema, jobs, chunksize=1))
    else:
        _init(args)
        results = [run_schema(j) for j in jobs]
    results.sort(key=lambda r: (r["category"], str(r["id"])))
    rows: dict[str, Counter] = defaultdict(Counter)
    problems = []
    compile_s = sorted(r["compile_s"] for r in results if "compile_s" in r)
    for r in results:
        rows[r["category"]].update(r["c"])
        problems += r["problems"]
    total = sum(rows.values(), Counter())
    write(args, rows, total, problems, compile_s, time.time() - t_start)


def write(args, rows, total, problems, compile_s, seconds) -> None:
    toks = args.tokenizers.split(",")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "tokenizers": toks, "per_category": args.per_category, "seconds": round(seconds),
               "categories": {k: dict(v) for k, v in rows.items()}, "total": dict(total),
               "under_constrained": problems,
               "compile_s_p50": compile_s[len(compile_s) // 2] if compile_s else None,
               "compile_s_p90": compile_s[int(len(compile_s) * 0.9)] if compile_s else None}
    (out / "jsonschemabench.json").write_text(json.dumps(summary, indent=1))
    scope = "all schemas" if not args.per_category else f"{args.per_category} per category (seeded)"
    lines = ["# gramgen on JSONSchemaBench (dev split)\n",
             f"`{summary['command']}` — {summary['date']}, {summary['seconds']} s, tokenizers: "
             f"{', '.join(toks)}; {scope}; compile limit {args.time_limit} s per schema (all tokenizers).\n",
             "Instance counts are per tokenizer walk (each instance is walked once per tokenizer)."]
    if args.generate:
        lines.append(f"Generated: {args.generate} outputs per compiling schema with {toks[0]}, tokens drawn "
                     f"uniformly from the mask, at most {args.gen_max_tokens} tokens and {args.gen_time_limit} s "
                     "per schema; *completed* = ended with EOS, each validated with `jsonschema` (formats "
                     "asserted by its format checker).")
    lines += ["", "| category | schemas | compiled | unsupported (SchemaError / limit) | timeout | valid accepted "
              "| invalid rejected |" + (" generated: completed | completed valid |" if args.generate else ""),
              "|---|---|---|---|---|---|---|" + ("---|---|" if args.generate else "")]

    def pct(a, b):
        return f"{a}/{b} ({100 * a / b:.1f} %)" if b else "–"

    for name, c in sorted(rows.items()) + [("**total**", total)]:
        line = (f"| {name} | {c['schemas']} | {pct(c['compiled'], c['schemas'])} | {c['unsupported']} | "
                f"{c['timeout']} | {pct(c['valid_ok'], c['valid'])} | {pct(c['invalid_ok'], c['invalid'])} |")
        if args.generate:
            line += f" {pct(c['gen_done'], c['gen'])} | {pct(c['gen_valid'], c['gen_done'] - c['gen_unvalidated'])} |"
        lines.append(line)
    n_inst = sum(1 for p in problems if p[0] == "instance")
    n_gen = sum(1 for p in problems if p[0] == "generated")
    lines.append(f"\nInvalid instances accepted (under-constraints): **{n_inst}**.")
    if args.generate:
        lines.append(f"Completed generated outputs that fail validation: **{n_gen}** "
                     f"({total['gen_unvalidated']} not validated: `jsonschema` could not evaluate the schema; "
                     f"{total['gen_float_artifact']} failed only `multipleOf` in jsonschema's binary floating point "
                     "and pass with every number read as a Decimal).")
    for p in problems[:20]:
        lines.append(f"- {p}")
    if compile_s:
        lines.append(f"Compile time per schema and tokenizer: p50 {summary['compile_s_p50']:.3f} s, "
                     f"p90 {summary['compile_s_p90']:.3f} s (this machine, 2 cores).")
    (out / "JSONSCHEMABENCH.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
