"""Speculative decoding under a grammar: target forward passes, acceptance and tokens/s.

    python -m bench.speculative                     # 6 documents, 2 code prompts (~15 min on 2 cores)
    python -m bench.speculative --quick             # 3 documents, 1 code prompt, fewer tokens
    python -m bench.speculative --limit 30 --draft-layers 24 --configs plain,prompt_lookup

Two workloads, SmolLM2-135M-Instruct on the CPU (``gramgen.load_model("smollm2")``):

* ``extraction``: JSON extraction from the documents of ``bench/data/extraction/`` with the
  "keys" prompt of ``bench/extraction.py`` (copy-heavy: values are copied from the document),
  each under its schema as ``generate(schema=...)`` compiles it by default;
* ``code``: Python completion. The prompt is the start of a file (helpers defined, then a
  comment saying what comes next; ``chat=False``); the output is constrained by
  ``Grammar.builtin("python_subset")`` (the context-free subset: its results predate lark's python.lark as ``python``), which parses the output on its own, so each prompt ends at
  a statement boundary and the output is whole top-level statements that use the names
  defined above.

gramgen configurations: ``plain`` (no speculation), ``prompt_lookup``, ``forced``, ``draft``
(a draft model), ``forced+prompt_lookup``, ``forced+draft``, each greedy and sampled
(temperature 0.7, one fixed seed per prompt, the same for every configuration). The draft
model is a layer-skip self-draft: SmolLM2 truncated to its first N decoder layers (same
tokenizer); N is picked by a short sweep on extraction documents (the N whose draft made the
most tokens per CPU-second; every N's acceptance is reported) unless ``--draft-layers`` names it.

transformers' own assisted generation, greedy, on the same prompt ids and token budget:
``hf`` (plain ``generate``), ``hf+prompt_lookup`` (``prompt_lookup_num_tokens=``), and both
with gramgen's ``LogitsProcessor`` on the same compiled grammar (``hf+gramgen``,
``hf+prompt_lookup+gramgen``); its forward passes are counted by wrapping the model's
``forward``.

Every call starts cold: the model's memo of scored contexts and its parked KV rows are
dropped first, so no configuration reuses forward passes of the one before (on the same
prompt). Configurations run interleaved per prompt, in an order rotated from prompt to
prompt, after one untimed warm-up call each per workload. Tokens exclude a final EOS; forward
passes include the prefill. Writes ``bench/results/SPECULATIVE.md`` and
``bench/results/speculative.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import gramgen  # noqa: E402
from bench.extraction import DATA, SCHEMAS, load_documents, prompt_for  # noqa: E402

CONFIGS = ("plain", "prompt_lookup", "forced", "draft", "forced+prompt_lookup", "forced+draft")
HF_CONFIGS = ("hf", "hf+prompt_lookup", "hf+gramgen", "hf+prompt_lookup+gramgen")
DECODINGS = ("greedy", "sampled")
SAMPLED_TEMPERATURE = 0.7
#: what each configuration's ratios and "identical" count are taken against (same decoding)
BASELINE = {name: "plain" for name in CONFIGS} | {
    "hf": "hf", "hf+prompt_lookup": "hf", "hf+gramgen": "plain", "hf+prompt_lookup+gramgen": "hf+gramgen"}
DRAFT_LAYER_CHOICES = (8, 16, 24)

CODE_PROMPTS = {
    "cart": '''from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int


def item_total(item: Item) -> float:
    """The price of all units of one item."""
    return item.price * item.quantity


def cart_total(items: list[Item]) -> float:
    """The price of every item in the cart."""
    return sum(item_total(item) for item in items)


# The total of the cart after reducing every price by the rate (0.1 is 10 % off).
''',
    "path": '''import math


def distance(x1: float, y1: float, x2: float, y2: float) -> float:
    """Euclidean distance between two points."""
    return math.sqrt((x2 - x1) ** 2 + (y2 - y1) ** 2)


def path_length(points: list[tuple[float, float]]) -> float:
    """Length of the path through the points in order."""
    total = 0.0
    for (x1, y1), (x2, y2) in zip(points, points[1:]):
        total += distance(x1, y1, x2, y2)
    return total


# The point of the list closest to the point (x, y).
''',
    "words": '''from collections import Counter


def read_words(path: str) -> list[str]:
    """The lower-cased words of a text file."""
    with open(path, encoding="utf-8") as handle:
        return handle.read().lower().split()


def word_counts(words: list[str]) -> Counter:
    """How often each word occurs."""
    return Counter(words)


# The n most common words of the file at path, with their counts.
''',
}


@dataclass
class Task:
    """One prompt of a workload: its token ids and the compiled grammar its output follows."""

    workload: str
    id: str
    prompt_ids: list[int]
    compiled: Any
    max_new_tokens: int
    seed: int


# -- pure logic: aggregation, ratios, the report (tested in tests/test_bench_speculative.py) --

def summarize(records: list[dict]) -> list[dict]:
    """One row per (workload, config, decoding), in first-seen order: totals, forward passes
    per token, acceptance, tokens/s, and against the row's :data:`BASELINE` (same workload
    and decoding): the forward-pass ratio, the tokens/s ratio (of the totals, and the median
    of the per-prompt ratios, which a burst of load on the shared machine moves less), the
    ratio of tokens per CPU-second, and the identical-output count (greedy)."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["workload"], r["config"], r["decoding"]), []).append(r)
    rows = []
    for (workload, config, decoding), mine in groups.items():
        tokens = sum(r["n_tokens"] for r in mine)
        seconds = sum(r["seconds"] for r in mine)
        cpu_seconds = sum(r.get("cpu_seconds", 0.0) for r in mine)
        forward = sum(r["forward_passes"] for r in mine)
        drafted = sum(r.get("drafted", 0) for r in mine)
        accepted = sum(r.get("accepted", 0) for r in mine)
        draft_forward = sum(r.get("draft_forward_passes", 0) for r in mine)
        rows.append({
            "workload": workload, "config": config, "decoding": decoding, "family": mine[0]["family"],
            "outputs": len(mine), "tokens": tokens, "seconds": seconds, "cpu_seconds": cpu_seconds,
            "forward_passes": forward, "forward_per_token": forward / tokens if tokens else None,
            "drafted": drafted, "accepted": accepted,
            "acceptance": accepted / drafted if drafted else None,
            "draft_forward_per_token": draft_forward / tokens if tokens and draft_forward else None,
            "tokens_per_second": tokens / seconds if seconds > 0 else None,
            "tokens_per_cpu_second": tokens / cpu_seconds if cpu_seconds > 0 else None,
        })
    by_key = {(r["workload"], r["config"], r["decoding"]): r for r in rows}
    for row in rows:
        base = by_key.get((row["workload"], BASELINE.get(row["config"], row["config"]), row["decoding"]))
        row["baseline"] = base["config"] if base else None
        row["forward_ratio"] = _ratio(base and base["forward_per_token"], row["forward_per_token"])
        row["speedup"] = _ratio(row["tokens_per_second"], base and base["tokens_per_second"])
        row["speedup_median"] = (median_paired_speedup(groups[(row["workload"], row["config"], row["decoding"])],
                                                       groups[(row["workload"], base["config"], row["decoding"])])
                                 if base else None)
        row["cpu_speedup"] = _ratio(row["tokens_per_cpu_second"], base and base["tokens_per_cpu_second"])
        row["identical"], row["compared"] = (identical_count(records, row, base["config"])
                                             if base and base is not row and row["decoding"] == "greedy"
                                             else (None, None))
    return rows


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def median_paired_speedup(mine: list[dict], theirs: list[dict]) -> float | None:
    """The median over prompts run by both of (this run's tokens/s) / (the baseline's)."""
    def rate(r):
        return r["n_tokens"] / r["seconds"] if r["seconds"] > 0 and r["n_tokens"] else None
    base = {r["task"]: rate(r) for r in theirs}
    ratios = sorted(rate(r) / base[r["task"]] for r in mine
                    if base.get(r["task"]) and rate(r) is not None)
    if not ratios:
        return None
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


