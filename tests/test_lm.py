"""The one transformers adapter: a session's logits equal a fresh forward pass over each whole
context, whatever the session kept from earlier calls (grown rows, dropped rows, copied rows,
rollbacks, compaction), and it feeds only the tokens it has not seen."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import gramgen
from gramgen.generation import TransformersLM
from gramgen.generation.lm import KVSession, normalised_logprobs

V = 64


@pytest.fixture(scope="module")
def tiny():
    """A randomly initialised two-layer Llama over 64 one-byte tokens (EOS last), with
    no memo of earlier logits."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    model = LlamaForCausalLM(config).eval()
    vocab = gramgen.Vocabulary([bytes([97 + i % 26]) for i in range(V - 1)] + [b""],
                               eos_token_ids=[V - 1])
    return TransformersLM(model, vocab, memo_size=0)   # every call runs the session's cache


def fresh(lm, context, last=1):
    with torch.inference_mode():
        return lm.hf_model(input_ids=torch.tensor([context])).logits[0, -last:].float()


def assert_fresh(lm, contexts, logits, last=1):
    assert logits.shape == (len(contexts), last, V)
    for ctx, row in zip(contexts, logits):
        torch.testing.assert_close(row, fresh(lm, ctx, last), atol=1e-4, rtol=1e-4)


def test_a_session_reuses_its_rows_and_equals_fresh_forwards(tiny):
    rng = np.random.default_rng(0)
    session = tiny.session()
    a, b, c = ([int(t) for t in rng.integers(0, V - 1, n)] for n in (9, 5, 12))
    steps = [
        [a, b],                          # prefill, left-padded
        [a + [1], b + [2, 3, 4]],        # grown by different amounts (jump-forward)
        [b + [2, 3, 4, 5]],              # a row dropped (finished)
        [b + [2, 3, 4, 5, 6]] * 2,       # a row copied (resampled particles)
        [b + [2, 3, 4, 5, 6, 7], b + [2, 9]],   # one grows, one rolls back and branches
        [c, b + [2]],                    # an unrelated context beside a rollback
        [[60, 61, 62]],                  # only unrelated contexts: the cache starts anew
        [[60, 61, 7], c + [3]],          # ... then rolls back one token and branches
    ]
    fed = []
    for contexts in steps:
        before = tiny.tokens_run
        logits = session.logits(contexts)
        assert_fresh(tiny, contexts, logits)
        fed.append(tiny.tokens_run - before)
    # all of c, and only the one token of b + [2] that had been hidden; then all three
    # tokens of an unrelated context; then the one token replacing its last, and all of c + [3]
    assert fed[-3:] == [len(c) + 1, 3, 1 + len(c) + 1]


def test_logits_of_the_last_k_positions(tiny):
    """What speculative verification needs: one forward over several new tokens gives the
    logits after each of them."""
    session = tiny.session()
    base = [3, 1, 4, 1, 5]
    session.logits([base])
    draft = base + [9, 2, 6]
    assert_fresh(tiny, [draft], session.logits([draft], last=3), last=3)
    # rejecting two drafted tokens: the session rolls back, the logits stay exact
    assert_fresh(tiny, [draft[:-2] + [8]], session.logits([draft[:-2] + [8]], last=2), last=2)
    with pytest.raises(gramgen.ConfigurationError):
        session.logits([[1]], last=2)


def test_compaction_keeps_the_logits(tiny, monkeypatch):
    """Rollbacks leave hidden columns; once they fill more than half the cache it is
    rebuilt with each row's own columns, and the logits do not change."""
    monkeypatch.setattr(KVSession, "COMPACT_AFTER", 8)
    session = tiny.session()
    rng = np.random.default_rng(1)
    base = [int(t) for t in rng.integers(0, V - 1, 6)]
    compacted = False
    for i in range(12):
        contexts = [base + [i % 7, (i * 3) % 11], base + [5] * (i % 4 + 1)]
        assert_fresh(tiny, contexts, session.logits(contexts))
        compacted |= session._attention.shape[1] < len(base) + 2 * (i + 1)
    assert compacted


