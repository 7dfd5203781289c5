"""gramgen.vllm without vLLM: the per-request arguments, the row bookkeeping of
ConstrainedBatch driven by hand-made BatchUpdates (rows added, removed, moved, swapped,
preempted and re-added, output lists that grow, shrink or hold placeholders), the masks it
writes into torch logits, and the engine checks of validate_params.

The same protocol runs inside a real vLLM engine in tests_vllm/ (its own virtualenv)."""

from __future__ import annotations

import enum
import json
import random
from dataclasses import dataclass, field
from types import SimpleNamespace

import jsonschema
import numpy as np
import pytest
import torch

from conftest import vocabulary

import gramgen
import gramgen.testing
from gramgen.vllm import GramgenLogitsProcessor, extra_args
from gramgen.vllm.batch import ConstrainedBatch
from gramgen.vllm.params import Request, check_request, request_of

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"]}
COLOR = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                          "ok": {"type": "boolean"}},
         "required": ["color", "ok"]}
DIGITS = r"[0-9]{2,4}"


class Direction(enum.Enum):   # the shape of vLLM's MoveDirectionality
    UNIDIRECTIONAL = enum.auto()
    SWAP = enum.auto()


@dataclass
class Update:                 # the shape of vLLM's BatchUpdate
    batch_size: int
    removed: list = field(default_factory=list)
    added: list = field(default_factory=list)
    moved: list = field(default_factory=list)


def params(**constraint) -> SimpleNamespace:
    return SimpleNamespace(extra_args=extra_args(**constraint) if constraint else None)


@pytest.fixture(scope="module")
def vocab() -> gramgen.Vocabulary:
    return vocabulary("smollm2")


def new_batch(vocab, calls=None) -> ConstrainedBatch:
    def load():
        if calls is not None:
            calls.append(1)
        return vocab
    return ConstrainedBatch(load)


_REFERENCE: dict[str, gramgen.CompiledGrammar] = {}


def reference(vocab, tokens, **constraint) -> np.ndarray:
    """The mask after ``tokens`` under ``constraint``, from a matcher of gramgen's own."""
    (kind, value), = constraint.items()
    key = json.dumps([kind, value])
    if key not in _REFERENCE:
        grammar = (gramgen.Grammar.from_json_schema(value, strict=True) if kind == "schema"
                   else gramgen.Grammar.from_regex(value))
        _REFERENCE[key] = gramgen.compile(grammar, vocab)
    m = _REFERENCE[key].matcher()
    for t in tokens:
        m.advance(t)
    return m.mask()


def allowed(logits_row: torch.Tensor, size: int) -> np.ndarray:
    return torch.isfinite(logits_row[:size]).numpy()


def test_a_batch_of_two_schemas_and_an_unconstrained_row_runs_to_complete_json(vocab):
    """The protocol vLLM follows: rows added with live output lists, then each step the
    logits are masked, a token is sampled per row and appended to its list. Every
    constrained row ends (EOS) with JSON valid for its schema; the unconstrained row's
    logits are never touched."""
    batch = new_batch(vocab)
    outputs = [[], [], []]
    batch.update(Update(3, added=[(0, params(schema=PERSON), [1], outputs[0]),
                                  (1, params(), [1], outputs[1]),
                                  (2, params(schema=COLOR), [1], outputs[2])]))
    assert sorted(batch.rows) == [0, 2]
    rng = torch.Generator().manual_seed(0)
    done = [False, False, False]
    eos = set(vocab.eos_token_ids)
    for _ in range(200):
        logits = torch.randn(3, vocab.size, generator=rng)
        before = logits.clone()
        out = batch.apply(logits)
        assert torch.equal(out[1], before[1])
        for r, schema in ((0, PERSON), (2, COLOR)):
            if not done[r]:
                assert np.array_equal(allowed(out[r], vocab.size),
                                      reference(vocab, outputs[r], schema=schema))
        for r in range(3):
            if not done[r]:
                token = int(torch.multinomial(torch.softmax(out[r], -1), 1, generator=rng))
                outputs[r].append(token)
                done[r] = token in eos or (r == 1 and len(outputs[r]) >= 5)
        if all(done):
            break
    assert all(done)
    for r, schema in ((0, PERSON), (2, COLOR)):
        assert outputs[r][-1] in eos
        text = b"".join(vocab.token_bytes(t) for t in outputs[r][:-1]).decode()
        jsonschema.validate(json.loads(text), schema)