def identical_count(records: list[dict], row: dict, baseline: str) -> tuple[int, int]:
    """How many of the row's outputs equal, token for token, the baseline's output on the
    same prompt; and how many prompts both have."""
    def outputs(config):
        return {r["task"]: r["tokens"] for r in records
                if r["workload"] == row["workload"] and r["config"] == config and r["decoding"] == row["decoding"]}
    mine, theirs = outputs(row["config"]), outputs(baseline)
    both = [t for t in mine if t in theirs]
    return sum(mine[t] == theirs[t] for t in both), len(both)


def mismatches(records: list[dict]) -> list[dict]:
    """Greedy outputs that differ from their baseline's on the same prompt: where they
    part (the first differing token index) and both texts, for the bug report."""
    index = {(r["workload"], r["task"], r["config"], r["decoding"]): r for r in records}
    found = []
    for r in records:
        if r["decoding"] != "greedy" or BASELINE.get(r["config"], r["config"]) == r["config"]:
            continue
        base = index.get((r["workload"], r["task"], BASELINE[r["config"]], "greedy"))
        if base is None or base["tokens"] == r["tokens"]:
            continue
        at = next((i for i, (a, b) in enumerate(zip(r["tokens"], base["tokens"])) if a != b),
                  min(len(r["tokens"]), len(base["tokens"])))
        found.append({"workload": r["workload"], "task": r["task"], "config": r["config"],
                      "baseline": base["config"], "first_difference": at,
                      "text": r.get("text", ""), "baseline_text": base.get("text", "")})
    return found


