"""fill(): templates filled hole by hole with a causal LM, the rest kept feasible.

Synthetic models over small vocabularies (seeded random logits, and an adversarial model
that puts its weight on the tokens that break the text), random templates cut from valid
words: every output is a word of the grammar, keeps the fixed text verbatim and respects
each hole's bounds. FIM prompts are checked token by token with DeepSeek-Coder's
tokenizer, the prefix-only fallback with SmolLM2's, and one template with the real
SmolLM2 model.
"""

from __future__ import annotations

import functools
import json
import random

import numpy as np
import pytest

from conftest import ROOT, hf_tokenizer, vocabulary
from synthetic import small_vocab

import gramgen
from gramgen import ConfigurationError, Hole
from gramgen.generation import SyntheticLM, target_for
from gramgen.generation.fill import FillResult, fill, fim_format
from gramgen.testing import accepts

PIECES = ['{"', '{', '}', '"', ':', ',', ' ', 'a', 'b', 'c', '1', '2', '0', '[', ']', '":', '",', '"}',
          ' "', 'ab', '12', 'name', 'age', 'tags', 'ok', 'true', 'false', 'null', 't', 'r', 'u', 'e',
          'n', 'm', 'g', 's', 'o', 'k', 'f', 'l', '-', '3', '4', '5', '6', '7', '8', '9']
SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 6},
                         "age": {"type": "integer"},
                         "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                         "ok": {"type": "boolean"}},
          "required": ["name", "age", "tags", "ok"]}
WORDS = ['{"name": "ab", "age": 12, "tags": ["a", "b"], "ok": true}',
         '{"name": "", "age": -3, "tags": [], "ok": false}',
         '{"name": "cab", "age": 120, "tags": ["ab"], "ok": true}']
#: what the adversarial model wants most: ends of strings and objects, EOS, a special id
BREAKING = ['"', '}', '"}', ',', '",', ']', ':']


@functools.cache
def setup():
    vocab = small_vocab(PIECES)
    return vocab, target_for(vocab, schema=SCHEMA).compiled   # what fill(schema=) compiles


def adversarial(vocab, seed: int = 0) -> SyntheticLM:
    """Seeded noise plus a large bias on the tokens that close strings, objects and the
    text: a model that keeps trying to break the template."""
    bias = {PIECES.index(p): 6.0 for p in BREAKING}
    bias.update({t: 8.0 for t in (*vocab.eos_token_ids, *vocab.special_ids)})
    return SyntheticLM.hashed(vocab, seed=seed, bias=bias)


def interleave(template, fillings) -> str:
    it = iter(fillings)
    return "".join(next(it) if isinstance(p, Hole) else p for p in template)


def check_result(cg, template, result: FillResult) -> None:
    """The invariants of every fill: valid text, fixed text verbatim, bounds kept."""
    assert accepts(cg, result.text), result.text
    holes = [p for p in template if isinstance(p, Hole)]
    assert len(result.fillings) == len(holes) == len(result.tokens)
    assert result.text == interleave(template, result.fillings)
    for hole, filling, ids in zip(holes, result.fillings, result.tokens):
        size = len(filling.encode())
        assert size >= hole.min_bytes and (hole.max_bytes is None or size <= hole.max_bytes), (hole, filling)
        if hole.tokens is not None and result.finish_reason == "done":
            assert len(ids) == hole.tokens
        if hole.max_tokens is not None and result.finish_reason == "done":
            assert len(ids) <= hole.max_tokens
    assert json.loads(result.text) == result.value


def greedy_spelling(vocab, text: str) -> list[int]:
    """Longest-token-first ids spelling ``text`` in the small vocabulary."""
    data, ids = text.encode(), []
    by_bytes = {b: i for i, b in enumerate(vocab.tokens) if b}
    while data:
        n = max(k for k in range(1, len(data) + 1) if data[:k] in by_bytes)
        ids.append(by_bytes[data[:n]])
        data = data[n:]
    return ids


