"""Masked-diffusion decoding under a grammar: validity, dead ends, check latency, overhead.

    python -m bench.diffusion                       # 1,000 runs per model x workload (hours on 2 cores)
    python -m bench.diffusion --runs 100            # a quick look (~20 min)
    python -m bench.diffusion --models guided --workloads schema --runs 50
    python -m bench.diffusion --canvas additive --runs 300      # unbounded holes

The committed results ran four processes side by side on 2 cores, then joined them:

    python -m bench.diffusion --workloads schema --runs 1000 --limit guided/schema=300 \
        --limit guided-base/schema=150 --nofit-runs 50 --out /tmp/dA1
    python -m bench.diffusion --workloads clike --models adversarial --runs 1000 --nofit-runs 50 --out /tmp/dA2
    python -m bench.diffusion --workloads clike --models random,guided,guided-base --runs 1000 \
        --limit guided/clike=300 --limit guided-base/clike=150 --nofit-runs 50 --out /tmp/dB
    python -m bench.diffusion --canvas additive --models random,adversarial --runs 300 --out /tmp/dC
    python -m bench.diffusion --combine /tmp/d{A1,A2,B,C}/diffusion.json

Models, all over the smollm2 tokenizer (no diffusion weights can be downloaded here):

* ``random``: a randomly initialised one-layer BERT masked LM (hidden 32; mask id 16,
  ``<empty_output>``), through :class:`~gramgen.generation.diffusion.TransformersDiffusionLM`;
* ``adversarial``: a scripted model whose highest logits go to EOS (most confidently at the
  first slots) and to tokens that break JSON and C (brackets, quotes, separators,
  keywords), shuffled per slot, over Gaussian noise;
* ``guided``: a stand-in for a trained model: at each slot a large logit on the token of a
  valid reference document (a random instance of the schema, or a random C-like program,
  EOS after its end), replaced by a random token at 15 % of the slots, over noise. Most
  of its proposals are valid, as a real model's mostly are: the overhead that matters.
* ``guided-base``: the same proposals over the logits of a randomly initialised masked LM
  the size of BERT-base (12 layers, hidden 768, ~124M parameters with the 49k
  vocabulary; MDLM's and SEDD's small diffusion LMs are this size) instead of noise, so
  that every forward pass costs what a small real diffusion LM's costs on this CPU: the
  overhead a user of such a model sees.

Workloads: ``schema``, a JSON Schema (an object with a string of at most 10 characters, an
integer and an enum; 24 slots, 6 steps) and ``clike``, tests/data/clike/c_like.lark (20
slots, 5 steps). Runs rotate the schedule (confidence, random, blocks of 8) and alternate
greedy and temperature 1; prompts are empty for the scripted models and 0-3 random ids
for the BERT (so greedy runs differ). ``generate_diffusion`` defaults otherwise: a byte
canvas with the witness fit test, ``max_tries=16``.

Per run: the constrained decode, then the same model, seed, prompt and schedule without a
constraint (the unconstrained loop), interleaved. Reported: valid rate (jsonschema /
lark's Earley parser, and gramgen's own recogniser), dead-end rate (runs with a dead end)
and slots grown, runs ended by EOS, checks and rejections per run, the constraint time
per committed token (p50 / p99: all the checks it took to commit it) and per check, and
the end-to-end overhead: constrained seconds / unconstrained seconds (total, and median
of per-run ratios). With ``--nofit-runs N`` the first N runs are repeated with
``fit=False`` (dead-end rate only). torch runs on one thread. Writes
``bench/results/DIFFUSION.md`` and ``bench/results/diffusion.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import gramgen  # noqa: E402
from gramgen.generation.api import target_for  # noqa: E402
from gramgen.generation.diffusion import (CallableDiffusionLM, TransformersDiffusionLM,  # noqa: E402
                                          generate_diffusion)
from gramgen.testing import accepts  # noqa: E402

SHARED = ROOT.parent / "shared"
MASK = 16   # <empty_output> in smollm2: special, not EOS
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer"},
        "color": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "age", "color"],
    "additionalProperties": False,
}
CLIKE = ROOT / "tests" / "data" / "clike" / "c_like.lark"
SCHEDULES = ("confidence", "random", "blocks")
WORKLOADS = {"schema": dict(length=24, steps=6), "clike": dict(length=20, steps=5)}
MODELS = ("random", "adversarial", "guided", "guided-base")
BAD_PIECES = ["}", "]", '"', ",", ";", "{", ")", "(", ":", "=", "\\", "}}", "]]", '",', ");", "\n",
              " while", " int", " return", " else", "#", "'", "<", "@"]
NAMES = ["x", "y", "n", "count", "total", "a", "b", "i", "value", "step"]


# -- models ------------------------------------------------------------------------------------

class Setup:
    """The tokenizer, the vocabulary and the models of one bench run."""

    def __init__(self):
        from transformers import AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / "smollm2"))
        self.vocab = gramgen.Vocabulary.from_huggingface(self.tok)
        self.eos = self.vocab.eos_token_ids[0]
        self.bad = np.array(sorted({self.encode(p)[0] for p in BAD_PIECES}))
        self._bert = None
        self._base = None

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def bert(self) -> TransformersDiffusionLM:
        if self._bert is None:
            import torch
            from transformers import BertConfig, BertForMaskedLM

            torch.manual_seed(0)
            config = BertConfig(vocab_size=len(self.tok), hidden_size=32, num_hidden_layers=1,
                                num_attention_heads=2, intermediate_size=64, max_position_embeddings=64)
            self._bert = TransformersDiffusionLM(BertForMaskedLM(config), self.vocab, tokenizer=self.tok,
                                                 mask_token_id=MASK)
        return self._bert

    def adversarial(self, seed: int) -> CallableDiffusionLM:
        rng = np.random.default_rng(seed)
        boost = rng.uniform(6.0, 14.0)
        bad, eos, size = self.bad, self.eos, self.vocab.size

        def fn(canvas):
            n = len(canvas)
            x = rng.standard_normal((n, size), dtype=np.float32)
            for i in range(n):
                x[i, rng.permutation(bad)] += 10.0 + 0.1 * np.arange(len(bad))[::-1]
                x[i, eos] += boost + 0.2 * (n - i)
            return x

        return CallableDiffusionLM(fn, self.vocab, MASK, context_length=64)

    def base(self):
        """A randomly initialised BERT-base-sized masked LM over the smollm2 tokenizer."""
        if self._base is None:
            import torch
            from transformers import BertConfig, BertForMaskedLM

            torch.manual_seed(1)
            config = BertConfig(vocab_size=len(self.tok), hidden_size=768, num_hidden_layers=12,
                                num_attention_heads=12, intermediate_size=3072, max_position_embeddings=64)
            self._base = BertForMaskedLM(config).eval()
        return self._base

    def guided(self, seed: int, reference: list[int], prompt_len: int, base: bool = False) -> CallableDiffusionLM:
        rng = np.random.default_rng(seed)
        size, eos = self.vocab.size, self.eos
        model = self.base() if base else None

        def fn(canvas):
            n = len(canvas)
            if model is None:
                x = rng.standard_normal((n, size), dtype=np.float32)
            else:
                import torch

                with torch.inference_mode():
                    out = model(input_ids=torch.tensor([canvas])).logits[0, :, :size]
                x = out.numpy().copy()
            for i in range(prompt_len, n):
                k = i - prompt_len
                want = reference[k] if k < len(reference) else eos
                if rng.random() < 0.15:
                    want = int(rng.integers(17, size))
                x[i, want] += 8.0 + rng.uniform(0.0, 2.0)
            return x

        return CallableDiffusionLM(fn, self.vocab, MASK, context_length=64)


def schema_reference(rng: np.random.Generator) -> str:
    name = "".join(rng.choice(list("abcdefghij klmnop"), size=int(rng.integers(0, 9))))
    value = {"name": name, "age": int(rng.integers(-50, 120)),
             "color": str(rng.choice(["red", "green", "blue"]))}
    return json.dumps(value)


def clike_reference(rng: np.random.Generator) -> str:
    def name():
        return str(rng.choice(NAMES))

    pieces = []
    for _ in range(int(rng.integers(1, 3))):
        if rng.random() < 0.5:
            pieces.append(f"int {name()} = {int(rng.integers(0, 100))};")
        else:
            a = name()
            pieces.append(f"int f({'int ' + a}) {{ return {a} + {int(rng.integers(1, 9))}; }}")
    return " ".join(pieces)


# -- one model x workload ----------------------------------------------------------------------

def oracle_for(workload: str):
    if workload == "schema":
        import jsonschema

        def valid(text: str) -> bool:
            try:
                jsonschema.validate(json.loads(text), SCHEMA)
                return True
            except (ValueError, jsonschema.ValidationError):
                return False
        return valid
    import lark

    parser = lark.Lark(CLIKE.read_text(), parser="earley", lexer="dynamic_complete")

    def parses(text: str) -> bool:
        try:
            parser.parse(text)
            return True
        except lark.exceptions.LarkError:
            return False
    return parses


def bench_one(setup: Setup, model_name: str, workload: str, runs: int, nofit_runs: int, canvas: str = "bytes",
              warmup: int = 3) -> dict:
    cg = (target_for(setup.vocab, schema=SCHEMA) if workload == "schema"
          else target_for(setup.vocab, lark=CLIKE.read_text())).compiled
    valid = oracle_for(workload)
    shape = WORKLOADS[workload]
    reference_of = schema_reference if workload == "schema" else clike_reference

    def decode(i: int, constrained: bool, fit: bool = True):
        rng = np.random.default_rng(10_000 + i)
        prompt: list[int] = []
        if model_name == "random":
            prompt = [int(t) for t in rng.integers(100, 40000, size=int(rng.integers(0, 4)))]
            model = setup.bert()
        elif model_name == "adversarial":
            model = setup.adversarial(i)
        else:
            model = setup.guided(i, setup.encode(reference_of(rng)), len(prompt), base=model_name == "guided-base")
        schedule = SCHEDULES[i % 3]
        return generate_diffusion(model, prompt, grammar=cg if constrained else None,
                                  length=shape["length"], steps=shape["steps"], schedule=schedule,
                                  block_size=8 if schedule == "blocks" else None,
                                  temperature=0.0 if i % 2 == 0 else 1.0, seed=i, fit=fit,
                                  canvas=canvas if constrained else None)

    for i in range(warmup):          # compile caches, first masks, torch's first calls
        decode(runs + i, True)
        decode(runs + i, False)
    rows, latencies, invalid = [], [], []
    started = time.perf_counter()
    for i in range(runs):
        r = decode(i, True)
        u = decode(i, False)
        ok = valid(r.text) and accepts(cg, r.text)
        if not ok:
            invalid.append(r.text)
        s = r.stats
        latencies += s.token_check_seconds
        rows.append(dict(valid=ok, dead_ends=s.dead_ends, completions=s.completions, grown=s.grown, shrunk=s.shrunk,
                         eos=r.finish_reason == "eos", checks=s.checks, rejections=s.rejections,
                         unfit=s.unfit, committed=s.committed, forward_passes=s.forward_passes,
                         seconds=s.seconds, constraint_seconds=s.constraint_seconds,
                         unconstrained_seconds=u.stats.seconds, tokens=len(r.tokens)))
    elapsed = time.perf_counter() - started
    nofit = []
    for i in range(min(nofit_runs, runs)):
        r = decode(i, True, fit=False)
        nofit.append(dict(valid=valid(r.text) and accepts(cg, r.text), dead_ends=r.stats.dead_ends,
                          grown=r.stats.grown, seconds=r.stats.seconds,
                          unconstrained_seconds=rows[i]["unconstrained_seconds"]))
    return dict(model=model_name, workload=workload, canvas=canvas, runs=runs, rows=rows, invalid=invalid[:20],
                token_check_seconds=[round(x, 7) for x in latencies], seconds=elapsed, nofit=nofit,
                **shape)


def summarise(res: dict) -> dict:
    rows = res["rows"]
    n = len(rows)
    lat = np.array(res["token_check_seconds"]) * 1e3
    checks = sum(r["checks"] for r in rows)
    c_sec = sum(r["seconds"] for r in rows)
    u_sec = sum(r["unconstrained_seconds"] for r in rows)
    ratios = [r["seconds"] / r["unconstrained_seconds"] for r in rows if r["unconstrained_seconds"] > 0]
    nofit = res.get("nofit") or []
    return dict(
        model=res["model"], workload=res["workload"], canvas=res.get("canvas", "bytes"), runs=n,
        valid=sum(r["valid"] for r in rows) / n,
        dead_end_runs=sum(r["dead_ends"] > 0 for r in rows) / n,
        dead_ends_per_run=sum(r["dead_ends"] for r in rows) / n,
        grown_per_run=sum(r["grown"] for r in rows) / n,
        completion_runs=sum(r.get("completions", r["dead_ends"]) > 0 for r in rows) / n,
        eos_runs=sum(r["eos"] for r in rows) / n,
        checks_per_run=checks / n,
        rejections_per_run=sum(r["rejections"] for r in rows) / n,
        committed_per_run=sum(r["committed"] for r in rows) / n,
        token_check_ms_p50=float(np.percentile(lat, 50)) if len(lat) else None,
        token_check_ms_p99=float(np.percentile(lat, 99)) if len(lat) else None,
        check_ms_mean=1e3 * sum(r["constraint_seconds"] for r in rows) / checks if checks else None,
        constrained_s_per_run=c_sec / n, unconstrained_s_per_run=u_sec / n,
        overhead_total=c_sec / u_sec if u_sec else None,
        overhead_median=float(np.median(ratios)) if ratios else None,
        constraint_share=sum(r["constraint_seconds"] for r in rows) / c_sec if c_sec else None,
        nofit_runs=len(nofit),
        nofit_valid=(sum(r["valid"] for r in nofit) / len(nofit)) if nofit else None,
        nofit_dead_end_runs=(sum(r["dead_ends"] > 0 for r in nofit) / len(nofit)) if nofit else None,
        nofit_grown_per_run=(sum(r["grown"] for r in nofit) / len(nofit)) if nofit else None,
        nofit_overhead_total=(sum(r["seconds"] for r in nofit) / sum(r["unconstrained_seconds"] for r in nofit))
        if nofit else None,
        seconds=res["seconds"],
    )


def _f(x, spec=".2f", suffix=""):
    return "—" if x is None else f"{x:{spec}}{suffix}"


def report(summaries: list[dict], meta: dict) -> str:
    lines = ["# Diffusion decoding under a grammar (smollm2 tokenizer, CPU)", "",
             f"`{meta['command']}` — {meta['date']}, {meta['machine']}; gramgen {meta['gramgen']}, "
             f"torch {meta['torch']}, transformers {meta['transformers']}, Python {meta['python']}; "
             f"commit {meta['commit']}{' with uncommitted changes under src/' if meta['dirty'] else ''}. "
             f"Wall time {meta['wall_seconds'] / 60:.1f} min. Load average before / after: "
             f"{meta['load_before']} / {meta['load_after']} (a shared machine).", "",
             "Models and workloads: see the docstring of `bench/diffusion.py`. Schema: 24 slots, 6 "
             "steps; C-like: 20 slots, 5 steps; schedules rotate (confidence, random, blocks of 8), "
             "greedy and temperature 1 alternate; byte canvas with the witness fit test (the "
             "defaults for a real vocabulary).", "",
             "| model | workload | canvas | runs | valid | dead-end runs | dead ends / run | runs completed from a witness | slots grown / run "
             "| ended by EOS | checks / run | rejections / run | constraint ms / committed token p50 | p99 "
             "| ms / check | s / run constrained | unconstrained | overhead (total) | overhead (median) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        lines.append(
            f"| {s['model']} | {s['workload']} | {s.get('canvas', 'bytes')} | {s['runs']} | {100 * s['valid']:.1f} % "
            f"| {100 * s['dead_end_runs']:.1f} % | {s['dead_ends_per_run']:.2f} "
            f"| {100 * s.get('completion_runs', s['dead_end_runs']):.1f} % | {s['grown_per_run']:.2f} "
            f"| {100 * s['eos_runs']:.0f} % | {s['checks_per_run']:.0f} | {s['rejections_per_run']:.0f} "
            f"| {_f(s['token_check_ms_p50'])} | {_f(s['token_check_ms_p99'])} | {_f(s['check_ms_mean'])} "
            f"| {s['constrained_s_per_run']:.3f} | {s['unconstrained_s_per_run']:.3f} "
            f"| {_f(s['overhead_total'])}x | {_f(s['overhead_median'])}x |")
    if any(s["nofit_runs"] for s in summaries):
        lines += ["", "Without the fit test (`fit=False`: byte holes only know that each slot holds a "
                  "byte or more), on the first runs of each row:", "",
                  "| model | workload | runs | valid | dead-end runs | slots grown / run | overhead (total) |",
                  "|---|---|---|---|---|---|---|"]
        for s in summaries:
            if s["nofit_runs"]:
                lines.append(f"| {s['model']} | {s['workload']} | {s['nofit_runs']} | "
                             f"{100 * s['nofit_valid']:.1f} % | {100 * s['nofit_dead_end_runs']:.1f} % "
                             f"| {s['nofit_grown_per_run']:.2f} | {_f(s['nofit_overhead_total'])}x |")
    lines += ["", "Reading the table:", "",
              "- *valid*: the output parses (jsonschema validates it / lark's Earley parser parses it) "
              "and gramgen's recogniser accepts it. Outputs are valid by construction: every committed "
              "canvas is feasible and a dead end is completed from a witness.",
              "- *dead-end run*: the fixed canvas could not hold a completion somewhere, and a run of "
              "masked slots was filled from the Infiller's witness (the canvas grew or shrank there). "
              "With the additive canvas (unbounded holes, the paper's semantics) filling a run from "
              "the witness is what a hole means, not a dead end: *runs completed from a witness* "
              "counts it for both canvases.",
              "- *constraint ms / committed token*: the Infiller checks (and the witness fit test) "
              "spent to commit one token, rejected candidates included.",
              "- *overhead*: seconds of the constrained decode / seconds of the same decode without a "
              "constraint (same model, seed, prompt, schedule). The first three models are tiny (a "
              "one-layer BERT, numpy noise): a forward pass costs ~10-20 ms, so the constraint's "
              "time is most of a run. `guided-base` pays a BERT-base-sized forward pass (a small "
              "real diffusion LM's cost); a 7-8B model's costs more again, and the same constraint "
              "time is a smaller share there. The `random` and `adversarial` models propose almost "
              "nothing valid (most candidates are refused); `guided` and `guided-base` stand in for "
              "a trained model.", ""]
    return "\n".join(lines)


def _git(*args: str) -> str:
    import subprocess

    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per model x workload")
    parser.add_argument("--nofit-runs", type=int, default=200, help="runs repeated with fit=False")
    parser.add_argument("--limit", action="append", default=[], metavar="MODEL/WORKLOAD=N",
                        help="fewer (or more) runs for one row, e.g. random/clike=200 (repeatable)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--canvas", choices=("bytes", "additive"), default="bytes",
                        help="the constrained decode's canvas: bytes (fixed length, the default for "
                             "a real vocabulary) or additive (unbounded holes: the canvas may grow)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--combine", nargs="+", metavar="JSON",
                        help="run nothing: write one report from the diffusion.json files of runs "
                             "made side by side (e.g. one process per workload on two cores)")
    args = parser.parse_args(argv)
    if args.combine:
        return combine([Path(p) for p in args.combine], Path(args.out))
    models, workloads = args.models.split(","), args.workloads.split(",")
    limits = {}
    for item in args.limit:
        key, _, n = item.partition("=")
        if key.count("/") != 1 or not n.isdigit():
            parser.error(f"--limit takes MODEL/WORKLOAD=N, not {item!r}")
        limits[tuple(key.split("/"))] = int(n)
    if set(models) - set(MODELS) or set(workloads) - set(WORKLOADS):
        parser.error(f"models: {', '.join(MODELS)}; workloads: {', '.join(WORKLOADS)}")
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    load_before = " ".join(f"{x:.1f}" for x in os.getloadavg())
    started = time.perf_counter()
    setup = Setup()
    results, summaries = [], []
    for workload in workloads:
        for model_name in models:
            res = bench_one(setup, model_name, workload, limits.get((model_name, workload), args.runs),
                            args.nofit_runs if args.canvas == "bytes" else 0, args.canvas)
            s = summarise(res)
            results.append(res)
            summaries.append(s)
            print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in s.items()}),
                  flush=True)
    meta = dict(command="python -m bench.diffusion " + " ".join(argv if argv is not None else sys.argv[1:]),
                date=time.strftime("%Y-%m-%d"),
                machine=f"{platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs, "
                        f"{args.threads} torch thread(s)",
                gramgen=getattr(gramgen, "__version__", "?"), torch=torch.__version__,
                transformers=transformers.__version__, python=platform.python_version(),
                commit=_git("rev-parse", "--short", "HEAD"),
                dirty=_git("status", "--porcelain", "--", "src") != "",
                wall_seconds=time.perf_counter() - started, load_before=load_before,
                load_after=" ".join(f"{x:.1f}" for x in os.getloadavg()))
    return write(Path(args.out), summaries, results, meta)


def write(out: Path, summaries: list[dict], results: list[dict], meta: dict) -> int:
    out.mkdir(parents=True, exist_ok=True)
    (out / "DIFFUSION.md").write_text(report(summaries, meta))
    # per-token latencies are summarised in the table (p50 / p99); the rows stay
    def brief(row: dict) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}

    slim = [{k: [brief(x) for x in v] if k in ("rows", "nofit") else v for k, v in r.items()
             if k != "token_check_seconds"} for r in results]
    (out / "diffusion.json").write_text(json.dumps(dict(meta=meta, summaries=summaries, results=slim)))
    print(f"wrote {out / 'DIFFUSION.md'} and {out / 'diffusion.json'} "
          f"({meta['wall_seconds'] / 60:.1f} min)")
    return 0 if all(s["valid"] == 1.0 for s in summaries) else 1


def combine(paths: list[Path], out: Path) -> int:
    """One report from runs made side by side: rows in model order within each workload;
    the commands joined; wall time the longest; load averages the extremes."""
    loaded = [json.loads(p.read_text()) for p in paths]
    pairs = [(s, r) for d in loaded for s, r in zip(d["summaries"], d["results"])]
    order = {key: i for i, key in enumerate((c, w, m) for c in ("bytes", "additive") for w in WORKLOADS
                                            for m in MODELS)}
    pairs.sort(key=lambda sr: order[(sr[0].get("canvas", "bytes"), sr[0]["workload"], sr[0]["model"])])
    metas = [d["meta"] for d in loaded]
    meta = dict(metas[0])
    meta["command"] = " & ".join(m["command"] for m in metas) + " (side by side; combined with --combine)"
    meta["wall_seconds"] = max(m["wall_seconds"] for m in metas)
    meta["dirty"] = any(m["dirty"] for m in metas)
    commits = sorted({m["commit"] for m in metas})
    if len(commits) > 1:   # other work landed meanwhile: fine if none of it touched the decoder
        core = [f"src/gramgen/{d}" for d in ("automata", "runtime", "generation", "grammar", "__init__.py")]
        changed = "\n".join(_git("diff", "--name-only", a, b, "--", *core) for a, b in zip(commits, commits[1:]))
        if changed.strip():
            raise SystemExit(f"runs from commits {commits} that differ in {changed.split()}")
        meta["commit"] = f"{', '.join(commits)} (the same src/gramgen/{{automata,runtime,generation,grammar}})"
    meta["load_before"] = " | ".join(m["load_before"] for m in metas)
    meta["load_after"] = " | ".join(m["load_after"] for m in metas)
    return write(out, [s for s, _ in pairs], [r for _, r in pairs], meta)


if __name__ == "__main__":
    raise SystemExit(main())