def pick_draft_layers(sweep: list[dict]) -> int:
    """The layer count whose draft-model run made the most tokens per CPU-second (acceptance
    against the draft's cost; CPU time, which other processes' load moves less than wall
    clock; ties: higher acceptance, then fewer layers)."""
    if not sweep:
        raise ValueError("no draft sweep rows to pick from")
    return max(sweep, key=lambda s: (s["tokens_per_cpu_second"] or 0.0, s["acceptance"] or 0.0,
                                     -s["layers"]))["layers"]


def targets(rows: list[dict]) -> dict[str, Any]:
    """The issue's targets: prompt lookup on extraction, greedy, >= 1.5x fewer forward
    passes and >= 1.3x tokens/s; and the gramgen rows slower than plain. Speed verdicts use
    the median per-prompt tokens/s ratio (the totals' ratio is reported beside it)."""
    lookup = next((r for r in rows if (r["workload"], r["config"], r["decoding"])
                   == ("extraction", "prompt_lookup", "greedy")), None)
    slower = [f"{r['workload']} {r['config']} {r['decoding']} ({r['speedup_median']:.2f}x)" for r in rows
              if r["family"] == "gramgen" and r["config"] != "plain" and r["speedup_median"] is not None
              and r["speedup_median"] < 1.0]
    return {
        "forward_ratio": lookup and lookup["forward_ratio"], "speedup_median": lookup and lookup["speedup_median"],
        "speedup": lookup and lookup["speedup"],
        "forward_ratio_met": bool(lookup and lookup["forward_ratio"] and lookup["forward_ratio"] >= 1.5),
        "speedup_met": bool(lookup and lookup["speedup_median"] and lookup["speedup_median"] >= 1.3),
        "slower_than_plain": slower,
    }


def rotated(names: list[str], k: int) -> list[str]:
    """``names`` started at position k (mod len): prompt k runs the configurations in this
    order, so that none always runs first or last (machine load drifts)."""
    if not names:
        return []
    k %= len(names)
    return names[k:] + names[:k]


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "—" if x is None else f"{x:{spec}}{suffix}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f} %"