def test_rows_follow_moves_swaps_and_removals(vocab):
    batch = new_batch(vocab)
    a, b, c = [], [], []
    batch.update(Update(3, added=[(0, params(schema=PERSON), None, a), (1, params(regex=DIGITS), None, b),
                                  (2, params(schema=COLOR), None, c)]))
    a.extend(vocab_tokens(vocab, '{"name'))
    b.extend(vocab_tokens(vocab, "12"))
    c.extend(vocab_tokens(vocab, '{"color": "re'))

    def check(rows):
        logits = batch.apply(torch.zeros(len(rows), vocab.size))
        for r, (out, constraint) in enumerate(rows):
            if constraint is None:
                assert torch.equal(logits[r], torch.zeros(vocab.size))
            else:
                assert np.array_equal(allowed(logits[r], vocab.size), reference(vocab, out, **constraint))

    check([(a, dict(schema=PERSON)), (b, dict(regex=DIGITS)), (c, dict(schema=COLOR))])
    batch.update(Update(3, moved=[(0, 2, Direction.SWAP)]))
    check([(c, dict(schema=COLOR)), (b, dict(regex=DIGITS)), (a, dict(schema=PERSON))])
    # row 1 finishes; the last row moves down into it (vLLM's condense)
    batch.update(Update(2, removed=[1], moved=[(2, 1, Direction.UNIDIRECTIONAL)]))
    assert sorted(batch.rows) == [0, 1]
    check([(c, dict(schema=COLOR)), (a, dict(schema=PERSON))])
    # a new unconstrained request replaces row 0: its matcher goes
    batch.update(Update(2, added=[(0, params(), None, [])]))
    assert sorted(batch.rows) == [1]
    check([([], None), (a, dict(schema=PERSON))])
    # a move onto a constrained row replaces it; a swap with an empty row moves one way
    batch.update(Update(2, added=[(0, params(regex=DIGITS), None, b)], moved=[(1, 0, Direction.UNIDIRECTIONAL)]))
    check([(a, dict(schema=PERSON)), ([], None)])
    batch.update(Update(2, moved=[(0, 1, Direction.SWAP)]))
    check([([], None), (a, dict(schema=PERSON))])


def vocab_tokens(vocab, text: str) -> list[int]:
    """A tokenisation of ``text`` (greedy, longest token first) in ``vocab``."""
    table = {vocab.token_bytes(i): i for i in range(vocab.size) if i not in vocab.special_ids}
    data, out, pos = text.encode(), [], 0
    while pos < len(data):
        for end in range(len(data), pos, -1):
            if data[pos:end] in table:
                out.append(table[data[pos:end]])
                pos = end
                break
        else:
            raise AssertionError(f"no token for {data[pos:]!r}")
    return out


def test_a_preempted_request_comes_back_with_its_tokens(vocab):
    batch = new_batch(vocab)
    out = vocab_tokens(vocab, '{"name": "Al')
    batch.update(Update(1, added=[(0, params(schema=PERSON), None, out[:2])]))
    batch.apply(torch.zeros(1, vocab.size))
    batch.update(Update(0, removed=[0]))          # preempted
    assert not batch.rows
    batch.update(Update(2, added=[(1, params(schema=PERSON), None, out)]))   # resumed elsewhere
    logits = batch.apply(torch.zeros(2, vocab.size))
    assert batch.rows[1].tokens == out
    assert np.array_equal(allowed(logits[1], vocab.size), reference(vocab, out, schema=PERSON))
    assert torch.equal(logits[0], torch.zeros(vocab.size))


