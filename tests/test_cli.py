"""The gramgen command: extract (real SmolLM2, resumable, error records), check, bench."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from test_generate import shared_model

from gramgen import cli
from gramgen.errors import ConfigurationError

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age"],
          "properties": {"name": {"type": "string", "maxLength": 30},
                         "age": {"type": "integer", "minimum": 0}}}
# the same language as SCHEMA in compact form: lets extract run before a schema compiler
PERSON_LARK = r"""
start: "{\"name\":" STR ",\"age\":" INT "}"
STR: /"[A-Za-z .'-]{1,30}"/
INT: /0|[1-9][0-9]{0,2}/
"""
PEOPLE = ["Marie Curie was 66 when she died.", "Alan Turing, aged 41, was a mathematician.",
          "Ada Lovelace lived for 36 years.", "Isaac Newton reached the age of 84.",
          "Grace Hopper was 85 years old."]


@pytest.fixture()
def workdir(tmp_path):
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "person.lark").write_text(PERSON_LARK)
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, text in enumerate(PEOPLE):
        (docs / f"{i:02d}.txt").write_text(text)
    return tmp_path


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _extract_args(w: Path, *inputs: str, grammar: bool = True) -> list[str]:
    args = ["extract", "--schema", str(w / "schema.json"), *inputs, "-o", str(w / "out.jsonl"),
            "--max-new-tokens", "24"]
    return args + (["--grammar", str(w / "person.lark")] if grammar else [])


def test_collect_documents_from_files_folders_globs_and_jsonl(workdir):
    (workdir / "more.jsonl").write_text(
        '{"id": "j1", "body": "Kurt Goedel, 71."}\n\nnot json\n{"id": "j2"}\n[1]\n{"body": "x"}\n')
    (workdir / "docs" / ".hidden").write_text("skip me")
    docs = cli.collect_documents([str(workdir / "docs"), str(workdir / "docs" / "0*.txt"),
                                  str(workdir / "more.jsonl")], field="body", id_field="id")
    ids = [d.id for d in docs]
    n = len(PEOPLE)
    assert ids[:n] == [str(workdir / "docs" / f"{i:02d}.txt") for i in range(n)]   # no duplicates
    assert ids[n] == "j1" and docs[n].text == "Kurt Goedel, 71."
    errors = {d.id: d.error for d in docs if d.error}
    assert set(errors) == {f"{workdir / 'more.jsonl'}:3", "j2", f"{workdir / 'more.jsonl'}:5"}
    assert docs[-1].id == f"{workdir / 'more.jsonl'}:6" and docs[-1].text == "x"
    with pytest.raises(cli.GramgenError, match="matches no file"):
        cli.collect_documents([str(workdir / "nope*.txt")], "text", "id")


def test_done_ids_drops_a_cut_last_line(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "value": 1}\n{"id": "b", "err')
    assert cli.done_ids(out) == {"a"}
    assert out.read_text() == '{"id": "a", "value": 1}\n'


def test_extract_writes_validated_values_and_error_records(workdir):
    shared_model()   # warm the converted-model cache and torch before timing-free CLI use
    (workdir / "docs" / "broken.txt").write_bytes(b"\xff\xfe not utf-8")
    (workdir / "rows.jsonl").write_text('{"id": "r1", "text": "Emmy Noether was 53."}\nnot json\n')
    # an impossible schema for the grammar's outputs: every generated value fails validation
    strict = dict(SCHEMA, properties=dict(SCHEMA["properties"], age={"type": "integer", "maximum": -1}))
    (workdir / "strict.json").write_text(json.dumps(strict))
    args = _extract_args(workdir, str(workdir / "docs" / "0[01].txt"),
                         str(workdir / "docs" / "broken.txt"), str(workdir / "rows.jsonl"))
    assert cli.main(args + ["--batch-size", "2"]) == 1   # error records were written
    records = {r["id"]: r for r in _records(workdir / "out.jsonl")}
    assert len(records) == 5
    assert "cannot read" in records[str(workdir / "docs" / "broken.txt")]["error"]
    assert "not JSON" in records[f"{workdir / 'rows.jsonl'}:2"]["error"]
    import jsonschema

    good = [r for r in records.values() if "value" in r]
    assert len(good) == 3
    for r in good:
        jsonschema.validate(r["value"], SCHEMA)
    # validation failures become error records too
    args = ["extract", "--schema", str(workdir / "strict.json"), "--grammar", str(workdir / "person.lark"),
            str(workdir / "docs" / "02.txt"), "-o", str(workdir / "strict.jsonl"), "--max-new-tokens", "24"]
    assert cli.main(args) == 1
    (record,) = _records(workdir / "strict.jsonl")
    assert record["error"].startswith("jsonschema:") and "text" in record


def test_killed_and_restarted_extract_writes_each_document_once(workdir):
    shared_model()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    out = workdir / "out.jsonl"
    cmd = [sys.executable, "-m", "gramgen.cli", *_extract_args(workdir, str(workdir / "docs"))]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the first run finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    first = _records(out)
    assert 2 <= len(first) < len(PEOPLE)
    assert cli.main(_extract_args(workdir, str(workdir / "docs"))) == 0
    ids = [r["id"] for r in _records(out)]
    assert sorted(ids) == sorted(str(workdir / "docs" / f"{i:02d}.txt") for i in range(len(PEOPLE)))
    assert ids[:len(first)] == [r["id"] for r in first]
    assert cli.main(_extract_args(workdir, str(workdir / "docs"))) == 0   # nothing left to do
    assert len(_records(out)) == len(PEOPLE)


def test_extract_with_the_schema_alone(workdir):
    """The schema constrains generation itself (needs Grammar.from_json_schema)."""
    import jsonschema

    shared_model()
    assert cli.main(_extract_args(workdir, str(workdir / "docs" / "00.txt"), grammar=False)
                    + ["--max-new-tokens", "40"]) in (0, 1)
    (record,) = _records(workdir / "out.jsonl")
    if "value" in record:
        jsonschema.validate(record["value"], SCHEMA)
    else:
        assert "incomplete" in record["error"]


def test_check_reports_grammar_and_jsonschema_verdicts(workdir, capsys):
    data = workdir / "data.jsonl"
    data.write_text('{"name":"A","age":3}\n{"name":"B"}\n{"age":3,"name":"C"}\nnope\n')
    args = ["check", "--schema", str(workdir / "schema.json"), "--grammar", str(workdir / "person.lark")]
    assert cli.main(args + [str(data)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("grammar: accept\tjsonschema: valid")
    assert "grammar: REJECT" in lines[1] and "'age' is a required property" in lines[1]
    # property order: the compact grammar fixes it, jsonschema does not care
    assert "grammar: REJECT" in lines[2] and lines[2].endswith("jsonschema: valid")
    assert "not JSON" in lines[3]
    good = workdir / "good.jsonl"
    good.write_text('{"name":"A","age":3}\n{"name":"Bo","age":40}\n')
    assert cli.main(args + ["-q", str(good)]) == 0
    assert capsys.readouterr().out == ""


def test_check_with_the_schema_alone(workdir, capsys):
    """The grammar comes from the schema (needs Grammar.from_json_schema)."""
    data = workdir / "data.jsonl"
    data.write_text('{"name":"A","age":3}\n{"name":"B","age":-1}\n')
    assert cli.main(["check", "--schema", str(workdir / "schema.json"), str(data)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "grammar: accept" in lines[0] and "jsonschema: valid" in lines[0]
    assert "grammar: REJECT" in lines[1] and "jsonschema: INVALID" in lines[1]


def test_usage_errors_are_reported_not_raised(workdir, capsys):
    assert cli.main(["extract", "--schema", str(workdir / "missing.json"), "x", "-o",
                     str(workdir / "o.jsonl")]) == 2
    assert "gramgen: error: the schema file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["check", str(workdir / "data.jsonl")])   # needs --schema or --grammar


def test_bench_forwards_inside_a_checkout_only(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "--help"]) == 2
    assert "repository checkout" in capsys.readouterr().err
    monkeypatch.chdir(ROOT)
    assert cli.main(["bench", "--help"]) == 0


# -- bad inputs, outputs and options: one line, exit 2, before the model ---------------------

class _Result:
    """What the fake generate() returns: a complete, valid person."""

    def __init__(self, value):
        self.complete, self.value, self.text = True, value, json.dumps(value)
        self.error, self.finish_reason = None, "grammar"


@pytest.fixture()
def fake_model(monkeypatch):
    """cli.load_model and cli.generate replaced: no model is loaded; ``calls`` holds the
    options of each generate() call, ``loads`` the devices asked for."""
    calls: list[dict] = []
    loads: list = []

    def load_model(name, device=None):
        loads.append(device)
        return "model"

    def generate(model, prompts, **options):
        calls.append(options)
        return [_Result({"name": "A", "age": i}) for i in range(len(prompts))]

    monkeypatch.setattr(cli, "load_model", load_model)
    monkeypatch.setattr(cli, "generate", generate)
    return calls, loads


def _one_error_line(err: str) -> str:
    """The error line of stderr: its last (after progress lines, if any), the only one, and
    no traceback."""
    lines = err.strip().splitlines()
    assert lines[-1].startswith("gramgen: error: ") and err.count("gramgen: error: ") == 1, err
    assert "Traceback" not in err, err
    return lines[-1]


def test_a_line_that_is_not_utf8_costs_only_its_own_record(workdir, fake_model, capsys):
    """The whole file was one error record: its good documents were never extracted."""
    rows = workdir / "rows.jsonl"
    rows.write_bytes(b'{"id": "a", "text": "Ada, 36."}\n{"id": "b", "text": "caf\xe9"}\n'
                     + '{"id": "c", "text": "Alan\u2028Turing, 41."}\n'.encode())  # U+2028 is no line end
    docs = cli.collect_documents([str(rows)], "text", "id")
    assert [d.id for d in docs] == ["a", f"{rows}:2", "c"]
    assert docs[0].text == "Ada, 36." and docs[2].text == "Alan\u2028Turing, 41."
    assert "line 2 is not UTF-8" in docs[1].error and docs[1].text is None
    args = ["extract", "--schema", str(workdir / "schema.json"), str(rows), "-o", str(workdir / "out.jsonl")]
    assert cli.main(args) == 1
    records = {r["id"]: r for r in _records(workdir / "out.jsonl")}
    assert records["a"]["value"] == records["c"]["value"] == {"name": "A", "age": 0}
    assert "not UTF-8" in records[f"{rows}:2"]["error"]


def test_duplicate_ids_are_an_error_naming_both_lines(workdir, fake_model, capsys):
    """Ids 1 and "1" collided and the second document was dropped without a word."""
    rows = workdir / "rows.jsonl"
    rows.write_text('{"id": 1, "text": "Ada, 36."}\n{"id": 2, "text": "x"}\n{"id": "1", "text": "Alan, 41."}\n')
    with pytest.raises(cli.GramgenError, match=rf"duplicate document id '1' at {rows}:1 and {rows}:3"):
        cli.collect_documents([str(rows)], "text", "id")
    other = workdir / "other.jsonl"
    other.write_text('{"id": "2", "text": "y"}\n')
    with pytest.raises(cli.GramgenError, match=rf"'2' at {other}:1 and {rows}:2"):
        cli.collect_documents([str(workdir / "*.jsonl")], "text", "id")
    # the same file named twice (a folder and a glob) is read once: no duplicate
    assert len(cli.collect_documents([str(rows.parent / "other.jsonl"), str(other)], "text", "id")) == 1
    calls, loads = fake_model
    assert cli.main(["extract", "--schema", str(workdir / "schema.json"), str(rows),
                     "-o", str(workdir / "out.jsonl")]) == 2
    assert "duplicate document id '1'" in _one_error_line(capsys.readouterr().err)
    assert not loads and not (workdir / "out.jsonl").exists()


def test_output_path_is_checked_before_the_model(workdir, fake_model, capsys):
    calls, loads = fake_model
    base = ["extract", "--schema", str(workdir / "schema.json"), str(workdir / "docs" / "00.txt"), "-o"]
    assert cli.main(base + [str(workdir / "docs")]) == 2
    assert "is a folder" in _one_error_line(capsys.readouterr().err)
    assert cli.main(base + [str(workdir / "schema.json" / "sub" / "out.jsonl")]) == 2
    assert f"{workdir / 'schema.json'} is a file, not a folder" in _one_error_line(capsys.readouterr().err)
    if os.geteuid() != 0:  # (root may write anywhere)
        locked = workdir / "locked"
        locked.mkdir(mode=0o500)
        assert cli.main(base + [str(locked / "out.jsonl")]) == 2
        assert "is not writable" in _one_error_line(capsys.readouterr().err)
    assert not loads
    assert cli.main(base + [str(workdir / "new" / "out.jsonl")]) == 0  # missing folders are made
    assert len(_records(workdir / "new" / "out.jsonl")) == 1


def test_output_to_a_device_is_written_not_read(workdir, fake_model, capsys):
    """-o /dev/full read the device to find the ids done (MemoryError); now a device is
    never read, and a failed write is one line and exit 2. /dev/null takes the records."""
    base = ["extract", "--schema", str(workdir / "schema.json"), str(workdir / "docs"), "-o"]
    assert cli.main(base + ["/dev/full"]) == 2
    assert "No space left on device" in _one_error_line(capsys.readouterr().err)
    assert cli.done_ids(Path("/dev/full")) == set()
    assert cli.main(base + ["/dev/null"]) == 0


def test_schema_failing_its_metaschema_names_the_keyword(workdir, fake_model, capsys):
    bad = dict(SCHEMA, properties=dict(SCHEMA["properties"], age={"type": "integer", "minimum": "zero"}))
    (workdir / "bad.json").write_text(json.dumps(bad))
    calls, loads = fake_model
    for command in (["extract", str(workdir / "docs"), "-o", str(workdir / "out.jsonl")],
                    ["check", str(workdir / "schema.json")]):
        assert cli.main([*command, "--schema", str(workdir / "bad.json")]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert "bad.json is not a valid JSON Schema: #/properties/age/minimum: 'zero' is not of type" in line
    assert not loads and not calls


def test_errors_from_the_model_loader_are_one_line(workdir, monkeypatch, capsys):
    def load_model(name, device=None):
        raise ConfigurationError(f"device {device!r} is not a torch device (cpu, cuda, cuda:1, mps)")

    monkeypatch.setattr(cli, "load_model", load_model)
    args = ["extract", "--schema", str(workdir / "schema.json"), str(workdir / "docs"),
            "-o", str(workdir / "out.jsonl"), "--device", "tpu9"]
    assert cli.main(args) == 2
    assert "device 'tpu9'" in _one_error_line(capsys.readouterr().err)
    assert not (workdir / "out.jsonl").exists()  # nothing written before the model and grammar are ready


def test_an_unknown_device_with_the_real_loader(workdir, capsys):
    """load_model itself names a device that torch does not know (a ConfigurationError)."""
    args = ["extract", "--schema", str(workdir / "schema.json"), str(workdir / "docs" / "00.txt"),
            "-o", str(workdir / "out.jsonl"), "--device", "tpu9"]
    assert cli.main(args) == 2
    assert "tpu9" in _one_error_line(capsys.readouterr().err)


def test_strict_and_whitespace_options_reach_generate(workdir, fake_model):
    calls, _ = fake_model
    base = ["extract", "--schema", str(workdir / "schema.json"), str(workdir / "docs" / "00.txt")]
    assert cli.main([*base, "-o", str(workdir / "a.jsonl")]) == 0
    assert calls[0]["strict"] is True and "whitespace" not in calls[0]  # the library's default layout
    assert cli.main([*base, "-o", str(workdir / "b.jsonl"), "--no-strict", "--whitespace", "standard"]) == 0
    assert calls[-1]["strict"] is False and calls[-1]["whitespace"] == "standard"


def test_speculative_options_reach_generate(workdir, fake_model, capsys):
    calls, _ = fake_model
    base = ["extract", "--schema", str(workdir / "schema.json"), str(workdir / "docs" / "00.txt")]
    assert cli.main([*base, "-o", str(workdir / "a.jsonl")]) == 0
    assert "speculative" not in calls[-1]
    assert cli.main([*base, "-o", str(workdir / "b.jsonl"), "--speculative", "forced,prompt_lookup",
                     "--draft-tokens", "7"]) == 0
    spec = calls[-1]["speculative"]
    assert spec.parts == ("forced", "prompt_lookup") and spec.num_draft_tokens == 7
    for bad in (["--speculative", "ngram"], ["--speculative", "forced,forced"],
                ["--speculative", "forced", "--draft-tokens", "0"]):
        with pytest.raises(SystemExit) as exc:
            cli.main([*base, "-o", str(workdir / "c.jsonl"), *bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "--speculative" in err or "--draft-tokens must be" in err, err


def test_check_with_the_standard_layout(workdir, capsys):
    """check writes each record the way the grammar lays JSON out (json.dumps' ", " and ": ")."""
    data = workdir / "data.jsonl"
    data.write_text('{"name":"A","age":3}\n{"name": "B", "age": 4}\n')
    assert cli.main(["check", "--schema", str(workdir / "schema.json"), "--whitespace", "standard", str(data)]) == 0
    assert capsys.readouterr().out.count("grammar: accept") == 2


def test_check_reports_a_line_that_is_not_utf8_and_a_missing_file(workdir, capsys):
    data = workdir / "data.jsonl"
    data.write_bytes(b'{"name":"A","age":3}\n{"name":"\xe9","age":3}\n')
    args = ["check", "--schema", str(workdir / "schema.json"), "--grammar", str(workdir / "person.lark")]
    assert cli.main(args + [str(data)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "grammar: accept" in lines[0] and "line 2 is not UTF-8" in lines[1]
    assert cli.main(args + [str(workdir / "missing.jsonl")]) == 2
    assert "missing.jsonl" in _one_error_line(capsys.readouterr().err)


def test_a_long_inline_prompt_template(workdir, fake_model):
    """A template longer than a file name may be was taken for a path (OSError)."""
    template = "Read this carefully. " * 20 + "{document}"
    assert cli.main(["extract", "--schema", str(workdir / "schema.json"), str(workdir / "docs" / "00.txt"),
                     "-o", str(workdir / "out.jsonl"), "--prompt-template", template]) == 0


def test_the_default_prompt_names_the_schemas_keys(workdir, monkeypatch):
    """Small models fill values better when told which keys to fill: the default prompt
    names the schema's top-level keys, and a template may place them with {keys}."""
    prompts: list[str] = []

    def generate(model, batch, **options):
        prompts.extend(batch)
        return [_Result({"name": "A", "age": 1}) for _ in batch]

    monkeypatch.setattr(cli, "load_model", lambda name, device=None: "model")
    monkeypatch.setattr(cli, "generate", generate)
    doc = str(workdir / "docs" / "00.txt")
    keys = ", ".join(SCHEMA["properties"])
    assert cli.main(["extract", "--schema", str(workdir / "schema.json"), doc,
                     "-o", str(workdir / "a.jsonl")]) == 0
    assert f"with the keys {keys}." in prompts[-1] and PEOPLE[0] in prompts[-1]
    assert cli.main(["extract", "--schema", str(workdir / "schema.json"), doc, "-o", str(workdir / "b.jsonl"),
                     "--prompt-template", "Keys: {keys}. Text: {document}"]) == 0
    assert prompts[-1] == f"Keys: {keys}. Text: {PEOPLE[0]}"


def test_the_readme_try_it_extracts_the_right_values(tmp_path, monkeypatch):
    """The README's Try-it command, run as written from the repository root: every value
    the documents state comes out right (the README shows this output)."""
    shared_model()
    root = Path(__file__).resolve().parents[1]
    monkeypatch.chdir(root)
    out = tmp_path / "people.jsonl"
    assert cli.main(["extract", "--schema", "examples/person.schema.json", "--model", "smollm2",
                     "examples/people/", "-o", str(out)]) == 0
    got = {r["id"]: r["value"] for r in _records(out)}
    expected = {"dahl": ("Henrik Dahl", 1947, "composer"), "marsh": ("Elena Marsh", 1952, "marine biologist"),
                "okafor": ("Amara Okafor", 1990, "software engineer"),
                "raman": ("Priya Raman", 1983, "structural engineer")}
    assert len(got) == len(expected)
    for stem, (name, year, occupation) in expected.items():
        value = got[f"examples/people/{stem}.txt"]
        assert (value["name"], value["birth_year"]) == (name, year), value
        assert occupation in value["occupation"].lower(), value


def test_python_dash_m_gramgen_is_the_command():
    """``python -m gramgen`` runs the same command line as ``gramgen`` (its subcommands,
    ``lsp`` among them, and its exit status)."""
    out = subprocess.run([sys.executable, "-m", "gramgen", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "extract" in out.stdout and "lsp" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "gramgen", "no-such-command"], capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode != 0 and "no-such-command" in bad.stderr
