"""gramgen.LogitsProcessor inside transformers' model.generate, with the real SmolLM2, and
its bookkeeping on hand-made inputs (reordered rows, beams, wide logits, finished rows)."""

from __future__ import annotations

import lark
import numpy as np
import pytest
import torch

from test_generate import PERSON, PROMPTS, shared_model

import gramgen


@pytest.fixture(scope="session")
def model() -> gramgen.Model:
    return shared_model()


@pytest.fixture(scope="session")
def person(model):
    return gramgen.compile(gramgen.Grammar.from_lark(PERSON), model.vocab)


def _generated(out, prompt_len: int, eos: set[int]) -> list[int]:
    tokens = out[prompt_len:].tolist()
    return tokens[:next((i for i, t in enumerate(tokens) if t in eos), len(tokens))]


def test_hf_greedy_equals_gramgen_generate(model, person):
    eos = set(model.vocab.eos_token_ids)
    for prompt in PROMPTS[2:]:
        ids = torch.tensor([model.prompt_ids(prompt)])
        out = model.hf_model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                      logits_processor=[gramgen.LogitsProcessor(person)],
                                      max_new_tokens=40)
        ours = gramgen.generate(model, prompt, lark=PERSON, max_new_tokens=40)
        assert _generated(out[0], ids.shape[1], eos) == ours.tokens
        assert int(out[0, ids.shape[1] + len(ours.tokens)]) in eos   # the grammar ended it


def _left_padded(model, prompts):
    tok = model.tokenizer
    side, tok.padding_side = tok.padding_side, "left"
    try:
        texts = [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                         add_generation_prompt=True) for p in prompts]
        return tok(texts, add_special_tokens=False, return_tensors="pt", padding=True)
    finally:
        tok.padding_side = side


@pytest.mark.parametrize("mode", ["sample", "beams"])
def test_hf_batches_sampling_and_beams_stay_in_the_language(model, person, mode):
    enc = _left_padded(model, PROMPTS[:2])
    options = (dict(do_sample=True, temperature=1.0, top_k=0) if mode == "sample"
               else dict(do_sample=False, num_beams=2))
    torch.manual_seed(3)
    processor = gramgen.LogitsProcessor(person)
    out = model.hf_model.generate(**enc, logits_processor=[processor], max_new_tokens=40,
                                  **options)
    assert processor.prompt_length == enc.input_ids.shape[1]
    eos = set(model.vocab.eos_token_ids)
    parser = lark.Lark(PERSON)
    for row in out:
        tokens = _generated(row, enc.input_ids.shape[1], eos)
        text = b"".join(model.vocab.token_bytes(t) for t in tokens).decode()
        parser.parse(text)


# -- bookkeeping on hand-made inputs (a tiny vocabulary, no model) -------------------------

@pytest.fixture()
def tiny():
    # tokens: 0 "a", 1 "b", 2 "ab", 3 EOS; language: a+ b
    vocab = gramgen.Vocabulary([b"a", b"b", b"ab", b""], eos_token_ids=[3])
    return gramgen.compile(gramgen.Grammar.from_regex("a+b"), vocab)


def _allowed(scores) -> list[list[int]]:
    return [torch.nonzero(torch.isfinite(row))[:, 0].tolist() for row in scores]


def test_masks_follow_each_row_and_reordering(tiny):
    proc = gramgen.LogitsProcessor(tiny)
    prompt = torch.tensor([[7, 7], [7, 7]])
    scores = torch.zeros((2, 4))
    assert _allowed(proc(prompt, scores)) == [[0, 2], [0, 2]]
    step1 = torch.tensor([[7, 7, 0], [7, 7, 2]])            # "a" | "ab"
    assert _allowed(proc(step1, scores)) == [[0, 1, 2], [3]]
    step2 = torch.tensor([[7, 7, 2, 3], [7, 7, 0, 1]])      # rows swapped (beam reorder)
    assert _allowed(proc(step2, scores)) == [[3], [3]]       # finished row: EOS only
    step3 = torch.tensor([[7, 7, 2, 3, 3], [7, 7, 0, 1, 3]])  # padding after EOS is ignored
    assert _allowed(proc(step3, scores)) == [[3], [3]]


def test_beams_sharing_a_parent_fork(tiny):
    proc = gramgen.LogitsProcessor(tiny)
    scores = torch.zeros((2, 4))
    proc(torch.tensor([[5], [5]]), scores)
    proc(torch.tensor([[5, 0], [5, 0]]), scores)
    # both beams extend "a" differently: each needs its own matcher
    assert _allowed(proc(torch.tensor([[5, 0, 0], [5, 0, 1]]), scores)) == [[0, 1, 2], [3]]
    states = proc.matchers()
    assert states[(0, 0)] is not states[(0, 1)]


