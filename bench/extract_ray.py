"""Throughput of ``gramgen extract`` on Ray Data (1 and 2 workers) against the single-process
command, on the same documents and model.

    python -m bench.extract_ray                       # SmolLM2 and a tiny random model (~5 min on 2 busy cores)
    python -m bench.extract_ray --models tiny --docs 60

Each run is the real command in a fresh process (``python -m gramgen.cli extract ...``), the
way a user runs it: the single process (``--batch-size 1``), then ``--ray --workers 1`` and
``--ray --workers 2`` on a new local Ray instance. The documents are short synthetic
biographies (``"<name> was born in <year> and worked as a <job>."``), the schema that of
``examples/person.schema.json`` (name, birth year, occupation), generation constrained by that
language with bounded strings (:data:`GRAMMAR`), greedy, ``--max-new-tokens 64``. Models: ``smollm2`` (SmolLM2-135M-Instruct, the model the README
uses) and ``tiny`` (a 2-layer Llama with hidden size 32 and random weights over SmolLM2's
tokenizer: the forward pass costs almost nothing, so it shows what the constraint, the
framework and I/O cost per document).

The output file is watched while the command runs (every 20 ms), which gives, per run: the
wall time of the whole command, the time to its first record (start-up: imports, Ray, model
loads, grammar compiles) and the steady rate from the first record to the last. Writes
``bench/results/EXTRACT_RAY.md`` and ``bench/results/extract_ray.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SCHEMA = ROOT / "examples" / "person.schema.json"
#: SCHEMA's language with every string and number bounded, so that every output ends within
#: --max-new-tokens whatever the model (the tiny random model would otherwise fill strings up
#: to their maxLength and the run would measure string length, not throughput)
GRAMMAR = r"""
start: "{\"name\": " NAME ", \"birth_year\": " YEAR ", \"occupation\": " JOB "}"
NAME: /"[A-Za-z][A-Za-z .'-]{0,23}"/
YEAR: /1[89][0-9][0-9]|20[0-9][0-9]/
JOB: /"[a-z][a-z ]{0,23}"/
"""

NAMES = ["Henrik Dahl", "Elena Marsh", "Amara Okafor", "Priya Raman", "Jonas Berg", "Lucia Ferro",
         "Tomasz Nowak", "Mei Lin", "Omar Haddad", "Sofia Costa", "Kwame Mensah", "Ingrid Olsen"]
JOBS = ["composer", "marine biologist", "software engineer", "structural engineer", "baker",
        "architect", "pilot", "chemist", "librarian", "surgeon", "farmer", "journalist"]
CONFIGS = [("single process", []), ("ray, 1 worker", ["--ray", "--workers", "1"]),
           ("ray, 2 workers", ["--ray", "--workers", "2"])]


def write_documents(path: Path, n: int) -> None:
    with open(path, "w") as f:
        for i in range(n):
            text = (f"{NAMES[i % len(NAMES)]} was born in {1900 + (7 * i) % 100} and worked as a "
                    f"{JOBS[(i * 5) % len(JOBS)]}.")
            f.write(json.dumps({"id": f"d{i:03d}", "text": text}) + "\n")


def tiny_model(folder: Path) -> Path:
    """The tests' tiny model: a random 2-layer Llama over the SmolLM2 tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(ROOT.parent / "shared" / "tokenizers" / "smollm2"))
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=1, eos_token_id=eos, pad_token_id=eos)
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run(model: str, docs: Path, out: Path, extra: list[str], env: dict, timeout: float) -> dict:
    """One command, timed; the output file is polled for the time of each record."""
    cmd = [sys.executable, "-m", "gramgen.cli", "extract", "--schema", str(SCHEMA), "--grammar",
           str(docs.parent / "person.lark"), "--model", model, "--max-new-tokens", "64", str(docs),
           "-o", str(out), *extra]
    log = out.with_suffix(".log")
    start = time.perf_counter()
    seen, times = 0, []
    with open(log, "wb") as f:
        proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
        while True:
            done = proc.poll() is not None
            lines = out.read_bytes().count(b"\n") if out.exists() else 0
            now = time.perf_counter() - start
            times += [now] * (lines - seen)
            seen = lines
            if done:
                break
            if now > timeout:   # recorded as such: the other runs still go on
                proc.kill()
                proc.wait()
                return {"records": seen, "errors": None, "wall_s": None, "timed_out_s": timeout,
                        "first_record_s": times[0] if times else None, "docs_per_s": None,
                        "steady_docs_per_s": None}
            time.sleep(0.02)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
    records = [json.loads(line) for line in out.read_text().splitlines()]
    n = len(records)
    steady = (n - 1) / (times[-1] - times[0]) if n > 1 and times[-1] > times[0] else None
    return {"records": n, "errors": sum("error" in r for r in records), "wall_s": wall,
            "first_record_s": times[0] if times else None, "docs_per_s": n / wall,
            "steady_docs_per_s": steady}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2,tiny", help="comma-separated: smollm2, tiny")
    parser.add_argument("--docs", type=int, help="documents per run (default: 8 for smollm2, 30 for tiny)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per run at most")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rgb", dir="/tmp"))   # short: Ray's socket paths live under it
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), RAY_TMPDIR=str(work / "ray"),
               RAY_USAGE_STATS_ENABLED="0", TOKENIZERS_PARALLELISM="false")
    env.pop("RAY_ADDRESS", None)
    (work / "ray").mkdir()
    (work / "person.lark").write_text(GRAMMAR)
    rows = []
    load_before = os.getloadavg()
    try:
        for name in args.models.split(","):
            model = str(tiny_model(work / "tiny")) if name == "tiny" else name
            n = args.docs or (30 if name == "tiny" else 8)
            docs = work / f"{name}.jsonl"
            write_documents(docs, n)
            for label, extra in CONFIGS:
                out = work / f"{name}-{label.replace(' ', '').replace(',', '-')}.jsonl"
                result = run(model, docs, out, extra, env, args.timeout)
                result.update(model=name, config=label, docs=n)
                rows.append(result)
                print(json.dumps(result), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()
    (RESULTS / "extract_ray.json").write_text(json.dumps(rows, indent=1) + "\n")
    write_table(rows, load_before, load_after)


def _f(x, digits=2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def write_table(rows: list[dict], load_before, load_after, note: str = "") -> None:
    import ray
    import torch

    lines = [
        "# gramgen extract on Ray Data: 1 and 2 workers vs the single process",
        "",
        f"`python -m bench.extract_ray` — {time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{platform.system()}, {os.cpu_count()} CPUs, load average before / after: "
        f"{' '.join(f'{x:.1f}' for x in load_before)} / {' '.join(f'{x:.1f}' for x in load_after)}; "
        f"Ray {ray.__version__}, torch {torch.__version__}; validated by `examples/person.schema.json`, "
        "constrained by the same language with bounded strings and years (`GRAMMAR` in "
        "`bench/extract_ray.py`), greedy, `--max-new-tokens 64`, `--batch-size 1`.",
        "",
        "| model | run | documents | error records | wall s | first record s | documents/s (wall) "
        "| documents/s (steady) | steady vs single process |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    single = {r["model"]: r for r in rows if r["config"] == "single process"}
    for r in rows:
        base = single.get(r["model"], {}).get("steady_docs_per_s")
        ratio = (f"{r['steady_docs_per_s'] / base:.2f}x" if base and r["steady_docs_per_s"] else "—")
        if r.get("timed_out_s"):
            lines.append(f"| {r['model']} | {r['config']} | {r['docs']} | — | > {r['timed_out_s']:.0f} "
                         f"(stopped, {r['records']} records) | {_f(r['first_record_s'], 1)} | — | — | — |")
            continue
        lines.append(f"| {r['model']} | {r['config']} | {r['docs']} | {r['errors']} | {_f(r['wall_s'], 1)} "
                     f"| {_f(r['first_record_s'], 1)} | {_f(r['docs_per_s'])} | {_f(r['steady_docs_per_s'])} "
                     f"| {ratio} |")
    lines += [
        "",
        "Each run is the command in a fresh process on a new local Ray instance (the Ray runs), "
        "so wall time includes imports, Ray's start, each worker's model load and grammar "
        "compile. First record: seconds from the start to the first record in the output. "
        "Steady: records after the first per second, from the first record to the last. "
        "Torch threads: the single process uses torch's default (one per core); a Ray worker "
        "uses the cluster's CPUs divided by the workers (2 with one worker, 1 each with two). "
        "Ray workers ask for half a CPU each. smollm2: SmolLM2-135M-Instruct; tiny: a random "
        "2-layer Llama (hidden size 32) over SmolLM2's tokenizer, whose forward pass is nearly "
        "free, so its rate is that of the constraint, the framework and the output file. "
        "Ray hands records back in bursts (a worker's finished blocks travel together), so its "
        "steady rate overstates the rate a worker sustains: compare wall times.",
    ]
    if note:
        lines += ["", note]
    (RESULTS / "EXTRACT_RAY.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