def report(rows: list[dict], meta: dict, sweep: list[dict], found: list[dict]) -> str:
    """SPECULATIVE.md: the command, date, machine and versions; one table per workload; the
    draft sweep; the targets; every greedy mismatch."""
    lines = ["# Speculative decoding (SmolLM2-135M-Instruct, CPU)", "",
             f"`{meta['command']}` — {meta['date']}, {meta['machine']}; gramgen {meta['gramgen']}, "
             f"torch {meta['torch']}, transformers {meta['transformers']}, Python {meta['python']}. "
             f"{meta['num_draft_tokens']} draft tokens per round (also transformers' "
             f"`prompt_lookup_num_tokens`); draft model: SmolLM2's first {meta['draft_layers']} of "
             f"{meta['target_layers']} layers ({meta['draft_layers_source']}). Sampled: temperature "
             f"{meta['temperature']}, one seed per prompt. Load average before / after: "
             f"{meta['load_before']} / {meta['load_after']} (a shared machine: tokens/s are noisy; the "
             f"configurations run interleaved).", ""]
    for workload in dict.fromkeys(r["workload"] for r in rows):
        mine = [r for r in rows if r["workload"] == workload]
        detail = meta["workloads"].get(workload, {})
        lines += [f"## {workload}", "", detail.get("description", ""), "",
                  "| config | decoding | outputs | tokens | target fwd / token | fewer fwd (x) | acceptance "
                  "| draft fwd / token | tokens/s | tokens/s (x) median | tokens/s (x) total | tokens/CPU-s (x) "
                  "| identical to baseline |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in mine:
            same = "—" if r["identical"] is None else f"{r['identical']}/{r['compared']}"
            base = "" if r["baseline"] in (None, r["config"]) else f" (vs {r['baseline']})"
            lines.append(f"| {r['config']} | {r['decoding']} | {r['outputs']} | {r['tokens']} | "
                         f"{_fmt(r['forward_per_token'], '.3f')} | {_fmt(r['forward_ratio'])}{base} | "
                         f"{_pct(r['acceptance'])} | {_fmt(r['draft_forward_per_token'], '.2f')} | "
                         f"{_fmt(r['tokens_per_second'], '.1f')} | {_fmt(r['speedup_median'])} | "
                         f"{_fmt(r['speedup'])} | {_fmt(r['cpu_speedup'])} | {same} |")
        lines.append("")
    if sweep:
        lines += ["## Draft model: layers kept", "",
                  "SmolLM2 cut to its first N decoder layers (`model.layers[:N]`, same tokenizer, "
                  "no training), as `draft=` alone, greedy, on "
                  f"{meta.get('sweep_tasks', '?')} extraction documents; plain on the same documents "
                  "(interleaved): "
                  f"{_fmt(meta.get('sweep_plain_tokens_per_second'), '.1f')} tokens/s, "
                  f"{_fmt(meta.get('sweep_plain_tokens_per_cpu_second'), '.1f')} tokens/CPU-s.", "",
                  "| layers | acceptance | target fwd / token | draft fwd / token | tokens/s | tokens/CPU-s |",
                  "|---|---|---|---|---|---|"]
        for s in sweep:
            lines.append(f"| {s['layers']} | {_pct(s['acceptance'])} | {_fmt(s['forward_per_token'], '.3f')} | "
                         f"{_fmt(s['draft_forward_per_token'], '.2f')} | {_fmt(s['tokens_per_second'], '.1f')} | "
                         f"{_fmt(s.get('tokens_per_cpu_second'), '.1f')} |")
        lines += ["", f"Picked: {meta['draft_layers']} layers ({meta['draft_layers_source']}).", ""]
    t = targets(rows)
    lines += ["## The issue's targets", "",
              f"- Prompt lookup, extraction, greedy: {_fmt(t['forward_ratio'])}x fewer target forward passes "
              f"(target >= 1.5: {'met' if t['forward_ratio_met'] else 'not met'}), {_fmt(t['speedup_median'])}x "
              f"tokens/s, median per document (target >= 1.3: {'met' if t['speedup_met'] else 'not met'}; "
              f"ratio of the totals {_fmt(t['speedup'])}x).",
              "- gramgen configurations slower than plain (median per-prompt tokens/s ratio < 1): "
              + (", ".join(t["slower_than_plain"]) or "none") + ".", ""]
    lines += ["## Greedy outputs that differ from their baseline", ""]
    if not found:
        lines.append("None: every greedy output is token-for-token identical to its baseline's.")
    for m in found:
        lines.append(f"- {m['workload']} {m['task']} {m['config']} vs {m['baseline']}: first different token "
                     f"at {m['first_difference']}: {m['text']!r} vs {m['baseline_text']!r}")
    lines += ["", "Columns: *target fwd / token*: forward passes of SmolLM2 (prefill included) per "
              "generated token (a final EOS not counted as a token); *fewer fwd (x)*: the baseline's "
              "forward passes per token divided by this row's; *acceptance*: accepted / drafted tokens; "
              "*draft fwd / token*: forward passes of the draft model per token; *tokens/s*: generated "
              "tokens over wall-clock seconds of all calls (prefill, masks and drafting included); "
              "*tokens/s (x) median*: the median over prompts of this row's tokens/s over the baseline's on "
              "the same prompt (run next to it; less moved by bursts of load); *total*: the ratio of the "
              "totals; *tokens/CPU-s (x)*: the same with this process's CPU seconds (all threads) in place "
              "of wall-clock seconds (other processes' load moves it less); *identical*: greedy outputs equal to the "
              "baseline's token for token. Baselines: gramgen rows against `plain`, `hf+prompt_lookup` "
              "against `hf`, `hf+gramgen` against gramgen's `plain` (same grammar, transformers' loop), "
              "`hf+prompt_lookup+gramgen` against `hf+gramgen`. transformers rows: greedy only; `hf` "
              "and `hf+prompt_lookup` are unconstrained, so their outputs and lengths differ from the "
              "constrained rows'."]
    return "\n".join(lines) + "\n"


# -- running -----------------------------------------------------------------------------------

def extraction_tasks(model, limit: int, max_new_tokens: int, seed: int, data: Path = DATA) -> list[Task]:
    """``limit`` documents taken in turn from each schema (person, paper, product, person, ...),
    each with its schema compiled as ``generate(schema=...)`` does by default."""
    docs = load_documents(None, data)
    by_schema = {name: [d for d in docs if d["schema_name"] == name] for name in SCHEMAS}
    picked = []
    for i in range(max(len(v) for v in by_schema.values())):
        picked += [by_schema[name][i] for name in SCHEMAS if i < len(by_schema[name])]
    compiled: dict[str, Any] = {}
    tasks = []
    for k, doc in enumerate(picked[:limit]):
        name = doc["schema_name"]
        if name not in compiled:
            compiled[name] = gramgen.compile(gramgen.Grammar.from_json_schema(doc["schema"], strict=True),
                                             model.vocab)
        tasks.append(Task("extraction", doc["id"], model.prompt_ids(prompt_for(doc)), compiled[name],
                          max_new_tokens, seed + k))
    return tasks


def code_tasks(model, limit: int, max_new_tokens: int, seed: int) -> list[Task]:
    compiled = gramgen.compile(gramgen.Grammar.builtin("python_subset"), model.vocab)
    return [Task("code", name, model.prompt_ids(text, chat=False), compiled, max_new_tokens, seed + 100 + k)
            for k, (name, text) in enumerate(list(CODE_PROMPTS.items())[:limit])]


def truncated_draft(model, layers: int):
    """A layer-skip self-draft: a copy of the model keeping its first ``layers`` decoder
    layers (final norm and LM head kept), wrapped with the same tokenizer."""
    hf = copy.deepcopy(model.hf_model)
    hf.model.layers = hf.model.layers[:layers]
    hf.config.num_hidden_layers = layers
    if getattr(hf.config, "layer_types", None):
        hf.config.layer_types = list(hf.config.layer_types)[:layers]
    return gramgen.Model(hf, model.tokenizer)


def speculation(config: str, draft_model, num_draft_tokens: int):
    """The ``speculative=`` argument of a gramgen configuration (None for plain)."""
    parts = {"prompt_lookup": "prompt_lookup", "forced": "forced", "draft": draft_model}
    if config == "plain":
        return None
    drafts = tuple(parts[p] for p in config.split("+"))
    return gramgen.Speculation(draft=drafts[0] if len(drafts) == 1 else drafts,
                               num_draft_tokens=num_draft_tokens)


def _cold(lm) -> None:
    """Forget the contexts a model scored before (its memo and parked KV rows), so the next
    call pays for every forward pass it needs, as a call on a new prompt would."""
    lm.forget()


def _text(model, tokens) -> str:
    return b"".join(model.vocab.token_bytes(t) for t in tokens).decode("utf-8", "replace")


def run_gramgen(model, draft_model, task: Task, config: str, decoding: str, num_draft_tokens: int,
                max_new_tokens: int | None = None) -> dict:
    spec = speculation(config, draft_model, num_draft_tokens)
    sampling = (dict(temperature=0.0) if decoding == "greedy"
                else dict(temperature=SAMPLED_TEMPERATURE, seed=task.seed))
    _cold(model)
    if draft_model is not None:
        _cold(draft_model)
    c0, t0 = time.process_time(), time.perf_counter()
    out = gramgen.generate(model, task.prompt_ids, grammar=task.compiled, speculative=spec,
                           max_new_tokens=max_new_tokens or task.max_new_tokens, **sampling)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    stats = out.stats
    return {"family": "gramgen", "tokens": list(out.tokens), "n_tokens": len(out.tokens), "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "forward_passes": stats.forward_passes, "drafted": getattr(stats, "drafted", 0) or 0,
            "accepted": getattr(stats, "accepted", 0) or 0,
            "draft_forward_passes": getattr(stats, "draft_forward_passes", 0) or 0,
            "finish_reason": out.finish_reason, "text": out.text}


@contextlib.contextmanager
def counting_forward(hf_model):
    """Count the calls of ``hf_model.forward`` (transformers' generate calls it once per
    forward pass) while the block runs."""
    counter = [0]
    original = hf_model.forward

    def forward(*args, **kwargs):
        counter[0] += 1
        return original(*args, **kwargs)

    hf_model.forward = forward
    try:
        yield counter
    finally:
        del hf_model.forward


def run_transformers(model, task: Task, config: str, num_draft_tokens: int,
                     max_new_tokens: int | None = None) -> dict:
    """transformers' greedy ``generate`` on the task's prompt ids (prompt lookup and gramgen's
    LogitsProcessor as the configuration says)."""
    import torch
    from transformers import LogitsProcessorList

    kwargs: dict[str, Any] = {}
    if "prompt_lookup" in config:
        kwargs["prompt_lookup_num_tokens"] = num_draft_tokens
    if config.endswith("+gramgen"):
        kwargs["logits_processor"] = LogitsProcessorList([gramgen.LogitsProcessor(task.compiled)])
    hf = model.hf_model
    input_ids = torch.tensor([task.prompt_ids], device=hf.device)
    with counting_forward(hf) as calls:
        c0, t0 = time.process_time(), time.perf_counter()
        out = hf.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                          max_new_tokens=max_new_tokens or task.max_new_tokens, do_sample=False,
                          pad_token_id=model.tokenizer.eos_token_id, **kwargs)
        seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    new = out[0, len(task.prompt_ids):].tolist()
    eos = set(model.vocab.eos_token_ids)
    finish = "max_new_tokens"
    if new and new[-1] in eos:
        new.pop()
        finish = "eos"
    return {"family": "transformers", "tokens": new, "n_tokens": len(new), "seconds": seconds,
            "cpu_seconds": cpu_seconds,
            "forward_passes": calls[0], "drafted": 0, "accepted": 0, "draft_forward_passes": 0,
            "finish_reason": finish, "text": _text(model, new)}