def random_template(rng: random.Random, vocab) -> list:
    """A valid word with 1 to 3 spans of up to 12 bytes cut out, each a hole of a random
    kind whose bounds the cut text meets (so the template is feasible)."""
    word = rng.choice(WORDS)
    starts = sorted(rng.sample(range(len(word) + 1), rng.randint(1, 3)))
    ends = [min(lo + rng.randint(0, 12), nxt) for lo, nxt in zip(starts, starts[1:] + [len(word)])]
    template, last = [], 0
    for lo, hi in zip(starts, ends):
        span = word[lo:hi]
        template.append(word[last:lo])
        kind = rng.randrange(5)
        if kind == 0:
            hole = Hole()
        elif kind == 1:
            hole = Hole(min_bytes=rng.randint(0, len(span)), max_bytes=len(span) + rng.randint(0, 3))
        elif kind == 2:
            hole = Hole(max_bytes=len(span) + rng.randint(0, 2))
        elif kind == 3:
            hole = Hole(tokens=len(greedy_spelling(vocab, span)))
        else:
            hole = Hole(max_tokens=len(greedy_spelling(vocab, span)) + rng.randint(0, 2))
        template.append(hole)
        last = hi
    template.append(word[last:])
    return [p for p in template if p != ""]


@pytest.mark.parametrize("model_kind", ["hashed", "adversarial"])
def test_random_templates_are_filled_validly(model_kind):
    vocab, cg = setup()
    rng = random.Random(23)
    rejections = 0
    for i in range(40):
        template = random_template(rng, vocab)
        lm = SyntheticLM.hashed(vocab, seed=i) if model_kind == "hashed" else adversarial(vocab, seed=i)
        result = fill(lm, template, schema=SCHEMA, max_new_tokens=64, temperature=0.0 if i % 2 else 1.0, seed=i)
        check_result(cg, template, result)
        rejections += result.stats.rejections
    if model_kind == "adversarial":
        assert rejections > 40   # the model keeps proposing breaking tokens, and they are refused


def test_person_template_with_adversarial_model_keeps_bounds_and_closes_holes():
    vocab, cg = setup()
    template = ['{"name": ', Hole(min_bytes=4, max_bytes=6), ', "age": ', Hole(max_bytes=3),
                ', "tags": ', Hole(), ', "ok": ', Hole(), '}']
    for seed in range(10):
        result = fill(adversarial(vocab, seed), template, schema=SCHEMA, max_new_tokens=64)
        check_result(cg, template, result)
        assert result.finish_reason == "done"
        assert result.stats.new_tokens == sum(map(len, result.tokens))
        assert result.stats.forward_passes >= result.stats.new_tokens


def test_suffix_condition_refuses_what_the_prefix_allows():
    """In ``a+b`` with template [Hole(), "b"], a model that wants "b" in the hole gets "a"s:
    "ab" is a valid prefix (the matcher alone would allow it) but "ab" + "b" is not."""
    vocab = small_vocab(["a", "b", "ab"])
    cg = gramgen.compile(gramgen.Grammar.from_regex("a+b"), vocab)
    lm = SyntheticLM.hashed(vocab, seed=1, bias={1: 20.0, 2: 15.0})
    result = fill(lm, [Hole(max_bytes=3), "b"], grammar=cg, max_new_tokens=8)
    assert accepts(cg, result.text) and result.text.endswith("b")
    assert set(result.fillings[0]) == {"a"}
    assert result.stats.rejections > 0


def test_sampling_is_reproducible_with_a_seed():
    vocab, cg = setup()
    template = ['{"name": ', Hole(), ', "age": ', Hole(), ', "tags": ', Hole(), ', "ok": true}']
    lm = SyntheticLM.hashed(vocab, seed=5, scale=1.0)
    runs = [fill(lm, template, grammar=cg, temperature=1.0, seed=s).text for s in (1, 1, 2, 3, 4)]
    assert runs[0] == runs[1]
    assert len(set(runs)) > 1


def test_budget_exhausted_is_completed_from_the_witness():
    vocab, cg = setup()
    template = ['{"name": ', Hole(), ', "age": ', Hole(), ', "tags": ', Hole(), ', "ok": ', Hole(), '}']
    result = fill(SyntheticLM.hashed(vocab, seed=0), template, schema=SCHEMA, max_new_tokens=2)
    check_result(cg, template, result)
    assert result.finish_reason == "max_new_tokens"
    assert result.stats.new_tokens == 2


def test_template_without_holes_is_only_checked():
    vocab, cg = setup()
    result = fill(SyntheticLM.hashed(vocab), [WORDS[0]], grammar=cg)
    assert result.text == WORDS[0] and result.fillings == [] and result.stats.forward_passes == 0
    with pytest.raises(ConfigurationError, match="template"):
        fill(SyntheticLM.hashed(vocab), [WORDS[0][:-1]], grammar=cg)


