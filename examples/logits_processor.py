"""gramgen inside plain transformers code: model.generate(logits_processor=[...]).

    python examples/logits_processor.py

Any causal LM and tokenizer work; here SmolLM2 from the folder gramgen converted its GGUF
file into (gramgen.load_model("smollm2") does this once).
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import gramgen
from gramgen.hf import converted_folder

GRAMMAR = r"""
start: "{" "\"city\":" STRING ",\"country\":" STRING ",\"population\":" NUMBER "}"
STRING: /"[A-Za-z ]{1,30}"/
NUMBER: /[1-9][0-9]{0,9}/
"""


def main() -> None:
    folder = converted_folder("smollm2")
    tokenizer = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder)

    vocab = gramgen.Vocabulary.from_huggingface(tokenizer, tokenizer.convert_tokens_to_ids(["<|im_end|>"]))
    compiled = gramgen.compile(gramgen.Grammar.from_lark(GRAMMAR), vocab)

    questions = ["Describe Paris as JSON.", "Describe Tokyo as JSON."]
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                           add_generation_prompt=True) for q in questions]
    inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    for options in (dict(do_sample=False), dict(do_sample=True, temperature=0.7, top_k=0)):
        torch.manual_seed(0)
        # one processor per generate() call: it tracks the rows of that call
        out = model.generate(**inputs, max_new_tokens=40, **options,
                             logits_processor=[gramgen.LogitsProcessor(compiled)])
        print(options)
        for row in out[:, inputs.input_ids.shape[1]:]:
            print("  ", tokenizer.decode(row, skip_special_tokens=True))


if __name__ == "__main__":
    main()
