"""Samplers compared in the style of the GAD and AWRS papers, with SmolLM2-135M-Instruct.

    python -m bench.samplers                  # ~5-10 min on 2 CPU cores
    python -m bench.samplers --samples 40 --particles 8 --out bench/results
    python -m bench.samplers --report-only    # SAMPLERS.md + docs/samplers.png from the json

For GCD (masked sampling at temperature 1, sampler "constrained"), ASAp, AWRS and SMC on
two small tasks (a JSON answer object and a Lark grammar for a bounded integer answer),
each given as a chat prompt:

* mean model log-likelihood of the outputs (higher = more like what the model wants);
* KL to the exact conditional Q(w) ∝ P(w)·1[w ∈ L], which is computed by enumerating
  every token sequence of the language (all tokenisations) whose prefix probability is
  above a threshold; the mass left out is reported and bounds the error;
* constraint evaluations per generated token (a full mask = the vocabulary size);
* wall time per sample on this machine's CPU, and the model forward passes per sample
  (the device-independent cost). The enumeration fills the model's prefix cache first and
  every sampler shares it, so wall time is mostly the sampler's own work.

And AWRS's evaluations per token against full masking with the smollm2 and llama3
vocabularies on the JSON grammar, under a stated proxy model (no llama3 weights here).
Writes ``SAMPLERS.md`` and ``samplers.json`` to ``--out`` and the README's picture to
``--plot`` (default ``docs/samplers.png``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import gramgen  # noqa: E402
from gramgen.generation import (SMC, ASApTrie, ASApSampling, MatcherConstraint, SyntheticLM,  # noqa: E402
                                TransformersLM)

SHARED = ROOT.parent / "shared"

JSON_SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}},
               "required": ["answer"], "additionalProperties": False}
# the same language as JSON_SCHEMA with compact whitespace, for branches without the
# JSON Schema frontend
JSON_LARK = r'''start: "{\"answer\":" ANSWER "}"
ANSWER: "\"yes\"" | "\"no\""
'''
NUMBER_LARK = r'''start: NUMBER
NUMBER: /[1-9]?[0-9]/
'''

TASKS = [
    {"name": "json", "question": 'Is the sky blue? Reply with a JSON object {"answer": "yes"} '
                                 'or {"answer": "no"}.', "grammar": "json"},
    {"name": "lark", "question": "What is 3 + 4? Answer with a number only.",
     "grammar": NUMBER_LARK},
]
SAMPLERS = ["constrained", "asap", "awrs", "smc"]
LABEL = {"constrained": "GCD (masking)", "asap": "ASAp", "awrs": "AWRS", "smc": "SMC (AWRS)"}


def json_grammar() -> tuple[gramgen.Grammar, str]:
    try:
        return gramgen.Grammar.from_json_schema(JSON_SCHEMA, whitespace="compact"), "from_json_schema"
    except (ImportError, gramgen.GrammarError) as exc:
        if isinstance(exc, gramgen.GrammarError) and not isinstance(exc.__cause__, ImportError):
            raise
        return gramgen.Grammar.from_lark(JSON_LARK), "Lark text (the schema's language; "\
            "no JSON Schema frontend on this branch)"


def enumerate_pruned(lm, cg, prompt: list[int], min_prob: float = 1e-9, max_nodes: int = 400):
    """Every token sequence of the language whose prefixes all have model probability
    >= ``min_prob`` (best first), with P(w), the masked-sampling probability and the mass
    of the pruned prefixes (an upper bound on the Z left out)."""
    import heapq

    eos = set(lm.vocab.eos_token_ids)
    words, logps, gcds = [], [], []
    pruned = 0.0
    heap = [(-0.0, 0, (), 1.0)]
    counter = 1
    nodes = 0
    while heap:
        neg, _, prefix, gcd = heapq.heappop(heap)
        logp = -neg
        if math.exp(logp) < min_prob or nodes >= max_nodes:
            pruned += math.exp(logp)
            continue
        nodes += 1
        m = cg.matcher()
        m.advance_many(prefix)
        allowed = np.flatnonzero(m.mask())
        row = lm.next_logprobs([prompt + list(prefix)])[0]
        local = float(np.logaddexp.reduce(row[allowed]))
        for t in allowed.tolist():
            g = gcd * math.exp(row[t] - local)
            if t in eos:
                words.append(prefix + (t,))
                logps.append(logp + float(row[t]))
                gcds.append(g)
            else:
                heapq.heappush(heap, (-(logp + float(row[t])), counter, prefix + (t,), g))
                counter += 1
    logps = np.array(logps)
    return {"words": words, "logp": logps, "gcd": np.array(gcds), "pruned_mass": pruned,
            "nodes": nodes, "log_z": float(np.logaddexp.reduce(logps))}


def kl(p: np.ndarray, q: np.ndarray) -> float:
    m = p > 0
    return float(np.sum(p[m] * (np.log(p[m]) - np.log(q[m]))))


def empirical_kl(samples: list[tuple[int, ...]], exact) -> tuple[float, float]:
    """KL(empirical || Q) over the enumerated words (add-1e-9), and the fraction of samples
    outside the enumerated set (pruned words: excluded from the KL)."""
    index = {w: i for i, w in enumerate(exact["words"])}
    counts = np.full(len(index), 1e-9)
    outside = 0
    for s in samples:
        if s in index:
            counts[index[s]] += 1
        else:
            outside += 1
    q = np.exp(exact["logp"] - exact["log_z"])
    return kl(counts / counts.sum(), q), outside / max(1, len(samples))


def exact_sampler_kl(log_q: np.ndarray, n: int, reps: int = 200) -> float:
    """Mean KL(empirical || Q) of n samples drawn exactly from Q: the floor any sampler's
    empirical KL is compared with at this sample size."""
    q = np.exp(log_q - np.logaddexp.reduce(log_q))
    rng = np.random.default_rng(0)
    out = []
    for _ in range(reps):
        counts = rng.multinomial(n, q) + 1e-9
        out.append(kl(counts / counts.sum(), q))
    return float(np.mean(out))


def asap_next_kl(asap: ASApTrie, lm, cg, prompt, exact) -> float:
    """Exact KL(distribution of ASAp's next sample || Q), over the enumerated words."""
    cache: dict = {}

    def local(prefix):
        if prefix not in cache:
            dist = asap.next_token_distribution(prefix)
            if dist is None:
                m = cg.matcher()
                m.advance_many(prefix)
                allowed = np.flatnonzero(m.mask())
                p = np.exp(lm.next_logprobs([prompt + list(prefix)])[0][allowed])
                dist = (allowed, p / p.sum())
            cache[prefix] = dict(zip(dist[0].tolist(), dist[1].tolist()))
        return cache[prefix]

    probs = np.array([math.prod(local(w[:j]).get(t, 0.0) for j, t in enumerate(w))
                      for w in exact["words"]])
    q = np.exp(exact["logp"] - exact["log_z"])
    return kl(probs / probs.sum(), q)


def run_task(task, lm, tok, args) -> dict:
    if task["grammar"] == "json":
        grammar, how = json_grammar()
    else:
        grammar, how = gramgen.Grammar.from_lark(task["grammar"]), "lark"
    cg = gramgen.compile(grammar, lm.vocab)
    prompt = tok.apply_chat_template([{"role": "user", "content": task["question"]}],
                                     add_generation_prompt=True)
    if not isinstance(prompt, list):
        prompt = prompt["input_ids"]
    prompt = list(prompt)
    t0 = time.perf_counter()
    exact = enumerate_pruned(lm, cg, prompt)
    q = np.exp(exact["logp"] - exact["log_z"])
    out = {"task": task["name"], "grammar_source": how, "question": task["question"],
           "exact": {"words": len(exact["words"]), "log_z": exact["log_z"],
                     "pruned_mass": exact["pruned_mass"], "nodes": exact["nodes"],
                     "seconds": time.perf_counter() - t0,
                     "mean_logprob": float(np.sum(q * exact["logp"])),
                     "kl_gcd_exact": kl(exact["gcd"] / exact["gcd"].sum(), q),
                     "kl_floor": exact_sampler_kl(exact["logp"], args.samples),
                     "top": [(tok.decode(list(w[:-1])), float(qq))
                             for w, qq in sorted(zip(exact["words"], q), key=lambda x: -x[1])[:5]]},
           "samplers": {}}
    for name in SAMPLERS:
        asap = None
        extra: dict = {"sampler": name}
        if name == "constrained":
            extra["temperature"] = 1.0
        if name == "asap":
            asap = ASApTrie(lm, cg, prompt, max_new_tokens=args.max_new_tokens, seed=0)
            extra["sampler"] = ASApSampling(trie=asap)
        if name == "smc":
            extra["sampler"] = SMC(num_particles=args.particles)
        rows = []
        forwards = lm.forward_passes
        t1 = time.perf_counter()
        for i in range(args.samples):
            r = gramgen.generate(lm, prompt, grammar=cg, max_new_tokens=args.max_new_tokens,
                                 seed=i, **extra)
            rows.append(r)
        wall = time.perf_counter() - t1
        eos = lm.vocab.eos_token_ids[0]
        samples = [tuple(r.tokens) + (eos if r.eos_token is None else r.eos_token,) for r in rows]
        n_tokens = sum(len(w) for w in samples)   # EOS included
        # the model's log P(output): generate reports GCD's under its masked distribution
        logps = [_model_logprob(lm, prompt, w) if name == "constrained" else r.logprob
                 for w, r in zip(samples, rows)]
        emp_kl, outside = empirical_kl(samples, exact)
        res = {
            "samples": len(rows), "complete": sum(r.complete for r in rows),
            "mean_logprob": float(np.mean(logps)),
            "kl_empirical": emp_kl, "outside_enumeration": outside,
            "evaluations_per_token": sum(r.extras["constraint_evaluations"] for r in rows) / n_tokens,
            "seconds_per_sample": wall / len(rows),
            "forward_passes_per_sample": (lm.forward_passes - forwards) / len(rows),
            "texts": [tok.decode([t for t in s if t not in lm.vocab.eos_token_ids]) for s in samples],
        }
        if name in ("constrained", "awrs"):  # AWRS draws from the same local distribution
            res["kl_exact"] = out["exact"]["kl_gcd_exact"]
        if name == "asap":
            res["kl_exact_next"] = asap_next_kl(asap, lm, cg, prompt, exact)
            res["trie_nodes"] = asap.num_nodes
        if name == "smc":
            lml = np.array([r.extras["log_ml"] for r in rows])
            res["log_ml_mean"] = float(np.logaddexp.reduce(lml) - math.log(len(lml)))
            res["tokens_proposed_per_sample"] = float(np.mean([r.extras["tokens_proposed"] for r in rows]))
        out["samplers"][name] = res
        print(f"  {task['name']:5s} {name:12s} logp {res['mean_logprob']:8.3f}  "
              f"KL_emp {emp_kl:6.3f}  evals/tok {res['evaluations_per_token']:9.1f}  "
              f"{res['seconds_per_sample']:.2f} s/sample", flush=True)
    return out


def _model_logprob(lm, prompt: list[int], word: tuple[int, ...]) -> float:
    """log P(word | prompt) under the model (its contexts are mostly in the memo)."""
    rows = lm.next_logprobs([list(prompt) + list(word[:i]) for i in range(len(word))])
    return float(sum(row[t] for row, t in zip(rows, word)))


def proxy_evaluations(texts: list[str], eps: float = 0.1) -> list[dict]:
    """AWRS evaluations per token on the JSON grammar with the smollm2 and llama3
    vocabularies. No llama3 weights here, so the model is a stated proxy: it puts 1 - eps
    on the next token of a reference answer (canonical tokenisation) and eps spread
    uniformly over the vocabulary, i.e. a model that mostly agrees with the grammar."""
    from transformers import AutoTokenizer

    grammar, _ = json_grammar()
    rows = []
    for name in ("smollm2", "llama3"):
        tok = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / name))
        vocab = gramgen.Vocabulary.from_huggingface(tok)
        cg = gramgen.compile(grammar, vocab)
        eos = vocab.eos_token_ids[0]
        evals = tokens = 0
        t0 = time.perf_counter()
        for i, text in enumerate(texts):
            ref = tok.encode(text, add_special_tokens=False) + [eos]

            def logits(ctx, ref=ref):
                out = np.full(vocab.size, math.log(eps / vocab.size))
                pos = len(ctx) - 1
                if pos < len(ref):
                    out[ref[pos]] = np.logaddexp(out[ref[pos]], math.log(1 - eps))
                return out

            lm = SyntheticLM(vocab, logits)
            r = gramgen.generate(lm, [0], constraint=MatcherConstraint(cg.matcher()),
                                 sampler="awrs", max_new_tokens=64, seed=i)
            evals += r.extras["constraint_evaluations"]
            tokens += len(r.tokens) + (r.eos_token is not None)   # EOS counts as a draw
        per = evals / tokens
        rows.append({"vocab": name, "size": vocab.size, "awrs_evaluations_per_token": per,
                     "mask_evaluations_per_token": vocab.size, "ratio": vocab.size / per,
                     "texts": len(texts), "seconds": time.perf_counter() - t0})
        print(f"  proxy {name}: AWRS {per:.2f} evals/token vs {vocab.size} (x{vocab.size / per:.0f})",
              flush=True)
    return rows


