"""End-to-end generation speed: constrained vs unconstrained greedy decoding with SmolLM2.

    python -m bench.e2e                  # lark grammars + 10 JSONSchemaBench dev schemas
    python -m bench.e2e --schemas 0      # lark grammars only
    python -m bench.e2e --threads 2 --max-new-tokens 96

For every prompt, in one run and one process, the generation loop
(``gramgen.generation.run`` with greedy masked sampling, batch 1) runs three ways:

* ``free``: no grammar, capped at the number of tokens the constrained run produced;
* ``masked``: the grammar's mask applied at every step, jump-forward off;
* ``jump``: the mask plus jump-forward (tokens that are the only allowed one are emitted
  without sampling, a run of them fed in one forward pass).

Each grammar is compiled afresh (outside the timer) for ``masked`` and for ``jump``, so both
pay for first-time masks. Reported: tokens/s by wall clock and by process CPU time (the
machine may be shared), the masking overhead ``free / masked - 1`` per token, the time
spent computing masks, and the forward passes jump-forward saves. Writes
``bench/results/E2E.md`` and ``bench/results/e2e.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import gramgen  # noqa: E402
from gramgen.grammar.sources import builtin_grammar_text  # noqa: E402
from gramgen.generation import Constrained, MatcherConstraint, Sequence, run  # noqa: E402
from gramgen.generation.samplers import MaskedSampler  # noqa: E402

SHARED = ROOT.parent / "shared"

LARK = {
    "person": (r"""
