"""Infilling feasibility latency: how long :meth:`gramgen.Infiller.check` takes on partial
JSON texts with 1, 2 and 4 holes, per check and per committed token.

    python -m bench.infill                      # writes bench/results/INFILL.md and infill.json
    python -m bench.infill --docs 5 --out /tmp  # a smoke run

Workloads: the builtin JSON grammar and one JSON Schema (``--schema``, by default a
JSONSchemaBench dev schema with nested objects, arrays and string formats), each compiled
for SmolLM2's and Llama 3's tokenizers. Documents: the schema's valid instances from
JSONSchemaBench plus instances written here (``json.dumps`` with its default layout).

* **per check** (a cold parse: nothing kept from earlier checks): ``k`` random spans of a
  document become holes, each ``Hole()`` (any bytes) or ``Hole(max_bytes=len + 4)``; the
  time of one ``check`` (p50 / p90 / p99 / max), the share found feasible;
* **per committed token**, left to right (template filling): the document is tokenised,
  ``k`` random spans of tokens become ``Hole()``; their true tokens are put back one at a
  time at each hole's start (``allows(segments, slot, token, at=0)``, the question a
  template filler asks), reusing the parse of the shared beginning;
* **per committed token**, any order (diffusion): the same spans' tokens are put back in a
  random order, each splitting its hole (``Hole()`` before and after it).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

import gramgen  # noqa: E402
from gramgen import Hole, Infiller  # noqa: E402

SHARED = ROOT.parent / "shared"
TOKENIZERS = ("smollm2", "llama3")
HOLES = (1, 2, 4)

#: written here so the benchmark runs without JSONSchemaBench too
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string", "format": "email"},
        "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                                      "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "kind": {"enum": ["person", "organisation"]},
    },
    "required": ["name", "age", "kind"],
}
PEOPLE = [
    {"name": "Ada Lovelace", "age": 36, "email": "ada@example.com", "address": {"city": "London", "zip": "01234"},
     "tags": ["math", "poetry"], "kind": "person"},
    {"name": "Grace Hopper", "age": 85, "address": {"street": "1 Navy Way", "city": "Arlington"},
     "tags": ["cobol"], "kind": "person"},
    {"name": "Ørsted A/S", "age": 52, "email": "info@orsted.dk", "tags": [], "kind": "organisation"},
    {"name": "Alan Turing", "age": 41, "address": {"street": "Bletchley Park", "city": "Milton Keynes",
                                                   "zip": "12345"}, "kind": "person"},
]


def percentile(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def spans(n: int, k: int, rng: random.Random, min_len: int = 1) -> list[tuple[int, int]]:
    """``k`` disjoint, non-adjacent [start, end) spans of 1..8 units in ``range(n)``."""
    for _ in range(1000):
        starts = sorted(rng.sample(range(1, max(2, n - 1)), k))
        out = []
        for i, s in enumerate(starts):
            limit = starts[i + 1] - 1 if i + 1 < k else n - 1
            e = min(limit, s + rng.randint(min_len, 8))
            if e <= s:
                break
            out.append((s, e))
        if len(out) == k:
            return out
    raise RuntimeError(f"no {k} spans in {n}")


def per_check(inf: Infiller, docs: list[bytes], k: int, rng: random.Random, reps: int) -> dict:
    times, feasible, works = [], 0, []
    for _ in range(reps):
        doc = rng.choice(docs)
        segs, prev = [], 0
        for s, e in spans(len(doc), k, rng):
            hole = Hole() if rng.random() < 0.5 else Hole(max_bytes=e - s + 4)
            segs += [doc[prev:s], hole]
            prev = e
        segs.append(doc[prev:])
        inf._runs.clear()  # a cold check: no parse kept from the last one
        t0 = time.perf_counter()
        r = inf.check(segs)
        times.append(time.perf_counter() - t0)
        feasible += r.feasible
        works.append(r.work)
    return summary(times) | {"feasible": feasible / reps, "work_p50": statistics.median(works)}


def per_token(inf: Infiller, tokenized: list[list[int]], vocab, k: int, rng: random.Random, reps: int,
              any_order: bool) -> dict:
    times, refused = [], 0
    for _ in range(reps):
        ids = rng.choice(tokenized)
        cut = spans(len(ids), k, rng)
        # the canvas: committed tokens or None; holes are maximal runs of None
        canvas: list = list(ids)
        todo = []
        for s, e in cut:
            for i in range(s, e):
                canvas[i] = None
                todo.append(i)
        if any_order:
            rng.shuffle(todo)
        inf._runs.clear()
        for i in todo:
            segs, slot, at = segments(canvas, vocab, i, any_order)
            t0 = time.perf_counter()
            ok = inf.allows(segs, slot, ids[i], at=at)
            times.append(time.perf_counter() - t0)
            refused += not ok
            canvas[i] = ids[i]
    return summary(times) | {"refused": refused}


def segments(canvas: list, vocab, i: int, any_order: bool) -> tuple[list, int, int]:
    """The canvas as segments (runs of committed tokens as bytes, runs of masks as
    ``Hole()``), the index of the hole holding slot ``i``, and where in it the token goes."""
    segs: list = []
    slot = at = None
    j = 0
    while j < len(canvas):
        if canvas[j] is None:
            start = j
            while j < len(canvas) and canvas[j] is None:
                j += 1
            if start <= i < j:
                slot = len(segs)
                at = 0 if (i == start or not any_order) else -1
                if any_order and start < i < j - 1:  # inside the run: a hole on each side
                    segs += [Hole()]
                    slot, at = len(segs), 0
            segs.append(Hole())
        else:
            data = b""
            while j < len(canvas) and canvas[j] is not None:
                data += vocab.token_bytes(canvas[j])
                j += 1
            segs.append(data)
    return segs, slot, at


def summary(times: list[float]) -> dict:
    ms = [t * 1e3 for t in times]
    return {"n": len(ms), "p50_ms": percentile(ms, 50), "p90_ms": percentile(ms, 90),
            "p99_ms": percentile(ms, 99), "max_ms": max(ms)}


def jsonschemabench_docs(schema_id: str | None) -> tuple[dict, list[bytes]] | None:
    if schema_id is None:
        return None
    cat = schema_id.split("--")[0] if "--" in schema_id else None
    for path in sorted((SHARED / "data" / "jsonschemabench").glob("*/dev.jsonl")):
        if cat and path.parent.name != cat:
            continue
        for line in path.open():
            row = json.loads(line)
            if row["id"] == schema_id:
                docs = [json.dumps(t["data"]).encode() for t in row["tests"] if t.get("valid")]
                return json.loads(row["schema"]) if isinstance(row["schema"], str) else row["schema"], docs
    raise SystemExit(f"no JSONSchemaBench schema {schema_id!r}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=60, help="checks (and token runs) per cell")
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args(argv)
    from transformers import AutoTokenizer

    docs = [json.dumps(p, ensure_ascii=False).encode() for p in PEOPLE]
    rows = []
    started = time.perf_counter()
    for tok_name in TOKENIZERS:
        tok = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / tok_name))
        vocab = gramgen.Vocabulary.from_huggingface(tok)
        tokenized = [tok.encode(d.decode(), add_special_tokens=False) for d in docs]
        for g_name, grammar in (("json", gramgen.Grammar.builtin("json")),
                                ("schema", gramgen.Grammar.from_json_schema(PERSON, whitespace="standard"))):
            cg = gramgen.compile(grammar, vocab)
            inf = Infiller(cg)
            inf.check([docs[0]])  # warm: DFA rows, lexeme moves
            for k in HOLES:
                rng = random.Random(f"{args.seed}-{tok_name}-{g_name}-{k}")
                row = {"tokenizer": tok_name, "grammar": g_name, "holes": k}
                row["check"] = per_check(inf, docs, k, rng, args.docs)
                row["left_to_right"] = per_token(inf, tokenized, vocab, k, rng, max(1, args.docs // 4), False)
                row["any_order"] = per_token(inf, tokenized, vocab, k, rng, max(1, args.docs // 4), True)
                rows.append(row)
                print(json.dumps(row), flush=True)
    wall = time.perf_counter() - started
    meta = {"command": "python -m bench.infill" + (f" --docs {args.docs}" if args.docs != 60 else ""),
            "date": _dt.date.today().isoformat(), "machine": f"{platform.machine()}, {len(__import__('os').sched_getaffinity(0))} CPUs",
            "python": platform.python_version(), "wall_s": round(wall, 1), "seed": args.seed}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "infill.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (out / "INFILL.md").write_text(markdown(meta, rows))
    print(f"wrote {out / 'INFILL.md'} ({wall:.0f} s)")


def markdown(meta: dict, rows: list[dict]) -> str:
    lines = ["# Infilling: feasibility-check latency", "", "```", meta["command"], "```", "",
             f"{meta['date']} · {meta['machine']} · Python {meta['python']} · run took {meta['wall_s']} s · seed {meta['seed']}",
             "",
             "Documents: four JSON objects written in `bench/infill.py` (`json.dumps` layout, one with non-ASCII "
             "text written as UTF-8). Grammars: the builtin `json` grammar and a JSON Schema with a nested object, an array, an enum, "
             "an `email` format and a `pattern` (`PERSON` in the script), `whitespace=\"standard\"`.",
             "",
             "**Per check**: `k` random spans of 1-8 bytes become holes (`Hole()` or `Hole(max_bytes=len+4)`, half "
             "each); one cold `Infiller.check` (no parse kept from earlier checks). **Per committed token**: `k` random "
             "spans of 1-8 tokens become `Hole()`; their true tokens go back one at a time and each is checked with "
             "`Infiller.allows` (it reuses the parse of the shared beginning): left to right at each hole's start "
             "(template filling), or in a random order, splitting the hole (diffusion). Times in ms.",
             "",
             "| tokenizer | grammar | holes | check p50 | p90 | p99 | max | feasible | token L→R p50 | p99 | max "
             "| token any-order p50 | p99 | max |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c, a, b = r["check"], r["left_to_right"], r["any_order"]
        lines.append(f"| {r['tokenizer']} | {r['grammar']} | {r['holes']} | {c['p50_ms']:.2f} | {c['p90_ms']:.2f} | "
                     f"{c['p99_ms']:.2f} | {c['max_ms']:.1f} | {c['feasible']:.0%} | {a['p50_ms']:.2f} | "
                     f"{a['p99_ms']:.2f} | {a['max_ms']:.1f} | {b['p50_ms']:.2f} | {b['p99_ms']:.2f} | {b['max_ms']:.1f} |")
    lines += ["", "Every true token was allowed (a refusal would be a wrong \"no\": the document itself fills the "
              "holes): refused counts are in `infill.json` (`refused`, all 0)." if all(
                  r["left_to_right"]["refused"] == 0 and r["any_order"]["refused"] == 0 for r in rows)
              else "Some true tokens were refused (see `refused` in infill.json): the work budget ran out.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
