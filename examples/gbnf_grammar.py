"""A llama.cpp-style GBNF grammar: a shopping list with quantities.

    python examples/gbnf_grammar.py
"""

from __future__ import annotations

import gramgen

GBNF = r"""
root ::= item ("\n" item){2,4}
item ::= "- " [1-9] [0-9]? " x " word (" " word)?
word ::= [a-z]{2,12}
"""


def main() -> None:
    model = gramgen.load_model("smollm2")
    out = gramgen.generate(model, "Write a short shopping list for a pancake breakfast.",
                           gbnf=GBNF, max_new_tokens=48)
    print(out.text)
    print(f"[{out.finish_reason}, complete={out.complete}, {len(out.tokens)} tokens]")
    # sampling: same grammar, a seed for reproducibility
    for seed in (1, 2):
        out = gramgen.generate(model, "Write a shopping list for a picnic.", gbnf=GBNF,
                               temperature=0.8, top_p=0.95, seed=seed, max_new_tokens=48)
        print(f"\nseed {seed}:\n{out.text}")


if __name__ == "__main__":
    main()
