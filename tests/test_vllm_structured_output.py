"""gramgen's vLLM structured-output backend without vLLM: what each kind of constraint means,
the grammar object vLLM's scheduler drives (validate_tokens, accept_tokens, rollback,
fill_bitmask in vLLM's int32 layout, is_terminated, reset) driven the way vLLM 0.32's
StructuredOutputManager drives it under speculative decoding, its counters, and the opt-in
hook doing nothing without the environment variable.

The same objects run inside a real vLLM engine in tests_vllm/test_structured_output.py."""

from __future__ import annotations

import json
import sys

import jsonschema
import numpy as np
import pytest
import torch

from conftest import hf_tokenizer, vocabulary

import gramgen
from gramgen.automata import bitmask as packed
from gramgen.vllm import structured_output as so
from gramgen.vllm.structured_output import GramgenGrammar, check_constraint, compiled_for, constraint_grammar

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"]}


@pytest.fixture(scope="module")
def vocab() -> gramgen.Vocabulary:
    return vocabulary("smollm2")


def encode(text: str) -> list[int]:
    return hf_tokenizer("smollm2").encode(text, add_special_tokens=False)


def accepts(kind: str, spec: str, vocab, text: str) -> bool:
    m = compiled_for(kind, spec, vocab).matcher()
    try:
        m.advance_text(text)
    except gramgen.GramgenError:   # TextRejected
        return False
    return m.is_accepting()


# -- the constraints ------------------------------------------------------------------------------

def test_grammar_field_is_gbnf_when_a_line_defines_a_rule_with_the_gbnf_arrow():
    assert so.grammar_syntax('root ::= "a" | "b"') == "gbnf"
    assert so.grammar_syntax('# comment\n  value-list ::= [0-9]+\nroot ::= value-list') == "gbnf"
    assert so.grammar_syntax('start: "a::=b"\n') == "lark"      # ::= only inside a string
    assert so.grammar_syntax("start: item+\nitem: /[a-c]/\n") == "lark"


def test_each_kind_means_what_vllm_users_expect(vocab):
    schema = json.dumps(PERSON)
    assert accepts("json", schema, vocab, '{"name": "Ann", "age": 7}')
    assert not accepts("json", schema, vocab, '{"name": "Ann", "age": 7, "x": 1}')  # strict
    assert not accepts("json", schema, vocab, '{"name": "Annabelle", "age": 7}')    # maxLength
    assert accepts("json_object", "", vocab, '{"anything": [1, "two"]}')
    assert not accepts("json_object", "", vocab, "[1]")
    assert accepts("regex", r"(yes|no)-[0-9]{2}", vocab, "no-42")
    assert not accepts("regex", r"(yes|no)-[0-9]{2}", vocab, "no-4")
    assert accepts("grammar", 'root ::= "x=" [0-9]+', vocab, "x=12")          # GBNF
    assert accepts("grammar", 'start: "(" /[a-c]+/ ")"', vocab, "(abc)")      # Lark
    choices = ["a b", "x#y", "c.d", 'q"u', "n\nl", "ünï", "(?)"]
    for choice in choices:
        assert accepts("choice", json.dumps(choices), vocab, choice), choice
    for other in ["a", "a bx", "cxd", "(", "?"]:
        assert not accepts("choice", json.dumps(choices), vocab, other), other


def test_unsupported_and_malformed_constraints_fail_with_gramgen_errors_naming_them():
    with pytest.raises(gramgen.ConfigurationError, match="structural_tag"):
        check_constraint("structural_tag", '{"structures": []}')
    with pytest.raises(gramgen.ConfigurationError, match=r"structured_outputs\.json: SchemaError"):
        check_constraint("json", json.dumps({"type": "integer", "minimum": "zero"}))
    with pytest.raises(gramgen.ConfigurationError, match=r"structured_outputs\.json is not JSON"):
        check_constraint("json", "{nope")
    with pytest.raises(gramgen.ConfigurationError, match=r"structured_outputs\.grammar: GrammarError"):
        check_constraint("grammar", 'root ::= "a" (')
    with pytest.raises(gramgen.ConfigurationError, match="non-empty list of strings"):
        check_constraint("choice", "[]")
    with pytest.raises(gramgen.ConfigurationError, match=r"structured_outputs\.regex"):
        check_constraint("regex", "(unclosed")
    check_constraint("json", json.dumps(PERSON))   # a good one passes (and is remembered)
    assert isinstance(constraint_grammar("json", json.dumps(PERSON)), gramgen.Grammar)