def write_report(result: dict, out: Path) -> None:
    lines = ["# Samplers: GCD, ASAp, AWRS, SMC with SmolLM2-135M-Instruct", "",
             f"Command: `{result['meta']['command']}`  ",
             f"Date: {result['meta']['date']}; machine: {result['meta']['machine']}; "
             f"{result['meta']['samples']} samples per sampler, SMC with "
             f"{result['meta']['particles']} particles, max_new_tokens "
             f"{result['meta']['max_new_tokens']}; total {result['meta']['seconds']:.0f} s.", ""]
    for task in result["tasks"]:
        ex = task["exact"]
        lines += [f"## Task `{task['task']}`: {task['question']}", "",
                  f"Grammar: {task['grammar_source']}. Exact target by enumeration: "
                  f"{ex['words']} token sequences, {ex['nodes']} prefixes expanded, "
                  f"Z = P(output in L) = {math.exp(ex['log_z']):.3g}, mass left out "
                  f"<= {ex['pruned_mass']:.2g}. E_Q[log P] = {ex['mean_logprob']:.3f}. "
                  "Most likely under Q: " + ", ".join(f"`{t}` {p:.3f}" for t, p in ex["top"]) + ".", "",
                  "| sampler | mean log P(output) | KL(empirical ‖ Q) | exact KL(sampler ‖ Q) | "
                  "evaluations / token | forward passes / sample | s / sample |",
                  "|---|---|---|---|---|---|---|"]
        for name in SAMPLERS:
            r = task["samplers"][name]
            if "kl_exact" in r:
                exact_kl = f"{r['kl_exact']:.3f}"
            elif "kl_exact_next" in r:
                exact_kl = f"{r['kl_exact_next']:.3f} (next sample, after {r['samples']})"
            else:
                exact_kl = "n/a"
            lines.append(f"| {LABEL[name]} | {r['mean_logprob']:.3f} | {r['kl_empirical']:.3f} | "
                         f"{exact_kl} | {r['evaluations_per_token']:.1f} | "
                         f"{r['forward_passes_per_sample']:.1f} | {r['seconds_per_sample']:.2f} |")
        smc = task["samplers"]["smc"]
        lines += ["", f"SMC's estimate of log Z (mean of Ẑ over its runs): {smc['log_ml_mean']:.3f} "
                      f"vs exact {ex['log_z']:.3f}. An exact sampler's empirical KL at this "
                      f"sample size is {ex['kl_floor']:.3f} on average (the floor).", ""]
    lines += ["## Constraint evaluations per token: AWRS vs a full mask", "",
              "JSON grammar; proxy model: 90% on the next token of a reference answer, 10% "
              "uniform over the vocabulary (no llama3 weights on this machine).", "",
              "| vocabulary | size | AWRS evaluations / token | full mask | ratio |",
              "|---|---|---|---|---|"]
    for r in result["proxy"]:
        lines.append(f"| {r['vocab']} | {r['size']} | {r['awrs_evaluations_per_token']:.2f} | "
                     f"{r['mask_evaluations_per_token']} | {r['ratio']:.0f}x |")
    lines += ["", "Notes: AWRS drops, unchecked, the tokens the grammar can never accept in the "
              "state (bytes outside its alphabet, a first byte that cannot come next), checks "
              "the others one by one and, on a step that has checked and rejected 32, "
              "computes the full mask once and finishes the same draw from it (e.g. where the "
              "grammar forces an EOS the model finds unlikely); such steps count a whole "
              "vocabulary of evaluations. AWRS alone samples the same local distribution as GCD (its exact KL "
              "is GCD's); its weights are what SMC uses to correct the bias. ASAp's samples "
              "are not independent; its exact KL is that of the next sample given the trie. "
              "Wall times are on a shared CPU; model forwards mostly come from the prefix "
              "cache the enumeration filled (uncached forwards are in samplers.json), so they "
              "measure the samplers' own work; 'forward passes / sample' counts the model "
              "forward passes a sample needs (ASAp needs them only for new trie nodes)."]
    (out / "SAMPLERS.md").write_text("\n".join(lines) + "\n")