def test_wider_logits_are_masked_and_devices_kept(tiny):
    proc = gramgen.LogitsProcessor(tiny)
    scores = torch.randn((1, 70))                # an embedding matrix padded past the vocab
    out = proc(torch.tensor([[1]]), scores)
    assert _allowed(out) == [[0, 2]]
    assert out.device == scores.device and out.dtype == scores.dtype
    assert torch.equal(out[0, [0, 2]], scores[0, [0, 2]])


def test_rows_with_rejected_tokens_get_eos_only(tiny):
    """Beam search keeps rows holding a token the mask banned (score -inf) when too few
    allowed continuations exist, and pads from beyond the vocabulary can appear there:
    such a row gets EOS only (never an all -inf row) and its siblings are unaffected."""
    proc = gramgen.LogitsProcessor(tiny)
    scores = torch.zeros((3, 70))
    proc(torch.tensor([[9], [9], [9]]), scores)
    out = proc(torch.tensor([[9, 1], [9, 0], [9, 64]]), scores)   # "b" first; an id past V
    assert _allowed(out) == [[3], [0, 1, 2], [3]]
    out = proc(torch.tensor([[9, 1, 3], [9, 0, 1], [9, 64, 0]]), scores)
    assert _allowed(out) == [[3], [3], [3]]
    with pytest.raises(gramgen.GramgenError, match="CompiledGrammar"):
        gramgen.LogitsProcessor(gramgen.Grammar.from_regex("a"))


def test_rolls_back_to_a_kept_prefix(tiny):
    """Assisted generation scores a drafted sequence position by position, then keeps a
    prefix of it plus one new token; a row may also skip ahead several tokens."""
    proc = gramgen.LogitsProcessor(tiny)
    scores = torch.zeros((1, 4))
    proc(torch.tensor([[9]]), scores)
    assert _allowed(proc(torch.tensor([[9, 0, 0, 2]]), scores)) == [[3]]   # skipped ahead
    assert _allowed(proc(torch.tensor([[9, 0]]), scores)) == [[0, 1, 2]]  # back to a prefix
    assert _allowed(proc(torch.tensor([[9, 1]]), scores)) == [[3]]        # a rejected draft
    assert _allowed(proc(torch.tensor([[9, 0, 0]]), scores)) == [[0, 1, 2]]
    assert list(proc.matchers()) == [(0, 0)]   # states no row holds are dropped
    assert proc.matchers()[(0, 0)].tokens == [0, 0]


@pytest.mark.parametrize("input_ids, scores, message", [
    ([[9], [9]], torch.zeros((3, 4)), "3 rows but input_ids has 2"),
    ([[9], [9]], torch.zeros((1, 4)), "1 rows but input_ids has 2"),
    ([[9]], torch.zeros((1, 1, 4)), "2-D"),
    ([9], torch.zeros((1, 4)), "2-D"),
    ([[9]], torch.zeros((1, 3)), "3 columns .* 4 tokens"),
    ([[9.0]], torch.zeros((1, 4)), "integer token ids"),
    ([[9]], np.zeros((1, 4)), "torch tensors"),
])
def test_bad_inputs_are_configuration_errors(tiny, input_ids, scores, message):
    proc = gramgen.LogitsProcessor(tiny)
    with pytest.raises(gramgen.ConfigurationError, match=message):
        proc(torch.tensor(input_ids), scores)


def test_a_reused_processor_says_to_make_a_new_one(tiny):
    proc = gramgen.LogitsProcessor(tiny)
    proc(torch.tensor([[9, 9, 9]]), torch.zeros((1, 4)))
    with pytest.raises(gramgen.ConfigurationError, match="new LogitsProcessor"):
        proc(torch.tensor([[9]]), torch.zeros((1, 4)))


def test_matches_matcher_masks_on_the_real_vocabulary(model, person):
    proc = gramgen.LogitsProcessor(person)
    text = '{"name":"Ada","age":36,"city":"London"}'
    tokens = model.tokenizer(text, add_special_tokens=False)["input_ids"]
    m = person.matcher()
    ids = [1, 2, 3]
    width = model.vocab_width
    for t in tokens:
        out = proc(torch.tensor([ids]), torch.zeros((1, width)))
        np.testing.assert_array_equal(torch.isfinite(out[0]).numpy(), m.mask()[:width])
        m.advance(t)
        ids.append(t)