def test_bad_templates_raise_before_any_model_work():
    vocab, cg = setup()
    lm = SyntheticLM.hashed(vocab)
    with pytest.raises(ConfigurationError, match=r"template\[0\].*nme"):
        fill(lm, ['{"nme": ', Hole(), '}'], grammar=cg)
    with pytest.raises(ConfigurationError, match=r"template\[2\].*1\.5"):
        fill(lm, ['{"name": ', Hole(), ', "age": 1.5', Hole(), '}'], grammar=cg)
    with pytest.raises(ConfigurationError, match=r"template\[2\].*Hole\(max_bytes=1\)"):
        fill(lm, ['{"name": ', Hole(max_bytes=1), ', "age": 1, "tags": [], "ok": true}'], grammar=cg)
    with pytest.raises(ConfigurationError, match=r"template\[1\] is int"):
        fill(lm, ['{"name": ', 3, '}'], grammar=cg)
    with pytest.raises(ConfigurationError, match="list of str"):
        fill(lm, '{"name": "a"}', grammar=cg)
    with pytest.raises(ConfigurationError, match="fill-in-the-middle"):
        fill(lm, ['{"name": ', Hole(), '}'], grammar=cg, fim=True)
    for bad in (dict(max_new_tokens=0), dict(temperature=-1.0), dict(seed=-1), dict(fim="yes"),
                dict(prompt=3.5)):
        with pytest.raises(ConfigurationError):
            fill(lm, ['{"name": ', Hole(), '}'], grammar=cg, **bad)
    assert lm.calls == 0


# -- prompts: fill-in-the-middle and prefix-only -------------------------------------------------

CODE = r'''
start: "def " NAME "(" NAME "):\n    return " expr "\n"
expr: NAME | NUMBER | expr " + " expr
NAME: /[a-z_]+/
NUMBER: /[0-9]+/
'''
CODE_TEMPLATE = ["def ", Hole(), "(x):\n    return ", Hole(), "\n"]


def recording_model(name: str, middle_tokens: int | None = None):
    """A seeded synthetic model over a real tokenizer's vocabulary that records every
    context it scores; with ``middle_tokens``, it wants EOS once the FIM middle has that
    many tokens."""
    tokenizer, vocab = hf_tokenizer(name), vocabulary(name)
    base = SyntheticLM.hashed(vocab, seed=3)
    seen: list[tuple[int, ...]] = []
    middle = fim_format(base) if middle_tokens is not None else None

    def logits(context):
        seen.append(context)
        row = base._fn(context)
        if middle is not None and middle.middle_id in context:
            written = len(context) - 1 - max(i for i, t in enumerate(context) if t == middle.middle_id)
            if written >= middle_tokens:
                row[list(vocab.eos_token_ids)] = 50.0
        return row

    lm = SyntheticLM(vocab, logits)
    lm.tokenizer = tokenizer
    return lm, seen


def test_deepseek_coder_fim_tokens_are_found():
    lm, _ = recording_model("deepseek-coder")
    fmt = fim_format(lm)
    tok = lm.tokenizer
    assert fmt.name == "deepseek-coder"
    assert lm.vocab.token_bytes(fmt.prefix_id) == "<｜fim▁begin｜>".encode()
    assert lm.vocab.token_bytes(fmt.suffix_id) == "<｜fim▁hole｜>".encode()
    assert lm.vocab.token_bytes(fmt.middle_id) == "<｜fim▁end｜>".encode()
    assert tok.eos_token_id in fmt.end_ids and tok.convert_tokens_to_ids("<|EOT|>") in fmt.end_ids


def test_fim_prompt_is_prefix_then_suffix_up_to_the_next_hole():
    lm, seen = recording_model("deepseek-coder", middle_tokens=2)
    fmt, tok = fim_format(lm), lm.tokenizer
    cg = gramgen.compile(gramgen.Grammar.from_lark(CODE), lm.vocab)
    result = fill(lm, CODE_TEMPLATE, grammar=cg, prompt="# add x to a constant\n", max_new_tokens=20)
    assert result.fim and accepts(cg, result.text)
    assert [len(t) for t in result.tokens] == [2, 2]   # the end-of-middle token closed each hole
    starts = [c for c in seen if c[-1] == fmt.middle_id]
    assert len(starts) == 2
    for k, context in enumerate(starts):
        assert context[0] == tok.bos_token_id and context[1] == fmt.prefix_id
        hole = context.index(fmt.suffix_id)
        prefix, suffix = tok.decode(context[2:hole]), tok.decode(context[hole + 1:-1])
        if k == 0:
            assert (prefix, suffix) == ("# add x to a constant\ndef ", "(x):\n    return ")
        else:
            assert prefix == "# add x to a constant\ndef " + result.fillings[0] + "(x):\n    return "
            assert suffix == "\n"
    # every later context is a start plus the middle written so far
    for context in seen:
        start = next(s for s in starts if context[:len(s)] == s)
        assert len(context) - len(start) <= 2


