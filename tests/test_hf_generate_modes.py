"""gramgen.LogitsProcessor under every decoding mode of transformers' ``model.generate``:
greedy, sampling, beam search, beam sampling and assisted generation (prompt lookup and an
assistant model), on a tiny randomly initialised Llama over the SmolLM2 tokenizer (fast,
and its random preferences wander through the grammar's choices)."""

from __future__ import annotations

import re

import pytest
import torch

from conftest import hf_tokenizer, vocabulary

import gramgen

#: a finite language whose first token has fewer allowed ids than beams are kept
#: (beam sampling then keeps rows holding rejected tokens), with words the prompt repeats
#: (prompt lookup proposes candidates, some of which the model rejects)
PATTERN = r"\{(yes|no)( (yes|no)){3,6}\}"
PROMPTS = ["{yes no yes no yes} {no no yes yes}", "{no yes} {yes yes no no no}"]


def _llama(vocab_size: int, eos: int, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, bos_token_id=1, eos_token_id=eos,
                         pad_token_id=eos)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)   # tests run beside others on few cores: more threads contend
    tokenizer = hf_tokenizer("smollm2")
    vocab = vocabulary("smollm2")
    eos = vocab.eos_token_ids[0]
    model = _llama(len(tokenizer), eos, seed=0)
    assistant = _llama(len(tokenizer), eos, seed=1)   # another random model: drafts differ
    compiled = gramgen.compile(gramgen.Grammar.from_regex(PATTERN), vocab)
    return tokenizer, vocab, model, assistant, compiled


class Recording(gramgen.LogitsProcessor):
    """Records the input_ids length of each call."""

    def __call__(self, input_ids, scores):
        self.lengths = getattr(self, "lengths", []) + [input_ids.shape[1]]
        return super().__call__(input_ids, scores)


def _run(setup, prompts, **options):
    tokenizer, vocab, model, assistant, compiled = setup
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    try:
        enc = tokenizer(prompts, return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = side
    if options.pop("assistant", False):
        options["assistant_model"] = assistant
    processor = Recording(compiled)
    torch.manual_seed(5)
    out = model.generate(**enc, logits_processor=[processor], max_new_tokens=40, **options)
    generated = []
    for row in out[:, enc.input_ids.shape[1]:].tolist():
        end = next(i for i, t in enumerate(row) if t in vocab.eos_token_ids)  # the grammar ends it
        text = b"".join(vocab.token_bytes(t) for t in row[:end]).decode()
        assert re.fullmatch(PATTERN, text), text
        generated.append(row[:end])
    return generated, processor


MODES = {
    "greedy": dict(do_sample=False),
    "sample": dict(do_sample=True, top_k=0),
    "beams": dict(do_sample=False, num_beams=3, num_return_sequences=3),
    "beam sampling": dict(do_sample=True, num_beams=3, top_k=0),
    "prompt lookup": dict(do_sample=False, prompt_lookup_num_tokens=3),
    "prompt lookup sampling": dict(do_sample=True, top_k=0, prompt_lookup_num_tokens=3),
    "assistant": dict(do_sample=False, assistant=True),
    "assistant sampling": dict(do_sample=True, top_k=0, assistant=True),
}


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_stays_in_the_language(setup, mode):
    # assisted generation takes one sequence at a time; the others take a batch
    prompts = PROMPTS[:1] if "assist" in mode or "lookup" in mode else PROMPTS
    generated, _ = _run(setup, prompts, **dict(MODES[mode]))
    assert len(generated) == len(prompts) * MODES[mode].get("num_return_sequences", 1)


@pytest.mark.parametrize("mode", ["prompt lookup", "assistant"])
def test_greedy_assisted_equals_plain_greedy(setup, mode):
    """Assisted generation checks drafted tokens, then keeps a prefix of them: the
    processor rolls back to it, and greedy output is plain greedy output."""
    plain, _ = _run(setup, PROMPTS[:1], **MODES["greedy"])
    assisted, processor = _run(setup, PROMPTS[:1], **dict(MODES[mode]))
    assert assisted == plain
    # it did roll back: some call scored a shorter sequence than the call before it
    assert any(b < a for a, b in zip(processor.lengths, processor.lengths[1:]))
