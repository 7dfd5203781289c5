"""Start one vLLM engine, run some requests through it, print what came out as JSON.

One engine per process: each configuration the tests need (the processor named or loaded
from its entry point, speculative decoding) runs in its own child process, so engines never
share a process's global state. Usage: ``python run_engine.py SPEC_JSON`` where the spec has

- ``model``: the model folder; ``engine``: keyword arguments of ``vllm.LLM``;
- ``explicit``: pass ``logits_processors=[GramgenLogitsProcessor]`` (else only the
  ``vllm.logits_processors`` entry point loads it);
- ``requests``: a list of ``{"prompt", "extra_args", "temperature", "max_tokens", "seed"}``,
  optionally ``"structured_outputs"`` (keyword arguments of ``StructuredOutputsParams``);
- ``mode``: ``"generate"`` (one ``LLM.generate`` call for all) or ``"engine"`` (each request
  added to the engine on its own, so one that is refused does not stop the others).

The output is ``{"startup_error": str | None, "results": [{"text", "token_ids",
"finish_reason", "error"}, ...], "gramgen_stats": {...} | None}``, its last line; the stats
are gramgen's structured-output backend's counters (``gramgen.vllm.structured_output.stats``),
None when it never ran in this process.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _params(request: dict):
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    structured = request.get("structured_outputs")
    return SamplingParams(temperature=request.get("temperature", 1.0), max_tokens=request.get("max_tokens", 64),
                          seed=request.get("seed"), extra_args=request.get("extra_args"),
                          structured_outputs=StructuredOutputsParams(**structured) if structured else None)


def _result(output) -> dict:
    done = output.outputs[0]
    return {"text": done.text, "token_ids": list(done.token_ids), "finish_reason": done.finish_reason,
            "error": None}


def main(spec: dict) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    from gramgen.vllm import GramgenLogitsProcessor

    kwargs = dict(spec.get("engine", {}))
    if spec.get("explicit"):
        kwargs["logits_processors"] = [GramgenLogitsProcessor]
    started = time.perf_counter()
    try:
        llm = LLM(model=spec["model"], **kwargs)
    except Exception as exc:  # noqa: BLE001 - what the engine said is the result
        return {"startup_error": f"{type(exc).__name__}: {exc}", "results": []}
    startup = time.perf_counter() - started
    requests = spec["requests"]
    results: list[dict] = []
    if spec.get("mode", "generate") == "generate":
        try:
            outputs = llm.generate([r["prompt"] for r in requests], [_params(r) for r in requests],
                                   use_tqdm=False)
            results = [_result(o) for o in outputs]
        except Exception as exc:  # noqa: BLE001
            results = [{"error": f"{type(exc).__name__}: {exc}"} for _ in requests]
    else:
        engine = llm.llm_engine
        by_id: dict[str, dict] = {}
        for i, request in enumerate(requests):
            try:
                engine.add_request(str(i), request["prompt"], _params(request))
                by_id[str(i)] = {}
            except Exception as exc:  # noqa: BLE001 - refused: this request alone
                by_id[str(i)] = {"error": f"{type(exc).__name__}: {exc}"}
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    by_id[output.request_id] = _result(output)
        results = [by_id[str(i)] for i in range(len(requests))]
    return {"startup_error": None, "startup_s": startup, "run_s": time.perf_counter() - started - startup,
            "results": results, "gramgen_stats": _gramgen_stats()}


def _gramgen_stats() -> dict | None:
    backend = sys.modules.get("gramgen.vllm.structured_output")
    stats = backend.stats() if backend is not None else None
    return stats if stats and stats["grammars"] else None


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
