"""gramgen extract on Ray Data (``--ray`` and gramgen.ray.extract_dataset): the worker's batch
logic, a run killed midway and restarted on a local Ray instance with 2 CPUs (each record
exactly once, every record valid), Parquet in and out, a worker that cannot load its model.

The model is a tiny randomly initialised Llama over the SmolLM2 tokenizer, saved by the test
(fast; its outputs are arbitrary but the grammar bounds them, so every one completes). Every
Ray instance here keeps its files under its own RAY_TMPDIR, which tells its processes apart
from any other Ray on the machine: each test checks that none of them outlives it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pyarrow as pa   # the test extra installs ray[data] and pyarrow
import pytest

from conftest import ROOT, hf_tokenizer

from gramgen import cli, extraction

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 99}}}
# SCHEMA's language, bounded: any model's output completes within MAX_NEW_TOKENS
PERSON_LARK = r"""
start: "{\"name\":" STR ",\"age\":" INT "}"
STR: /"[A-Za-z]{1,8}"/
INT: /0|[1-9][0-9]?/
"""
MAX_NEW_TOKENS = "40"
NAMES = ["Ada", "Alan", "Grace", "Marie", "Isaac", "Emmy", "Kurt", "Edsger", "Barbara", "Donald"]
N_DOCS = 50


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer Llama (hidden size 32) with random weights and the SmolLM2 tokenizer (and its
    chat template), saved as a Hugging Face folder that gramgen.load_model reads."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = hf_tokenizer("smollm2")
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, bos_token_id=1, eos_token_id=eos, pad_token_id=eos)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture()
def workdir(tmp_path) -> Path:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "person.lark").write_text(PERSON_LARK)
    with open(tmp_path / "people.jsonl", "w") as f:
        for i in range(N_DOCS):
            name = NAMES[i % len(NAMES)]
            f.write(json.dumps({"id": f"p{i:02d}", "text": f"{name} was {20 + i} years old."}) + "\n")
    return tmp_path


@pytest.fixture()
def ray_tmpdir():
    """A short RAY_TMPDIR of its own (Ray's socket paths must stay short); afterwards no
    process may still be using it, and the folder is removed."""
    folder = Path(tempfile.mkdtemp(prefix="rg", dir="/tmp"))
    try:
        yield folder
        leaked = _wait_for_exit(folder, 30)
        for pid in leaked:  # processes of the Ray instances this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        assert not leaked, f"Ray processes outlived the test: {leaked}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _processes_using(folder: Path) -> dict[int, str]:
    """pid -> command line of every process whose command line or environment names
    ``folder`` (Ray's workers rename themselves, ``ray::IDLE``, but keep the environment
    they inherited: RAY_TMPDIR)."""
    found = {}
    needle = str(folder).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in cmdline or needle in environ:
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
    return found


def _wait_for_exit(folder: Path, seconds: float) -> dict[int, str]:
    deadline = time.monotonic() + seconds
    while True:
        alive = _processes_using(folder)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _args(w: Path, model: Path, *more: str) -> list[str]:
    return ["extract", "--schema", str(w / "schema.json"), "--grammar", str(w / "person.lark"),
            "--model", str(model), "--max-new-tokens", MAX_NEW_TOKENS, str(w / "people.jsonl"),
            "-o", str(w / "out.jsonl"), *more]


# -- without a Ray instance ------------------------------------------------------------------

def test_ray_options_are_parsed_and_checked(capsys):
    parser = cli.build_parser()
    base = ["extract", "--schema", "s.json", "-o", "o.jsonl"]
    # a bare --ray before an input takes no value: the word is the input
    args = parser.parse_args(cli._bare_ray_option([*base, "--ray", "docs/", "more.jsonl"]))
    assert args.ray == "local" and args.inputs == ["docs/", "more.jsonl"]
    for address in ("auto", "10.0.0.5:6379", "head.example:6379", "ray://head:10001"):
        assert parser.parse_args(cli._bare_ray_option([*base, "--ray", address, "d"])).ray == address
    assert parser.parse_args([*base, "d", "--ray"]).ray == "local"
    for bad, message in ((["d", "--workers", "2"], "--workers goes with --ray"),
                         (["d", "--ray=docs/"], "not a Ray address"),
                         (["d", "--ray", "--workers", "0"], "--workers must be at least 1"),
                         (["d", "--ray=auto", "--ray-cpus", "2"], "--ray-cpus sizes the local")):
        with pytest.raises(SystemExit):
            cli.main([*base, *bad])
        assert message in capsys.readouterr().err


def test_a_worker_batch_gives_the_single_process_records(tiny_model, workdir):
    """The actor's __call__ without Ray: one row per input row, in order; values valid;
    a row without text is an error record; a row without an id is refused."""
    import jsonschema

    from gramgen.grammar import Grammar
    from gramgen.ray import OUTPUT_COLUMNS, record_of
    from gramgen.ray.extract import _Extractor

    options = extraction.extract_options(SCHEMA, grammar=Grammar.from_file(str(workdir / "person.lark")),
                                         max_new_tokens=int(MAX_NEW_TOKENS))
    worker = _Extractor(model=str(tiny_model), device="cpu", options=options,
                        template=extraction.prompt_template(None, SCHEMA), schema=SCHEMA, field="body",
                        id_field="key", threads=1)
    table = pa.table({"key": [7, 8, 9], "body": ["Ada was 36.", None, "Alan was 41."]})
    out = worker(table)
    assert out.column_names == list(OUTPUT_COLUMNS) and out.num_rows == 3
    records = [record_of(row) for row in out.to_pylist()]
    assert [r["id"] for r in records] == ["7", "8", "9"]
    assert records[1] == {"id": "8", "error": "no string field 'body'"}
    for r in (records[0], records[2]):
        jsonschema.validate(r["value"], SCHEMA)
    # the same record as the single-process command's function makes for that document
    (_, single), = extraction.run_batch(worker.model, [extraction.Document("7", "Ada was 36.")],
                                        worker.template, worker.validator, options)
    assert single == records[0]
    with pytest.raises(cli.GramgenError, match="null 'key'"):
        worker(pa.table({"key": [None], "body": ["x"]}))
    with pytest.raises(cli.GramgenError, match="no column 'body'"):
        worker(pa.table({"key": [1], "text": ["x"]}))


# -- on a local Ray instance -----------------------------------------------------------------

def test_killed_and_restarted_ray_extract_writes_each_record_once(tiny_model, workdir, ray_tmpdir):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), RAY_TMPDIR=str(ray_tmpdir),
               RAY_USAGE_STATS_ENABLED="0", TOKENIZERS_PARALLELISM="false")
    env.pop("RAY_ADDRESS", None)
    out = workdir / "out.jsonl"
    cmd = [sys.executable, "-m", "gramgen.cli", *_args(workdir, tiny_model, "--ray", "--ray-cpus", "2",
                                                       "--workers", "2")]
    log = open(workdir / "first.log", "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= 5:
                break
            time.sleep(0.02)
        assert proc.poll() is None, ("the first run ended before it could be killed: "
                                     + (workdir / "first.log").read_text()[-3000:])
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        log.close()
    # the killed driver's local Ray instance goes with it: Ray's own processes notice that
    # the driver died. On a loaded 2-core CI machine its DashboardAgent and RuntimeEnvAgent
    # were seen alive after 30 s: that is Ray's clean-up (a SIGKILL runs none of gramgen's),
    # so leftovers after a minute are killed here and reported, not failed on
    leftover = _wait_for_exit(ray_tmpdir, 60)
    if leftover:
        for pid in leftover:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        warnings.warn(f"Ray processes of the killed run still ran a minute later: {sorted(leftover.values())}")
        assert not _wait_for_exit(ray_tmpdir, 10), "leftover Ray processes survive SIGKILL"
    first = out.read_bytes()
    complete = first[:first.rfind(b"\n") + 1]
    first_ids = [json.loads(line)["id"] for line in complete.decode().splitlines()]
    assert 5 <= len(first_ids) < N_DOCS, first_ids
    assert len(set(first_ids)) == len(first_ids)
    with open(out, "ab") as f:   # as if the kill had cut a record short
        f.write(b'{"id": "p49", "val')

    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"{N_DOCS} documents, {len(first_ids)} already in" in second.stderr
    assert f"{N_DOCS - len(first_ids)} extracted, 0 error records" in second.stderr
    records = _records(out)
    ids = [r["id"] for r in records]
    assert sorted(ids) == [f"p{i:02d}" for i in range(N_DOCS)]   # each document exactly once
    assert ids[:len(first_ids)] == first_ids                     # the finished ones were kept
    import jsonschema

    for r in records:
        assert set(r) == {"id", "value"}, r
        jsonschema.validate(r["value"], SCHEMA)
    # a third run finds nothing to do and starts no Ray
    third = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert third.returncode == 0 and f"{N_DOCS} already in" in third.stderr, third.stderr[-2000:]
    assert len(_records(out)) == N_DOCS


def test_extract_dataset_from_parquet_to_parquet_and_a_model_that_does_not_load(
        tiny_model, workdir, ray_tmpdir, monkeypatch, capsys):
    """The Python function on a dataset read from Parquet, written back to Parquet; then the
    command on the Ray instance this process already runs, with a model folder that does not
    exist: one error line, exit 2, nothing written."""
    import jsonschema
    import pyarrow.parquet as pq
    import ray

    from gramgen.ray import extract_dataset, record_of

    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmpdir))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    rows = [json.loads(line) for line in (workdir / "people.jsonl").read_text().splitlines()[:6]]
    pq.write_table(pa.table({"doc": [int(r["id"][1:]) for r in rows], "body": [r["text"] for r in rows]}),
                   workdir / "people.parquet")
    ray.init(address="local", num_cpus=2, include_dashboard=False)
    try:
        ds = ray.data.read_parquet(str(workdir / "people.parquet"))
        mapped = extract_dataset(ds, schema=str(workdir / "schema.json"), grammar=workdir / "person.lark",
                                 model=str(tiny_model), field="body", id_field="doc", device="cpu",
                                 max_new_tokens=int(MAX_NEW_TOKENS), workers=1)
        mapped.write_parquet(str(workdir / "records"))
        table = pq.read_table(workdir / "records")
        records = sorted((record_of(row) for row in table.to_pylist()), key=lambda r: int(r["id"]))
        assert [r["id"] for r in records] == [str(i) for i in range(6)]
        for r in records:
            jsonschema.validate(r["value"], SCHEMA)

        args = _args(workdir, workdir / "no-such-model", "--ray")
        args[args.index("-o") + 1] = str(workdir / "bad.jsonl")
        (workdir / "no-such-model").mkdir()
        capsys.readouterr()
        assert cli.main(args) == 2
        err = capsys.readouterr().err
        assert err.count("gramgen: error: ") == 1 and "no-such-model" in err, err[-3000:]
        assert not (workdir / "bad.jsonl").exists()
        assert ray.is_initialized()   # the command leaves a Ray it did not start running
    finally:
        ray.shutdown()
