"""Extract structured data into a pydantic model with SmolLM2 (CPU, well under a minute).

    python examples/extract_pydantic.py

The schema of ``Person`` constrains every token, so ``out.value`` is always a valid
``Person`` when ``out.complete`` is true (an output cut by ``max_new_tokens`` is never
passed off as one).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

import gramgen


class Person(BaseModel):
    # extra="forbid" makes the schema say additionalProperties: false; without it, JSON
    # Schema (and so the grammar) allows any further keys, and a small model adds some
    model_config = ConfigDict(extra="forbid")

    name: str
    birth_year: int
    occupation: str


DOCUMENTS = [
    "Ada Lovelace (born 1815) was an English mathematician and writer.",
    "Alan Turing, born in 1912, was a computer scientist and cryptanalyst.",
    "Marie Curie was born in Warsaw in 1867; she became a physicist and chemist.",
]


def main() -> None:
    model = gramgen.load_model("smollm2")   # first run converts the GGUF once (~30 s)
    prompts = [f"Extract the person from this text as JSON.\n\n{doc}" for doc in DOCUMENTS]
    for doc, out in zip(DOCUMENTS, gramgen.generate(model, prompts, schema=Person,
                                                     max_new_tokens=64)):
        print(doc)
        if out.complete:
            print("  ->", repr(out.value))
        else:
            print(f"  -> incomplete ({out.finish_reason}): {out.text!r}")
        print(f"     {len(out.tokens)} tokens, {out.stats.forced_tokens} forced, "
              f"{out.stats.forward_passes} forward passes, logprob {out.logprob:.2f}")


if __name__ == "__main__":
    main()