def test_the_matcher_rolls_back_when_the_output_list_loses_or_changes_tokens(vocab):
    batch = new_batch(vocab)
    out = vocab_tokens(vocab, '{"color": "red", "ok"')
    live = list(out)
    batch.update(Update(1, added=[(0, params(schema=COLOR), None, live)]))
    batch.apply(torch.zeros(1, vocab.size))
    assert batch.rows[0].tokens == out
    del live[-3:]                                  # rejected draft tokens, say
    logits = batch.apply(torch.zeros(1, vocab.size))
    assert batch.rows[0].matcher.tokens == out[:-3]
    assert np.array_equal(allowed(logits[0], vocab.size), reference(vocab, out[:-3], schema=COLOR))
    other = vocab_tokens(vocab, '{"color": "blue"')
    live[:] = other                                # same length or not: replaced tokens
    logits = batch.apply(torch.zeros(1, vocab.size))
    assert batch.rows[0].matcher.tokens == other
    assert np.array_equal(allowed(logits[0], vocab.size), reference(vocab, other, schema=COLOR))


def test_eos_only_where_the_text_is_complete_and_after_it(vocab):
    batch = new_batch(vocab)
    eos = vocab.eos_token_ids[0]
    live = vocab_tokens(vocab, "12")
    batch.update(Update(1, added=[(0, params(regex=DIGITS), None, live)]))
    logits = batch.apply(torch.zeros(1, vocab.size))
    assert bool(torch.isfinite(logits[0, eos]))            # "12" is complete
    live[:] = vocab_tokens(vocab, "1")
    assert not bool(torch.isfinite(batch.apply(torch.zeros(1, vocab.size))[0, eos]))
    live[:] = vocab_tokens(vocab, "12") + [eos]            # ignore_eos: the row goes on
    logits = batch.apply(torch.zeros(1, vocab.size))
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == sorted(vocab.eos_token_ids)


def test_rows_that_cannot_be_constrained_allow_only_eos(vocab, caplog):
    batch = new_batch(vocab)
    eos = sorted(vocab.eos_token_ids)
    start = vocab_tokens(vocab, "1")
    bad_args = SimpleNamespace(extra_args={"gramgen_schema": "{", "gramgen_regex": "a"})
    batch.update(Update(3, added=[(0, params(regex=DIGITS), None, start + [-1]),      # async placeholder
                                  (1, params(regex=DIGITS), None, vocab_tokens(vocab, "ab")),  # rejected
                                  (2, bad_args, None, [])]))                             # not validated
    logits = batch.apply(torch.zeros(3, vocab.size))
    for r in range(3):
        assert torch.isfinite(logits[r]).nonzero().flatten().tolist() == eos
    assert "placeholder" in batch.rows[0].error
    assert "does not allow" in batch.rows[1].error
    assert "extra_args are invalid" in batch.rows[2].error
    assert "can no longer be constrained" in caplog.text


def test_unconstrained_batches_cost_nothing_and_load_no_vocabulary(vocab):
    calls = []
    batch = new_batch(vocab, calls)
    batch.update(Update(2, added=[(0, params(), None, []), (1, SimpleNamespace(extra_args={"other": 1}), None, [])]))
    batch.update(None)
    logits = torch.randn(2, 10)
    assert batch.apply(logits) is logits and not calls
    batch.update(Update(3, added=[(2, params(regex=DIGITS), None, [])]))
    batch.apply(torch.zeros(3, vocab.size))
    batch.apply(torch.zeros(3, vocab.size))
    assert calls == [1]


def test_columns_beyond_the_vocabulary_are_masked(vocab):
    batch = new_batch(vocab)
    batch.update(Update(2, added=[(1, params(regex=DIGITS), None, [])]))
    logits = batch.apply(torch.zeros(2, vocab.size + 64))
    assert not torch.isfinite(logits[1, vocab.size:]).any()
    assert torch.isfinite(logits[0]).all()
    assert np.array_equal(allowed(logits[1], vocab.size), reference(vocab, [], regex=DIGITS))