def plot(result: dict, path: Path) -> None:
    """docs/samplers.png: what each sampler costs (constraint evaluations per token) and how
    far its outputs are from the exact conditional (empirical KL), per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    width = 0.38
    x = np.arange(len(SAMPLERS))
    for k, task in enumerate(result["tasks"]):
        rs = [task["samplers"][n] for n in SAMPLERS]
        off = (k - 0.5) * width
        axes[0].bar(x + off, [r["kl_empirical"] for r in rs], width, label=task["task"])
        axes[1].bar(x + off, [r["mean_logprob"] for r in rs], width, label=task["task"])
        axes[2].bar(x + off, [r["evaluations_per_token"] for r in rs], width, label=task["task"])
        axes[0].axhline(task["exact"]["kl_floor"], color=f"C{k}", ls=":", lw=1)
        axes[1].axhline(task["exact"]["mean_logprob"], color=f"C{k}", ls=":", lw=1)
    axes[0].set_title("KL(samples ‖ exact conditional)\n(dotted: floor of an exact sampler)")
    axes[1].set_title("mean log P(output)\n(dotted: E under the exact conditional)")
    axes[2].set_title("constraint evaluations / token\n(full mask = vocabulary size)")
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xticks(x, [LABEL[n] for n in SAMPLERS], fontsize=8)
        ax.legend(fontsize=8)
    fig.suptitle(f"SmolLM2-135M, {result['meta']['samples']} samples per sampler "
                 f"(SMC: {result['meta']['particles']} particles)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--particles", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--plot", default=str(ROOT / "docs" / "samplers.png"))
    ap.add_argument("--report-only", action="store_true",
                    help="rebuild SAMPLERS.md and the picture from samplers.json")
    args = ap.parse_args(argv)
    if args.report_only:
        result = json.loads((Path(args.out) / "samplers.json").read_text())
        write_report(result, Path(args.out))
        plot(result, Path(args.plot))
        return
    import torch

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model = gramgen.load_model("smollm2", device="cpu")
    tok = model.tokenizer
    lm = TransformersLM(model.hf_model, gramgen.Vocabulary.from_huggingface(tok), memo_size=400)
    tasks = []
    for task in TASKS:
        print(f"task {task['name']}", flush=True)
        tasks.append(run_task(task, lm, tok, args))
    texts = sorted(set(tasks[0]["samplers"]["constrained"]["texts"]
                       + tasks[0]["samplers"]["smc"]["texts"]))
    proxy = proxy_evaluations(texts)
    result = {"meta": {"command": "python -m bench.samplers " + " ".join(argv or sys.argv[1:]),
                       "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                       "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {args.threads}",
                       "samples": args.samples, "particles": args.particles,
                       "max_new_tokens": args.max_new_tokens,
                       "seconds": time.perf_counter() - t0},
              "tasks": tasks, "proxy": proxy}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "samplers.json").write_text(json.dumps(result, indent=1))
    write_report(result, out)
    plot(result, Path(args.plot))
    print(f"wrote {out / 'SAMPLERS.md'} ({result['meta']['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
