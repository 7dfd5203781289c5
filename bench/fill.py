"""Template filling vs left-to-right generation: SmolLM2 on the extraction documents, greedy.

    python -m bench.fill                          # every configuration, 10 documents per schema (~8 min)
    python -m bench.fill --limit 20               # all 60 documents
    python -m bench.fill --configs left-to-right,fill

The documents, gold values and schemas are ``bench/data/extraction/`` (people, papers,
products; see its README), the prompt is ``bench/extraction.py``'s "keys" prompt in the
chat template, the model SmolLM2-135M-Instruct on the CPU. Configurations:

* ``left-to-right``: :func:`gramgen.generate` with ``schema=`` (its defaults: the standard
  layout ``{"k": v, "k2": v2}``, undeclared keys refused), ``max_new_tokens`` 120;
* ``fill``: :func:`gramgen.fill` on a template with the schema's keys fixed, in its order
  and the same layout, and each value a ``Hole()`` (the hole holds the whole JSON value,
  quotes included);
* ``fill-quoted``: the same, with the quotes of string values (enums too) in the fixed
  text, so each such hole holds only the string's characters.

Reported per configuration: valid (the output parses and validates against the schema;
every ``fill`` output must), field accuracy against the gold values (exact match as in
``bench.extraction``), agreement with left-to-right (the share of fields whose value equals
the left-to-right output's), and per document: seconds, forward passes, generated tokens
and, for fill, infiller checks and refused candidates. Each run starts with the model's
memo and cache cleared (``model.forget()``), so no run reuses another's forward passes.
Writes ``bench/results/FILL.md`` and ``bench/results/fill.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import gramgen  # noqa: E402
from gramgen.generation.fill import fill  # noqa: E402

from bench.extraction import DATA, SCHEMAS, load_documents, prompt_for, same_value, score  # noqa: E402

MAX_NEW_TOKENS = 120
CONFIGS = ("left-to-right", "fill", "fill-quoted")


def template_for(schema: dict, quoted: bool = False) -> list:
    """The schema's keys as fixed text (its order, the standard layout) and a hole per
    value; ``quoted``: string values' quotes in the fixed text too."""
    parts: list = []
    text = "{"
    for i, (key, sub) in enumerate(schema["properties"].items()):
        text += ("" if i == 0 else ", ") + json.dumps(key) + ": "
        is_string = sub.get("type") == "string"
        if quoted and is_string:
            parts += [text + '"', gramgen.Hole()]
            text = '"'
        else:
            parts += [text, gramgen.Hole()]
            text = ""
    parts.append(text + "}")
    return parts


def run_left_to_right(model, doc) -> dict:
    out = gramgen.generate(model, prompt_for(doc), schema=doc["schema"], max_new_tokens=MAX_NEW_TOKENS)
    return {"text": out.text, "value": out.value if out.complete else None,
            "forward_passes": out.stats.forward_passes, "new_tokens": out.stats.new_tokens}


def run_fill(quoted: bool):
    def run(model, doc) -> dict:
        out = fill(model, template_for(doc["schema"], quoted), schema=doc["schema"], prompt=prompt_for(doc),
                   max_new_tokens=MAX_NEW_TOKENS)
        s = out.stats
        return {"text": out.text, "value": out.value, "fillings": out.fillings, "finish_reason": out.finish_reason,
                "forward_passes": s.forward_passes, "new_tokens": s.new_tokens, "checks": s.checks,
                "rejections": s.rejections}
    return run


RUNNERS = {"left-to-right": run_left_to_right, "fill": run_fill(False), "fill-quoted": run_fill(True)}


def agreement(value: Any, reference: Any, keys) -> dict[str, bool]:
    """Per field: whether ``value`` states the same as the left-to-right ``reference``."""
    return {k: isinstance(value, dict) and isinstance(reference, dict) and k in value and k in reference
            and same_value(value[k], reference[k]) for k in keys}


def summarize(rows: list[dict], configs: list[str]) -> dict[str, dict]:
    summary = {}
    for name in configs:
        mine = [r for r in rows if r["config"] == name]
        if not mine:
            continue
        n_fields = sum(len(r["fields"]) for r in mine)
        agreed = [r for r in mine if r.get("agreement") is not None]
        n_agreed = sum(len(r["agreement"]) for r in agreed)
        per = {}
        for s in SCHEMAS:
            rs = [r for r in mine if r["schema"] == s]
            total = sum(len(r["fields"]) for r in rs)
            per[s] = sum(sum(r["fields"].values()) for r in rs) / total if total else None
        summary[name] = {
            "documents": len(mine),
            "valid": sum(r["valid"] for r in mine) / len(mine),
            "field_accuracy": sum(sum(r["fields"].values()) for r in mine) / n_fields if n_fields else 0.0,
            "agreement_with_left_to_right": (sum(sum(r["agreement"].values()) for r in agreed) / n_agreed
                                             if n_agreed else None),
            "identical_to_left_to_right": (sum(r["identical"] for r in agreed) / len(agreed) if agreed else None),
            "per_schema": per,
            "seconds_per_document": sum(r["seconds"] for r in mine) / len(mine),
            "forward_passes_per_document": sum(r["forward_passes"] for r in mine) / len(mine),
            "new_tokens_per_document": sum(r["new_tokens"] for r in mine) / len(mine),
            "checks_per_document": _mean(mine, "checks"),
            "rejections_per_document": _mean(mine, "rejections"),
            "witness_completed": sum(r.get("finish_reason", "done") != "done" for r in mine),
        }
    return summary