def test_layout_options_gramgen_cannot_honour_are_refused():
    from types import SimpleNamespace

    so._check_options(SimpleNamespace(disable_any_whitespace=False, whitespace_pattern=None, json_object=None,
                                      disable_additional_properties=True))
    with pytest.raises(gramgen.ConfigurationError, match="disable_any_whitespace"):
        so._check_options(SimpleNamespace(disable_any_whitespace=True, whitespace_pattern=None))
    with pytest.raises(gramgen.ConfigurationError, match="whitespace_pattern"):
        so._check_options(SimpleNamespace(disable_any_whitespace=False, whitespace_pattern=r"[ ]?"))
    with pytest.raises(gramgen.ConfigurationError, match="json_object"):
        so._check_options(SimpleNamespace(json_object=False))


def test_compiled_grammars_are_cached_per_constraint_and_vocabulary(vocab):
    spec = json.dumps(PERSON)
    assert compiled_for("json", spec, vocab) is compiled_for("json", spec, vocab)
    assert compiled_for("json", spec, vocab) is not compiled_for("regex", "[0-9]+", vocab)
    other = gramgen.Vocabulary([vocab.token_bytes(i) for i in range(vocab.size)],
                               eos_token_ids=sorted(set(vocab.eos_token_ids) | {encode("!")[0]}),
                               special_ids=vocab.special_ids)
    assert compiled_for("json", spec, other) is not compiled_for("json", spec, vocab)


# -- the grammar object ---------------------------------------------------------------------------

def test_validate_tokens_returns_the_accepted_prefix_and_changes_nothing(vocab):
    g = GramgenGrammar(compiled_for("json", json.dumps(PERSON), vocab))
    good = encode('{"name": "Al", "age": 5}')
    assert g.validate_tokens(good) == good
    assert g.matcher.tokens == []
    head = encode('{"name": "')
    bad = head + encode("abcdefghij")          # longer than maxLength 6
    prefix = g.validate_tokens(bad)
    assert prefix == bad[:len(prefix)] and len(head) <= len(prefix) < len(bad)
    assert g.matcher.tokens == []
    assert g.validate_tokens([vocab.size + 5, *good]) == []   # an id beyond the vocabulary cuts there
    assert g.accept_tokens("r", head)
    assert g.validate_tokens(encode("Ann")) == encode("Ann")
    assert g.matcher.tokens == head


def test_rollback_undoes_exactly_n_accepted_tokens(vocab):
    g = GramgenGrammar(compiled_for("json", json.dumps(PERSON), vocab))
    text = '{"name": "Al", "age": 5}'
    tokens = encode(text)
    assert g.accept_tokens("r", tokens)
    masks = []
    probe = np.zeros((1, packed.n_words(vocab.size)), dtype=np.int32)
    g2 = GramgenGrammar(compiled_for("json", json.dumps(PERSON), vocab))
    for t in tokens:                                  # the mask after each prefix
        g2.fill_bitmask(probe, 0)
        masks.append(probe.copy())
        g2.accept_tokens("r", [t])
    for n in (3, 1, 2):
        g.rollback(n)
        tokens = tokens[:-n]
        assert g.matcher.tokens == tokens
        g.fill_bitmask(probe, 0)
        assert np.array_equal(probe, masks[len(tokens)])
    with pytest.raises(gramgen.ConfigurationError):
        g.rollback(len(tokens) + 1)
    g.rollback(0)
    assert g.matcher.tokens == tokens


def test_eos_only_when_complete_then_terminated_and_reset(vocab):
    g = GramgenGrammar(compiled_for("regex", "(yes|no)-[0-9]{2}", vocab))
    eos = min(vocab.eos_token_ids)
    assert not g.accept_tokens("r", encode("no-4") + [eos])     # EOS before the text is complete
    assert g.matcher.tokens == encode("no-4")
    assert g.accept_tokens("r", encode("2") + [eos, encode("x")[0]])   # after EOS: ignored
    assert g.is_terminated()
    assert g.validate_tokens(encode("1")) == []
    mask = np.zeros((1, packed.n_words(vocab.size)), dtype=np.int32)
    g.fill_bitmask(mask, 0)
    assert np.flatnonzero(packed.unpack(mask[0].view(np.uint32), vocab.size)).tolist() == sorted(vocab.eos_token_ids)
    g.rollback(1)
    assert not g.is_terminated()
    g.reset()
    assert g.matcher.tokens == [] and not g.is_terminated()


