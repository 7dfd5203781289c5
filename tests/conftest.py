from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
TOKENIZER_NAMES = ["gpt2", "smollm2", "llama3", "qwen2", "llama2", "phi3", "deepseek-coder"]
#: multiplies the number of random states the brute-force tests visit (CI uses 1)
SCALE = float(os.environ.get("GRAMGEN_TEST_SCALE", "1"))

sys.path.insert(0, str(Path(__file__).resolve().parent))


def require_shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"../shared not found beside the repository (looked in {SHARED})")
    return SHARED


@functools.cache
def hf_tokenizer(name: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(require_shared() / "tokenizers" / name))


@functools.cache
def vocabulary(name: str):
    import gramgen

    return gramgen.Vocabulary.from_huggingface(hf_tokenizer(name))