def test_next_logprobs_are_normalised_without_specials():
    vocab = gramgen.Vocabulary([b"a", b"b", b""], eos_token_ids=[2], special_ids=[1])
    rows = normalised_logprobs(torch.tensor([[0.0, 5.0, 1.0, 7.0]]), vocab)
    assert rows.shape == (1, 3) and rows.dtype == np.float64
    assert rows[0, 1] == -np.inf           # special, not EOS
    assert abs(np.logaddexp.reduce(rows[0])) < 1e-12   # the extra column is dropped


def test_the_memo_serves_contexts_scored_before(tiny):
    """Sampling the same prompt again reaches contexts scored before: their logits come
    from the model's memo, with no forward pass, in a new session too; a miss runs the
    model and is exact."""
    a, b = [5, 6, 7], [5, 6, 8, 9]
    tiny = TransformersLM(tiny.hf_model, tiny.vocab)
    first = tiny.session()
    first.logits([a, b])
    before = tiny.forward_passes
    again = tiny.session()
    logits = again.logits([b, a])
    assert not again.forwarded and tiny.forward_passes == before
    assert_fresh(tiny, [b, a], logits)
    logits = again.logits([a + [1], b])   # one miss: the model runs for the batch
    assert again.forwarded and tiny.forward_passes == before + 1
    assert_fresh(tiny, [a + [1], b], logits)
    off = TransformersLM(tiny.hf_model, tiny.vocab, memo_size=0).session()
    off.logits([a])
    assert off.forwarded and off.logits([a]) is not None and off.forwarded


def test_a_closed_session_hands_its_rows_to_the_next(tiny):
    """The next generate call on the same prompt feeds only what it adds; a session opened
    while another holds the rows starts empty (two at once never share a cache)."""
    prompt = [11, 12, 13, 14, 15, 16]
    first = tiny.session()
    first.logits([prompt])
    first.close()
    second = tiny.session()
    other = tiny.session()
    before = tiny.tokens_run
    assert_fresh(tiny, [prompt + [1]], second.logits([prompt + [1]]))
    assert tiny.tokens_run - before == 1
    assert_fresh(tiny, [prompt + [2]], other.logits([prompt + [2]]))
    assert tiny.tokens_run - before == 1 + len(prompt) + 1


def test_every_forward_gets_a_cache_object_and_warns_nothing(tiny, monkeypatch):
    """transformers deprecates the tuple-of-tensors cache (FutureWarning on every call in
    4.4x, where a model given no cache returns tuples): every forward gets a Cache object,
    prefill included, and a session's whole life (grow, drop, copy, rollback, compaction,
    hand-over) raises no deprecation warning."""
    import warnings

    from transformers import Cache

    monkeypatch.setattr(KVSession, "COMPACT_AFTER", 8)
    seen = []

    def record(module, args, kwargs):
        seen.append(kwargs.get(tiny._cache_arg))

    base = [7, 8, 9, 10]
    steps = [[base + [i % 5, 3], base + [4] * (i % 3 + 1)][: 1 + i % 2] for i in range(10)]
    scored = []
    handle = tiny.hf_model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            warnings.simplefilter("error", DeprecationWarning)
            session = tiny.session()
            scored = [(contexts, session.logits(contexts)) for contexts in steps]
            session.close()
            again = tiny.session()
            scored.append(([base + [1]], again.logits([base + [1]])))
            compacted = again._attention.shape[1] < len(base) + 10
    finally:
        handle.remove()
    assert compacted and len(seen) == len(scored)
    assert all(isinstance(cache, Cache) for cache in seen)
    for contexts, logits in scored:
        assert_fresh(tiny, contexts, logits)


def test_context_length_comes_from_the_config(tiny):
    from types import SimpleNamespace

    from gramgen.generation.lm import SyntheticLM, _config_context_length, context_length

    assert tiny.context_length == 512 and context_length(tiny) == 512
    assert _config_context_length(SimpleNamespace(n_positions=1024)) == 1024   # gpt2's name
    assert _config_context_length(SimpleNamespace(max_position_embeddings=None)) is None
    assert _config_context_length(None) is None
    assert context_length(SyntheticLM.hashed(tiny.vocab, context_length=8)) == 8
    assert context_length(SyntheticLM.hashed(tiny.vocab)) is None
    assert context_length(object()) is None