def _mean(rows: list[dict], key: str) -> float | None:
    """The mean of ``key`` over ``rows`` (None when the configuration does not report it)."""
    return sum(r[key] for r in rows) / len(rows) if key in rows[0] else None


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.0f} %"


def _num(x, digits: int = 1) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def report(summary: dict, meta: dict) -> str:
    lines = ["# Template filling vs left-to-right (SmolLM2-135M-Instruct, greedy, CPU)", "",
             f"`{meta['command']}` — {meta['date']}, {meta['machine']}, {meta['torch_threads']} torch threads, "
             f"load average before / after: {meta['load_before']} / {meta['load_after']}; {meta['documents']} "
             f"documents of `bench/data/extraction/` ({', '.join(SCHEMAS)}), the \"keys\" prompt of "
             f"`bench/extraction.py` in the chat template; gramgen {meta['gramgen']}, max_new_tokens "
             f"{meta['max_new_tokens']}.", "",
             "| configuration | valid | field accuracy | " + " | ".join(SCHEMAS)
             + " | agreement with left-to-right | identical outputs | seconds / doc | forward passes / doc "
               "| tokens / doc | infiller checks / doc | refused candidates / doc |",
             "|---|---|---|" + "---|" * len(SCHEMAS) + "---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        lines.append(
            f"| {name} | {_pct(s['valid'])} | {_pct(s['field_accuracy'])} | "
            + " | ".join(_pct(s["per_schema"][k]) for k in SCHEMAS)
            + f" | {_pct(s['agreement_with_left_to_right'])} | {_pct(s['identical_to_left_to_right'])} | "
              f"{_num(s['seconds_per_document'], 2)} | {_num(s['forward_passes_per_document'])} | "
              f"{_num(s['new_tokens_per_document'])} | {_num(s['checks_per_document'])} | "
              f"{_num(s['rejections_per_document'])} |")
    witnessed = sum(s["witness_completed"] for s in summary.values())
    lines += ["",
              "Valid: the output parses and validates against the schema (`jsonschema`). Field accuracy: "
              "the share of gold fields the output states exactly (as `bench/extraction.py` scores). "
              "Agreement: the share of fields whose value equals the left-to-right output's; identical: "
              "the documents whose whole value is the same. Tokens: generated by the model (fill: in the "
              "holes; left-to-right: every output token, forced keys included). Infiller checks: "
              "`Infiller` questions (a token placed in a hole, a hole closed); refused: candidates the prefix "
              "matcher or the infiller turned down. "
              + (f"{witnessed} outputs were completed from the infiller's witness (token budget or dead end)."
                 if witnessed else "No output needed the infiller's witness (every hole was closed by the model)."),
              "Templates: `fill` has the keys fixed and each value a `Hole()`, e.g. "
              "`['{\"name\": ', Hole(), ', \"birth_year\": ', Hole(), ...,  '}']`; `fill-quoted` fixes the quotes "
              "of string values too (`'{\"name\": \"', Hole(), '\", \"birth_year\": ', Hole(), ...`). SmolLM2's "
              "tokenizer has no FIM tokens, so fill prompts with the prefix only: the prompt, then the text so far.",
              "Seconds: wall clock per document on a shared machine, each run after `model.forget()`; the "
              "configurations run interleaved per document."]
    return "\n".join(lines) + "\n"


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--limit", type=int, default=10, help="documents per schema (default 10 of 20)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a shared machine more threads only contend)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--show", action="store_true", help="print every output")
    args = parser.parse_args(argv)
    names = args.configs.split(",")
    unknown = [n for n in names if n not in RUNNERS]
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {', '.join(CONFIGS)}")
    import torch

    torch.set_num_threads(args.threads)
    load_before = _load()
    model = gramgen.load_model("smollm2", device="cpu")
    docs = load_documents(args.limit, Path(args.data))
    rows = []
    for doc in docs:
        reference = None
        for name in ["left-to-right"] + [n for n in names if n != "left-to-right"]:   # the reference first
            model.forget()
            t0 = time.perf_counter()
            out = RUNNERS[name](model, doc)
            seconds = time.perf_counter() - t0
            if name == "left-to-right":
                reference = out["value"]
                if name not in names:
                    continue
            keys = list(doc["schema"]["properties"])
            row = dict(score(doc, out["value"]), config=name, id=doc["id"], schema=doc["schema_name"],
                       seconds=seconds, **{k: v for k, v in out.items() if k != "value"})
            row["value"] = out["value"]
            if name != "left-to-right":
                row["agreement"] = agreement(out["value"], reference, keys)
                row["identical"] = out["value"] == reference
            rows.append(row)
            if args.show:
                print(f"{name:14} {doc['id']:12} {sum(row['fields'].values())}/{len(row['fields'])} "
                      f"{seconds:5.1f}s {out['text']}", flush=True)
    summary = summarize(rows, names)
    meta = {"command": "python -m bench.fill" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip(),
            "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {platform.system()}, "
                                                          f"{os.cpu_count()} CPUs",
            "documents": len(docs), "gramgen": gramgen.__version__, "max_new_tokens": MAX_NEW_TOKENS,
            "torch_threads": args.threads, "load_before": load_before, "load_after": _load(),
            "torch": torch.__version__, "python": platform.python_version()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fill.json").write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1))
    text = report(summary, meta)
    (out / "FILL.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