def test_a_repeated_schema_compiles_once(vocab):
    batch = new_batch(vocab)
    batch.update(Update(2, added=[(0, params(schema=PERSON), None, []), (1, params(schema=dict(PERSON)), None, [])]))
    assert batch.compile(batch.rows[0].request) is batch.compile(batch.rows[1].request)
    assert batch.rows[0].matcher is not batch.rows[1].matcher
    # the same schema with its properties in another order is another grammar: they come
    # out in the schema's order
    reordered = dict(PERSON, properties=dict(reversed(PERSON["properties"].items())))
    batch.update(Update(3, added=[(2, params(schema=reordered), None, [])]))
    assert batch.compile(batch.rows[2].request) is not batch.compile(batch.rows[0].request)
    assert gramgen.testing.accepts(batch.compile(batch.rows[2].request), '{"age": 3, "name": "x"}')
    assert not gramgen.testing.accepts(batch.compile(batch.rows[0].request), '{"age": 3, "name": "x"}')


# -- the arguments ---------------------------------------------------------------------------

def test_request_arguments():
    assert request_of(None) is None and request_of({"temperature_hint": 1}) is None
    r = request_of({"gramgen_schema": json.dumps(PERSON), "gramgen_whitespace": "compact"})
    assert r.kind == "schema" and json.loads(r.text) == PERSON and r.whitespace == "compact"
    assert list(json.loads(r.text)["properties"]) == ["name", "age"]   # the order is kept
    assert request_of({"gramgen_schema": PERSON}) == request_of({"gramgen_schema": json.dumps(PERSON)})
    assert request_of({"gramgen_gbnf": 'root ::= "a"'}) == Request("gbnf", 'root ::= "a"')
    for args, message in [({"gramgen_schema": "{}", "gramgen_regex": "a"}, "exactly one"),
                          ({"gramgen_shema": "{}"}, "unknown gramgen argument.*gramgen_shema"),
                          ({"gramgen_whitespace": "compact"}, "exactly one"),
                          ({"gramgen_regex": "a", "gramgen_whitespace": "compact"}, "lays out the JSON"),
                          ({"gramgen_schema": "{}", "gramgen_whitespace": "wide"}, "must be one of"),
                          ({"gramgen_schema": "{'a': 1}"}, "not JSON text.*line 1, column 2"),
                          ({"gramgen_schema": "[1]"}, "JSON object"),
                          ({"gramgen_lark": 3}, "string")]:
        with pytest.raises(gramgen.ConfigurationError, match=message):
            request_of(args)


def test_malformed_constraints_fail_with_the_place():
    with pytest.raises(ValueError, match=r"gramgen_schema: SchemaError: /properties/age/minimum"):
        check_request(request_of({"gramgen_schema": {"type": "object", "properties": {
            "age": {"type": "integer", "minimum": "zero"}}}}))
    with pytest.raises(ValueError, match=r"gramgen_lark: GrammarError: <lark>:1:\d+"):
        check_request(request_of({"gramgen_lark": 'start: "a" ('}))
    with pytest.raises(ValueError, match=r"gramgen_regex: GrammarError"):
        check_request(request_of({"gramgen_regex": "a(b"}))
    check_request(request_of({"gramgen_regex": DIGITS}))


def test_extra_args_from_a_pydantic_model():
    pydantic = pytest.importorskip("pydantic")

    class Person(pydantic.BaseModel):
        name: str
        age: int

    args = extra_args(schema=Person, whitespace="compact")
    assert all(isinstance(v, str) for v in args.values())
    assert json.loads(args["gramgen_schema"]) == Person.model_json_schema()
    with pytest.raises(gramgen.ConfigurationError, match="exactly one"):
        extra_args(schema=Person, regex="a")
    with pytest.raises(gramgen.ConfigurationError, match="not a file name"):
        extra_args(schema="/etc/schema.json")


# -- validate_params: the engine's configuration, read from its callers ----------------------

def verify(params, model_config, speculative_config):
    """Stands in for vLLM's SamplingParams.verify(model_config, speculative_config, ...)."""
    GramgenLogitsProcessor.validate_params(params)