start: "{\"name\":" STR ",\"age\":" INT ",\"city\":" STR ",\"languages\":[" STR ("," STR)? ("," STR)? "]}"
STR: /"[A-Za-z ]{1,24}"/
INT: /[1-9][0-9]{0,2}/
""", ["Describe Ada Lovelace as JSON.", "Describe a fictional engineer from Oslo as JSON."]),
    "json": (builtin_grammar_text("json"),
             ["Give a JSON object describing a book.", "Give a JSON list of three planets with their sizes."]),
    "sql": (builtin_grammar_text("sql"),
            ["Table users(id, name, age). Write one SQL query for the names of users older than 30.",
             "Table items(id, price). Write one SQL query for the ten most expensive items."]),
}


def _run(model, prompt_ids, compiled, max_new_tokens, jump_forward):
    seq = Sequence(list(prompt_ids), None if compiled is None else MatcherConstraint(compiled.matcher()))
    sampler = MaskedSampler(Constrained(jump_forward=jump_forward), model.vocab)
    # cold: without this the model's memo of scored contexts and the rows the last call
    # left answer a repeated run (and the other modes' identical prefixes) with no forward
    model.forget()
    w0, c0 = time.perf_counter(), time.process_time()
    (seq,) = run(model, [seq], sampler, max_new_tokens=max_new_tokens)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {"tokens": len(seq.tokens), "forwards": seq.stats.forward_passes,
            "forced": seq.stats.forced_tokens, "finish": seq.finish, "wall": wall, "cpu": cpu,
            "mask_seconds": seq.stats.mask_seconds}


def _dev_schemas(n: int, seed: int, max_chars: int) -> list[dict]:
    rows = []
    for path in sorted((SHARED / "data" / "jsonschemabench").glob("*/dev.jsonl")):
        rows.extend(json.loads(line) for line in path.read_text(encoding="utf-8").split("\n")
                    if line.strip())
    rows = [r for r in rows if len(json.dumps(r["schema"])) <= max_chars]
    return random.Random(seed).sample(rows, len(rows))


def workloads(model, n_schemas: int, seed: int, max_chars: int):
    """(workload, label, prompt, grammar factory) items; schemas that fail to compile are
    counted, not timed."""
    items, notes = [], []
    for name, (text, prompts) in LARK.items():
        for prompt in prompts:
            items.append(("lark:" + name, prompt[:40], prompt, lambda t=text: gramgen.Grammar.from_lark(t)))
    if n_schemas:
        tried = failed = 0
        for entry in _dev_schemas(10 * n_schemas, seed, max_chars):
            if tried - failed >= n_schemas:
                break
            tried += 1
            try:
                gramgen.Grammar.from_json_schema(entry["schema"])
            except gramgen.GramgenError as exc:
                failed += 1
                if "not available" in str(exc):
                    notes.append(f"JSON Schema workload skipped: {exc}")
                    break
                continue
            prompt = ("Give an example JSON value for this schema:\n" + json.dumps(entry["schema"])[:400])
            items.append(("schema", entry["id"], prompt,
                          lambda s=entry["schema"]: gramgen.Grammar.from_json_schema(s)))
        notes.append(f"dev schemas: {tried - failed} compiled of {tried} tried (seed {seed}, "
                     f"schemas of at most {max_chars} characters)")
    return items, notes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--schemas", type=int, default=10, help="dev schemas to run (0: none)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-schema-chars", type=int, default=2500,
                        help="draw dev schemas of at most this many characters (compile time)")
    parser.add_argument("--reps", type=int, default=2,
                        help="runs per mode and prompt; the one with the least CPU time is kept")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    model = gramgen.load_model("smollm2", device="cpu")
    items, notes = workloads(model, args.schemas, args.seed, args.max_schema_chars)
    # warm-up: first forward passes of a process are slower
    _run(model, model.prompt_ids("Hello"), None, 8, jump_forward=False)

    records = []
    for workload, label, prompt, make in items:
        ids = model.prompt_ids(prompt)
        grammar = make()
        best: dict[str, dict] = {}
        for _ in range(args.reps):   # modes interleaved, so load changes hit them alike
            t0 = time.perf_counter()
            cg_masked = gramgen.compile(grammar, model.vocab)   # fresh: first-time masks count
            compile_s = time.perf_counter() - t0
            cg_jump = gramgen.compile(grammar, model.vocab)
            runs = {"masked": _run(model, ids, cg_masked, args.max_new_tokens, jump_forward=False),
                    "jump": _run(model, ids, cg_jump, args.max_new_tokens, jump_forward=True)}
            runs["free"] = _run(model, ids, None, max(runs["masked"]["tokens"], 1), jump_forward=False)
            for mode, run in runs.items():
                if mode not in best or run["cpu"] < best[mode]["cpu"]:
                    best[mode] = run
        free, masked, jump = best["free"], best["masked"], best["jump"]
        records.append({"workload": workload, "label": label, "prompt_tokens": len(ids),
                        "compile_seconds": compile_s, "free": free, "masked": masked, "jump": jump})
        print(f"{workload:12s} {label[:34]:34s} tokens {masked['tokens']:3d}  "
              f"free {free['tokens'] / free['wall']:6.1f} tok/s  masked {masked['tokens'] / masked['wall']:6.1f}"
              f"  jump {jump['tokens'] / jump['wall']:6.1f}  forwards {masked['forwards']}->{jump['forwards']}",
              file=sys.stderr)

    summary = summarize(records)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "command": "python -m bench.e2e " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": f"{platform.processor() or platform.machine()}, {__import__('os').cpu_count()} CPUs",
            "torch": torch.__version__, "threads": args.threads, "max_new_tokens": args.max_new_tokens,
            "reps": args.reps,
            "notes": notes}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "e2e.json").write_text(json.dumps({"meta": meta, "summary": summary, "records": records}, indent=1))
    (out / "E2E.md").write_text(report(meta, summary, records))
    print((out / "E2E.md").read_text())
    return 0


def _rate(runs, mode, clock):
    tokens = sum(r[mode]["tokens"] for r in runs)
    seconds = sum(r[mode][clock] for r in runs)
    return tokens / seconds if seconds else float("nan")


def summarize(records):
    groups = {}
    for r in records:
        groups.setdefault(r["workload"].split(":")[0], []).append(r)
    groups["all"] = records
    summary = {}
    for name, runs in groups.items():
        s = {"prompts": len(runs)}
        for clock in ("wall", "cpu"):
            for mode in ("free", "masked", "jump"):
                s[f"{mode}_tok_s_{clock}"] = _rate(runs, mode, clock)
            s[f"mask_overhead_{clock}"] = s[f"free_tok_s_{clock}"] / s[f"masked_tok_s_{clock}"] - 1
            s[f"jump_speedup_{clock}"] = s[f"jump_tok_s_{clock}"] / s[f"free_tok_s_{clock}"] - 1
        per_token = [((r["masked"]["cpu"] / r["masked"]["tokens"])
                       / (r["free"]["cpu"] / r["free"]["tokens"]) - 1)
                      for r in runs if r["masked"]["tokens"] and r["free"]["tokens"]]
        s["per_prompt_overhead_cpu_median"] = statistics.median(per_token) if per_token else float("nan")
        s["mask_share_masked"] = sum(r["masked"]["mask_seconds"] for r in runs) / sum(r["masked"]["wall"] for r in runs)
        s["forwards_masked"] = sum(r["masked"]["forwards"] for r in runs)
        s["forwards_jump"] = sum(r["jump"]["forwards"] for r in runs)
        s["forced_tokens"] = sum(r["jump"]["forced"] for r in runs)
        s["tokens_jump"] = sum(r["jump"]["tokens"] for r in runs)
        summary[name] = s
    return summary


def report(meta, summary, records) -> str:
    lines = ["# End-to-end generation: constrained vs unconstrained (SmolLM2-135M, CPU)", "",
             f"`{meta['command']}` — {meta['date']}, {meta['machine']}, torch {meta['torch']}, "
             f"{meta['threads']} thread(s), greedy, batch 1, max_new_tokens {meta['max_new_tokens']}, "
             f"best of {meta['reps']} runs per mode (least CPU time).", ""]
    lines += [f"- {n}" for n in meta["notes"]]
    lines += ["", "Tokens/s (wall clock, then process CPU time). `free`: no grammar; `masked`: grammar"
              " mask every step, no jump-forward; `jump`: mask + jump-forward. Overhead = free/masked − 1"
              " per token (target ≤ 5 %).", "",
              "| workload | prompts | free | masked | jump | mask overhead (wall / cpu) | median per-prompt overhead (cpu) | mask time share | forwards masked → jump | forced tokens |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {s['prompts']} | {s['free_tok_s_wall']:.1f} / {s['free_tok_s_cpu']:.1f} "
            f"| {s['masked_tok_s_wall']:.1f} / {s['masked_tok_s_cpu']:.1f} "
            f"| {s['jump_tok_s_wall']:.1f} / {s['jump_tok_s_cpu']:.1f} "
            f"| {100 * s['mask_overhead_wall']:+.1f} % / {100 * s['mask_overhead_cpu']:+.1f} % "
            f"| {100 * s['per_prompt_overhead_cpu_median']:+.1f} % "
            f"| {100 * s['mask_share_masked']:.1f} % "
            f"| {s['forwards_masked']} → {s['forwards_jump']} "
            f"({100 * (1 - s['forwards_jump'] / max(s['forwards_masked'], 1)):.0f} % saved) "
            f"| {s['forced_tokens']} of {s['tokens_jump']} |")
    lines += ["", "## Per prompt", "",
              "| workload | prompt | tokens (free / masked / jump) | finish (masked) | ms/token free | ms/token masked | ms/token jump | mask ms (masked) | forwards masked → jump | compile s |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        f, m, j = r["free"], r["masked"], r["jump"]
        lines.append(
            f"| {r['workload']} | {r['label'][:40]} | {f['tokens']} / {m['tokens']} / {j['tokens']} | {m['finish']} "
            f"| {1e3 * f['wall'] / max(f['tokens'], 1):.1f} | {1e3 * m['wall'] / max(m['tokens'], 1):.1f} "
            f"| {1e3 * j['wall'] / max(j['tokens'], 1):.1f} | {1e3 * m['mask_seconds']:.0f} "
            f"| {m['forwards']} → {j['forwards']} | {r['compile_seconds']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