def run_one(model, draft_model, task: Task, config: str, decoding: str, num_draft_tokens: int,
            max_new_tokens: int | None = None) -> dict:
    if config in HF_CONFIGS:
        row = run_transformers(model, task, config, num_draft_tokens, max_new_tokens)
    else:
        row = run_gramgen(model, draft_model, task, config, decoding, num_draft_tokens, max_new_tokens)
    return dict(row, workload=task.workload, task=task.id, config=config, decoding=decoding)


def sweep_draft_layers(model, tasks: list[Task], choices, num_draft_tokens: int) -> tuple[list[dict], float | None]:
    """Draft-only greedy runs for each layer count (plain interleaved, for reference)."""
    sweep = []
    plain: list[dict] = []
    for layers in choices:
        if layers >= model.hf_model.config.num_hidden_layers:
            continue
        draft = truncated_draft(model, layers)
        run_one(model, draft, tasks[0], "draft", "greedy", num_draft_tokens, max_new_tokens=8)   # warm-up
        rows = []
        for task in tasks:
            rows.append(run_one(model, draft, task, "draft", "greedy", num_draft_tokens))
            plain.append(run_one(model, None, task, "plain", "greedy", num_draft_tokens))
        s = summarize([dict(r, workload="sweep", config="draft") for r in rows])[0]
        sweep.append({"layers": layers, "acceptance": s["acceptance"], "forward_per_token": s["forward_per_token"],
                      "draft_forward_per_token": s["draft_forward_per_token"],
                      "tokens_per_second": s["tokens_per_second"],
                      "tokens_per_cpu_second": s["tokens_per_cpu_second"]})
        print(f"draft layers {layers:2}: acceptance {_pct(s['acceptance'])}, "
              f"{_fmt(s['tokens_per_second'], '.1f')} tokens/s, "
              f"{_fmt(s['tokens_per_cpu_second'], '.1f')} tokens/CPU-s", flush=True)
        del draft
    base = summarize([dict(r, workload="sweep") for r in plain])
    return sweep, (base[0]["tokens_per_second"], base[0]["tokens_per_cpu_second"]) if base else (None, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 documents, 1 code prompt, fewer tokens")
    parser.add_argument("--limit", type=int, help="extraction documents (default 6; quick 3)")
    parser.add_argument("--code-prompts", type=int, help=f"code prompts (default 2 of {len(CODE_PROMPTS)}; quick 1)")
    parser.add_argument("--workloads", default="extraction,code")
    parser.add_argument("--configs", help="comma-separated (default: all): " + ", ".join(CONFIGS + HF_CONFIGS))
    parser.add_argument("--decodings", default="greedy,sampled")
    parser.add_argument("--num-draft-tokens", type=int, default=5)
    parser.add_argument("--draft-layers", type=int, help="draft model layers (default: the sweep picks)")
    parser.add_argument("--max-new-tokens", type=int, help="extraction budget (default 120; quick 80)")
    parser.add_argument("--code-max-new-tokens", type=int, help="code budget (default 64; quick 48)")
    parser.add_argument("--seed", type=int, default=1234, help="first sampling seed (one per prompt)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--show", action="store_true", help="print every output")
    args = parser.parse_args(argv)
    import torch
    import transformers

    configs = args.configs.split(",") if args.configs else list(CONFIGS + HF_CONFIGS)
    unknown = [c for c in configs if c not in CONFIGS + HF_CONFIGS]
    decodings = args.decodings.split(",")
    workloads = args.workloads.split(",")
    if unknown or set(decodings) - set(DECODINGS) or set(workloads) - {"extraction", "code"}:
        parser.error(f"unknown configs/decodings/workloads; known: {CONFIGS + HF_CONFIGS}, {DECODINGS}, "
                     "extraction, code")
    limit = args.limit if args.limit is not None else (3 if args.quick else 6)
    code_prompts = args.code_prompts if args.code_prompts is not None else (1 if args.quick else 2)
    max_new = args.max_new_tokens or (80 if args.quick else 120)
    code_max_new = args.code_max_new_tokens or (48 if args.quick else 64)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    started = time.perf_counter()

    model = gramgen.load_model("smollm2", device="cpu")
    tasks = []
    if "extraction" in workloads:
        tasks += extraction_tasks(model, limit, max_new, args.seed)
    if "code" in workloads:
        tasks += code_tasks(model, code_prompts, code_max_new, args.seed)

    sweep: list[dict] = []
    sweep_plain: tuple = (None, None)
    needs_draft = any("draft" in c for c in configs)
    layers = args.draft_layers
    source = "--draft-layers" if layers else None
    sweep_tasks = [t for t in tasks if t.workload == "extraction"][:1 if args.quick else 2]
    if needs_draft and layers is None:
        if not sweep_tasks:
            parser.error("the draft sweep runs on extraction documents: give --draft-layers")
        sweep, sweep_plain = sweep_draft_layers(model, sweep_tasks, DRAFT_LAYER_CHOICES, args.num_draft_tokens)
        layers = pick_draft_layers(sweep)
        source = "the most tokens per CPU-second in the layer sweep"
    draft_model = truncated_draft(model, layers) if needs_draft else None

    runs = [(c, d) for c in configs if c not in HF_CONFIGS for d in decodings]
    runs += [(c, "greedy") for c in configs if c in HF_CONFIGS and "greedy" in decodings]
    records = []
    for workload in workloads:
        mine = [t for t in tasks if t.workload == workload]
        for config, decoding in runs:   # warm-up: grammar compiled, buffers allocated, untimed
            run_one(model, draft_model, mine[0], config, decoding, args.num_draft_tokens, max_new_tokens=8)
        for k, task in enumerate(mine):
            for config, decoding in rotated(runs, k):
                r = run_one(model, draft_model, task, config, decoding, args.num_draft_tokens)
                records.append(r)
                if args.show:
                    print(f"{task.id:12} {config:26} {decoding:7} {r['n_tokens']:3} tok {r['forward_passes']:3} fwd "
                          f"{r['n_tokens'] / r['seconds']:5.1f} tok/s {r['text']!r}", flush=True)
            print(f"{workload} {task.id}: done ({time.perf_counter() - started:.0f} s)", flush=True)

    rows = summarize(records)
    found = mismatches(records)
    meta = {
        "command": "python -m bench.speculative" + (" " + " ".join(sys.argv[1:] if argv is None else argv)).rstrip(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {platform.system()}, {os.cpu_count()} CPUs, {args.threads} torch threads",
        "gramgen": gramgen.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
        "python": platform.python_version(), "num_draft_tokens": args.num_draft_tokens,
        "draft_layers": layers, "draft_layers_source": source or "no draft configuration run",
        "target_layers": model.hf_model.config.num_hidden_layers, "temperature": SAMPLED_TEMPERATURE,
        "seed": args.seed, "load_before": " ".join(f"{x:.1f}" for x in load_before),
        "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "sweep_tasks": len(sweep_tasks) if sweep else 0, "sweep_plain_tokens_per_second": sweep_plain[0],
        "sweep_plain_tokens_per_cpu_second": sweep_plain[1],
        "seconds": time.perf_counter() - started,
        "workloads": {
            "extraction": {"description": f"{sum(t.workload == 'extraction' for t in tasks)} documents of "
                           f"`bench/data/extraction/` ({', '.join(SCHEMAS)} in turn), the \"keys\" prompt in the "
                           f"chat template, each schema compiled as `generate(schema=...)` does by default; "
                           f"max_new_tokens {max_new}."},
            "code": {"description": f"{sum(t.workload == 'code' for t in tasks)} Python prompts (`CODE_PROMPTS` "
                     "in bench/speculative.py: helpers defined, then a comment saying what comes next; no chat "
                     "template), constrained by `Grammar.builtin(\"python\")`, which parses the output on its "
                     f"own: whole top-level statements; max_new_tokens {code_max_new}."},
        },
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "speculative.json").write_text(json.dumps(
        {"meta": meta, "summary": rows, "draft_sweep": sweep, "mismatches": found, "records": records}, indent=1))
    text = report(rows, meta, sweep, found)
    (out / "SPECULATIVE.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