class InputProcessor:
    """Stands in for vLLM's input processor, which holds the engine's vllm_config."""

    def __init__(self, vllm_config):
        self.vllm_config = vllm_config

    def process(self, params):
        verify(params, self.vllm_config.model_config, self.vllm_config.speculative_config)


def engine(speculative=None, async_scheduling=False, logits_processors=None):
    return SimpleNamespace(speculative_config=speculative,
                           scheduler_config=SimpleNamespace(async_scheduling=async_scheduling),
                           model_config=SimpleNamespace(logits_processors=logits_processors))


def test_validate_params_refuses_constrained_requests_under_speculative_decoding():
    constrained = params(regex=DIGITS)
    ngram = SimpleNamespace(method="ngram")
    with pytest.raises(ValueError, match=r"speculative decoding \(ngram\).*unconstrained"):
        InputProcessor(engine(speculative=ngram)).process(constrained)
    with pytest.raises(ValueError, match="speculative decoding"):
        verify(constrained, SimpleNamespace(), ngram)          # the verify frame alone
    InputProcessor(engine(speculative=ngram)).process(params())  # unconstrained: fine
    InputProcessor(engine()).process(constrained)


def test_validate_params_refuses_async_scheduling_through_the_entry_point_only():
    constrained = params(regex=DIGITS)
    with pytest.raises(ValueError, match="async scheduling"):
        InputProcessor(engine(async_scheduling=True)).process(constrained)
    InputProcessor(engine(async_scheduling=True,
                          logits_processors=["gramgen.vllm:GramgenLogitsProcessor"])).process(constrained)
    InputProcessor(engine(async_scheduling=True, logits_processors=[GramgenLogitsProcessor])).process(constrained)


def test_validate_params_rejects_malformed_constraints_and_passes_the_rest():
    with pytest.raises(ValueError, match="gramgen_schema: SchemaError"):
        GramgenLogitsProcessor.validate_params(SimpleNamespace(extra_args={"gramgen_schema": '{"type": 5}'}))
    GramgenLogitsProcessor.validate_params(SimpleNamespace(extra_args=None))
    GramgenLogitsProcessor.validate_params(params(schema=PERSON))


def test_random_batches_keep_every_row_consistent(vocab):
    """Random adds, removals, moves, swaps and token appends: every constrained row's mask is
    always its own request's reference mask."""
    rng = random.Random(5)
    constraints = [dict(schema=PERSON), dict(schema=COLOR), dict(regex=DIGITS), None]
    batch = new_batch(vocab)
    slots: dict[int, tuple] = {}                  # index -> (constraint, output list)
    for step in range(30):
        update = Update(0)
        if slots and rng.random() < 0.3:
            gone = rng.choice(sorted(slots))
            update.removed.append(gone)
            del slots[gone]
        if rng.random() < 0.5 or not slots:
            free = [i for i in range(6) if i not in slots]
            index = rng.choice(free)
            constraint = rng.choice(constraints)
            out = []
            update.added.append((index, params(**constraint) if constraint else params(), None, out))
            slots[index] = (constraint, out)
        if slots and rng.random() < 0.5:
            src = rng.choice(sorted(slots))
            dst = rng.choice([i for i in range(6) if i != src])
            swap = dst in slots and rng.random() < 0.5
            update.moved.append((src, dst, Direction.SWAP if swap else Direction.UNIDIRECTIONAL))
            moving, there = slots.pop(src), slots.pop(dst, None)
            slots[dst] = moving
            if swap:
                slots[src] = there
        batch.update(update)
        logits = batch.apply(torch.zeros(6, vocab.size))
        for index, (constraint, out) in slots.items():
            if constraint is None:
                assert torch.equal(logits[index], torch.zeros(vocab.size))
                continue
            mask = reference(vocab, out, **constraint)
            assert np.array_equal(allowed(logits[index], vocab.size), mask), (step, index)
            choices = [t for t in np.flatnonzero(mask).tolist() if t not in vocab.eos_token_ids]
            if choices:
                out.append(rng.choice(choices))