def test_no_fim_tokens_falls_back_to_prefix_only():
    lm, seen = recording_model("smollm2")
    assert fim_format(lm) is None
    cg = gramgen.compile(gramgen.Grammar.from_lark(CODE), lm.vocab)
    with pytest.raises(ConfigurationError, match="no fill-in-the-middle tokens"):
        fill(lm, CODE_TEMPLATE, grammar=cg, fim=True)
    result = fill(lm, CODE_TEMPLATE, grammar=cg, prompt="# add x\n", chat=False, max_new_tokens=12)
    assert not result.fim and accepts(cg, result.text)
    prompt = lm.tokenizer.encode("# add x\n", add_special_tokens=False)
    first = seen[0]
    assert list(first[:len(prompt)]) == prompt
    # the text before the first hole, its last token taken back (healing): "def" then " NAME"
    assert lm.tokenizer.decode(first[len(prompt):]) in ("def", "def ")
    assert result.text.startswith("def ") and result.tokens[0]


def test_starcoder_style_markers_in_a_small_vocabulary_are_never_generated():
    pieces = PIECES + ["<fim_prefix>", "<fim_suffix>", "<fim_middle>"]
    vocab = small_vocab(pieces)
    cg = gramgen.compile(gramgen.Grammar.from_regex(r'"[^"]*"'), vocab)
    marks = {pieces.index(p) for p in ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")}
    lm = SyntheticLM.hashed(vocab, seed=2, bias={m: 30.0 for m in marks})
    assert fim_format(lm).name == "starcoder"
    result = fill(lm, ['"', Hole(max_bytes=12), '"'], grammar=cg, max_new_tokens=12)
    assert result.fim and accepts(cg, result.text)
    assert not marks & set(result.tokens[0]) and "<fim" not in result.text
    plain = fill(lm, ['"', Hole(), '"'], grammar=cg, fim=False, max_new_tokens=12)
    assert not plain.fim and not marks & set(plain.tokens[0]) and "<fim" not in plain.text


# -- the real model ---------------------------------------------------------------------------

@functools.cache
def smollm2() -> gramgen.Model:
    import torch

    torch.set_num_threads(1)
    return gramgen.load_model("smollm2", device="cpu")


def test_smollm2_fills_a_person_template():
    model = smollm2()
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "born": {"type": "integer"},
                                               "city": {"type": "string"}},
              "required": ["name", "born", "city"]}
    template = ['{"name": ', Hole(), ', "born": ', Hole(max_bytes=4), ', "city": ', Hole(), '}']
    result = fill(model, template, schema=schema, max_new_tokens=40,
                  prompt="Marie Curie was born in Warsaw in 1867. Give her name, birth year and city as JSON.")
    assert not result.fim and result.finish_reason == "done"
    assert result.text == interleave(template, result.fillings)
    assert result.value == json.loads(result.text) and set(result.value) == {"name", "born", "city"}
    assert len(result.fillings[1]) <= 4 and isinstance(result.value["born"], int)
    assert "Curie" in result.value["name"]
    assert result.stats.forward_passes <= result.stats.new_tokens + 3
    assert np.isfinite(result.stats.seconds)


def test_bench_templates_spell_the_gold_values_in_the_default_layout():
    """bench/fill.py's templates: the gold values in the holes give the gold object in the
    layout generate() uses, so fill and left-to-right are asked for the same text."""
    import sys

    sys.path.insert(0, str(ROOT))
    from bench.extraction import load_documents
    from bench.fill import template_for

    for doc in load_documents(3):
        grammar = gramgen.Grammar.from_json_schema(doc["schema"], whitespace="standard", strict=True)
        gold = doc["gold"]
        for quoted in (False, True):
            values = [json.dumps(v, ensure_ascii=False) for v in gold.values()]
            if quoted:
                values = [v[1:-1] if isinstance(g, str) else v for v, g in zip(values, gold.values())]
            text = interleave(template_for(doc["schema"], quoted), values)
            assert text == json.dumps(gold, ensure_ascii=False) and accepts(grammar, text)