def test_bitmask_is_vllms_int32_layout_over_the_padded_vocabulary(vocab):
    """vLLM's bitmask has ceil(model vocab / 32) int32 columns, bit t % 32 of word t // 32
    for token t (xgrammar's layout, which vLLM applies); columns past the tokenizer's are
    zero, whatever the tensor held before."""
    padded = vocab.size + 100
    g = GramgenGrammar(compiled_for("regex", "[0-9]+", vocab), padded)
    bitmask = torch.full((3, packed.n_words(padded)), -1, dtype=torch.int32)
    g.fill_bitmask(bitmask, 1)
    row = bitmask[1].numpy().view(np.uint32)
    allowed = np.flatnonzero(packed.unpack(row, padded))
    expected = np.flatnonzero(g.matcher.mask())
    assert allowed.tolist() == expected.tolist()
    assert all(vocab.token_bytes(int(t)).isdigit() for t in allowed)
    assert (bitmask[0] == -1).all() and (bitmask[2] == -1).all()   # other rows untouched
    logits = torch.zeros(1, padded)                                # applied as vLLM would
    bits = torch.from_numpy(packed.unpack(row, padded))
    masked = logits.masked_fill(~bits, float("-inf"))
    assert torch.isfinite(masked).sum().item() == len(expected)
    # a model vocabulary smaller than the tokenizer's: the mask is cut to its width
    small = GramgenGrammar(compiled_for("regex", "[0-9]+", vocab), 64)
    narrow = np.full((1, 2), -1, dtype=np.int32)
    small.fill_bitmask(narrow, 0)
    assert np.flatnonzero(packed.unpack(narrow[0].view(np.uint32), 64)).tolist() == \
        [t for t in expected.tolist() if t < 64]


def test_a_dead_end_allows_only_eos_and_then_fails_the_request():
    vocab = gramgen.Vocabulary([b"a", b"b", b""], eos_token_ids=[2])
    g = GramgenGrammar(gramgen.compile(gramgen.Grammar.from_regex("ac"), vocab))
    assert g.accept_tokens("r", [0])
    mask = np.zeros((1, 1), dtype=np.int32)
    g.fill_bitmask(mask, 0)
    assert packed.unpack(mask[0].view(np.uint32), 3).tolist() == [False, False, True]
    assert g.dead
    assert not g.accept_tokens("r", [2])


def scheduler_step(g: GramgenGrammar, drafts: list[int], sampled: list[int], width: int) -> list:
    """One step of vLLM 0.32's StructuredOutputManager under speculative decoding: cut the
    drafts (validate_tokens), fill one mask per draft position and one for the bonus token
    by advancing over the drafts, roll back, then advance over what the model accepted
    (``sampled``: the accepted drafts and the token sampled after them)."""
    drafts = g.validate_tokens(drafts)
    bitmask = torch.zeros((len(drafts) + 1, width), dtype=torch.int32)
    advanced = 0
    for i, token in enumerate(drafts):
        g.fill_bitmask(bitmask, i)
        if not g.is_terminated() and g.accept_tokens("r", [token]):
            advanced += 1
    g.fill_bitmask(bitmask, len(drafts))
    if advanced:
        g.rollback(advanced)
    assert g.accept_tokens("r", sampled)
    return drafts


def test_speculative_steps_roll_back_rejected_drafts_and_count_them(vocab):
    so.reset_stats()
    spec = json.dumps(PERSON)
    g = GramgenGrammar(compiled_for("json", spec, vocab))
    width = packed.n_words(vocab.size)
    text = encode('{"name": "')
    assert g.accept_tokens("r", text)
    # the drafter proposes a name too long for maxLength: the grammar cuts it
    long_name = encode("abcdefghijkl")
    kept = scheduler_step(g, long_name, long_name[:1], width)
    assert len(kept) < len(long_name)
    # the model rejects the second draft token and samples another
    drafts = encode('x", "age": 4')
    alternative = encode("Al")[0]
    scheduler_step(g, drafts, drafts[:1] + [alternative], width)
    done = encode('", "age": 4}')
    scheduler_step(g, [], done, width)
    text = text + long_name[:1] + drafts[:1] + [alternative] + done
    assert g.matcher.tokens == text
    jsonschema.validate(json.loads(g.matcher.text_bytes()), PERSON)
    counted = so.stats()
    assert counted["drafts_cut"] == 1 and counted["draft_tokens_cut"] == len(long_name) - len(kept)
    assert counted["rollbacks"] == 2 and counted["tokens_rolled_back"] == len(kept) + len(drafts)
    assert counted["draft_tokens_kept_by_model"] == 2
    assert counted["draft_tokens_rejected_by_model"] == len(kept) - 1 + len(drafts) - 1


def test_without_the_environment_variable_register_changes_nothing(monkeypatch):
    monkeypatch.delenv(so.ENV, raising=False)
    before = set(sys.modules)
    so.register()
    assert not so._patched
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] == "vllm"}
    if "vllm.sampling_params" in sys.modules:
        assert not hasattr(sys.modules["vllm.sampling_params"].SamplingParams._validate_structured_outputs,
                           "__wrapped__")


def test_the_backend_refuses_to_be_built_without_vllm():
    if so._VLLM_MISSING is None:
        pytest.skip("vLLM is importable here; tests_vllm/ runs the backend in a real engine")
    with pytest.raises(gramgen.ConfigurationError, match="not importable"):
        so.GramgenBackend(object())
