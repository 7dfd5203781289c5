"""GramgenLogitsProcessor inside a real vLLM engine on the CPU, with a tiny random Llama that
has SmolLM2's tokenizer: constrained requests for two JSON Schemas, a Lark grammar, a GBNF
grammar and a regex in one batch beside an unconstrained one; a malformed schema refused
alone; the processor loaded from its entry point; speculative decoding refused."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import lark
import pytest

from conftest import ENGINE_ARGS

from gramgen.vllm import extra_args

HERE = Path(__file__).resolve().parent

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["name", "age"]}
COLOR = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]},
                                          "ok": {"type": "boolean"}, "tags": {"type": "array",
                                                                              "items": {"enum": ["a", "b"]},
                                                                              "maxItems": 2}},
         "required": ["color", "ok", "tags"]}
LARK = 'start: "(" item ("," item)~0..2 ")"\nitem: /[a-c]{1,3}/\n'
GBNF = 'root ::= "x=" [0-9] [0-9]? ";"'
REGEX = r"(yes|no)-[0-9]{2}"


def run(model_path: str, requests: list[dict], *, explicit: bool = True, mode: str = "generate",
        engine: dict | None = None, timeout: float = 400) -> dict:
    spec = {"model": model_path, "engine": {**ENGINE_ARGS, **(engine or {})}, "explicit": explicit,
            "mode": mode, "requests": requests}
    done = subprocess.run([sys.executable, str(HERE / "run_engine.py"), json.dumps(spec)],
                          capture_output=True, text=True, timeout=timeout)
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"the engine run failed:\n{done.stderr[-4000:]}"
    return json.loads(lines[-1])


def request(prompt: str = "Hello", seed: int = 0, max_tokens: int = 96, **constraint) -> dict:
    return {"prompt": prompt, "seed": seed, "temperature": 1.0, "max_tokens": max_tokens,
            "extra_args": extra_args(**constraint) if constraint else None}


def check_json(result: dict, schema: dict) -> None:
    assert result["error"] is None
    assert result["finish_reason"] == "stop", f"not finished: {result}"
    jsonschema.validate(json.loads(result["text"]), schema)


def check_lark(text: str) -> None:
    lark.Lark(LARK, parser="earley").parse(text)


BAD = {"prompt": "Bad:", "seed": 1, "max_tokens": 32,
       "extra_args": {"gramgen_schema": json.dumps({"type": "object", "properties": {
           "age": {"type": "integer", "minimum": "zero"}}})}}
TYPO = {"prompt": "Typo:", "seed": 2, "max_tokens": 32, "extra_args": {"gramgen_shema": "{}"}}


@pytest.fixture(scope="module")
def batch_run(model_path):
    """One engine, the processor named in logits_processors; every request added to it on
    its own (as a server does), then all of them run as one batch."""
    requests = ([request(f"Person {i}:", seed=i, schema=PERSON) for i in range(3)]
                + [request(f"Color {i}:", seed=10 + i, schema=COLOR) for i in range(3)]
                + [request("Plain text:", seed=20, max_tokens=24)]
                + [request("Items:", seed=30, lark=LARK), request("Assign:", seed=31, gbnf=GBNF),
                   request("Answer:", seed=32, regex=REGEX)]
                + [BAD, TYPO])
    return requests, run(model_path, requests, mode="engine")


def test_two_schemas_and_three_grammars_in_one_batch(batch_run):
    requests, out = batch_run
    assert out["startup_error"] is None, out["startup_error"]
    results = out["results"]
    for r in results[:3]:
        check_json(r, PERSON)
    for r in results[3:6]:
        check_json(r, COLOR)
    # different seeds, different outputs: the mask does not force one answer
    assert len({r["text"] for r in results[:6]}) > 2
    lark_out, gbnf_out, regex_out = results[7:10]
    for r in (lark_out, gbnf_out, regex_out):
        assert r["finish_reason"] == "stop", r
    check_lark(lark_out["text"])
    assert re.fullmatch(r"x=[0-9][0-9]?;", gbnf_out["text"]), gbnf_out
    assert re.fullmatch(REGEX, regex_out["text"]), regex_out


def test_the_unconstrained_request_is_left_alone(batch_run):
    """The random model's own output: 24 tokens that are not JSON, nor EOS-terminated by a
    grammar (a mask leaking onto its row would make it JSON or end it early)."""
    _requests, out = batch_run
    plain = out["results"][6]
    assert plain["error"] is None and plain["finish_reason"] == "length"
    assert len(plain["token_ids"]) == 24
    with pytest.raises(ValueError):
        json.loads(plain["text"])


def test_a_malformed_schema_fails_that_request_alone(batch_run):
    """Refused when added, with gramgen's message (argument, error, JSON pointer); the rest of
    the batch (checked above) runs."""
    _requests, out = batch_run
    refused, misspelt = out["results"][10:]
    assert "gramgen_schema: SchemaError: /properties/age/minimum" in refused["error"], refused
    assert "unknown gramgen argument(s) gramgen_shema" in misspelt["error"], misspelt
    assert all(r["error"] is None for r in out["results"][:10])


def test_loaded_from_the_entry_point(model_path):
    """Installed with the package, the processor is loaded by every engine without being
    named; this vLLM on the CPU schedules synchronously, so the output lists are complete."""
    from importlib.metadata import entry_points

    names = [e.value for e in entry_points(group="vllm.logits_processors")]
    assert "gramgen.vllm.logits_processor:GramgenLogitsProcessor" in names
    out = run(model_path, [request("P:", seed=7, schema=PERSON), request("Q:", seed=8, regex=REGEX)],
              explicit=False)
    assert out["startup_error"] is None, out["startup_error"]
    check_json(out["results"][0], PERSON)
    assert re.fullmatch(REGEX, out["results"][1]["text"])


NGRAM = {"speculative_config": {"method": "ngram", "num_speculative_tokens": 2,
                                "prompt_lookup_max": 2, "prompt_lookup_min": 1}}


def test_speculative_decoding_is_refused_loudly(model_path):
    """Under speculative decoding vLLM runs no logits processor: a constrained request would
    come out unconstrained. Through the entry point, each constrained request is refused
    (unconstrained ones still run); named in logits_processors, the engine does not start."""
    out = run(model_path, [request("P:", seed=7, schema=PERSON), request("Q:", seed=8, max_tokens=8)],
              explicit=False, mode="engine", engine=NGRAM)
    assert out["startup_error"] is None, out["startup_error"]
    refused, plain = out["results"]
    assert "speculative decoding (ngram)" in refused["error"] and "unconstrained" in refused["error"], refused
    assert plain["error"] is None and len(plain["token_ids"]) == 8
    named = run(model_path, [request("P:", schema=PERSON)], explicit=True, engine=NGRAM)
    assert named["startup_error"] is not None
    assert re.search(r"speculative", named["startup_error"], re.I), named["startup_error"]


# -- vllm serve: the OpenAI-compatible server, constraints in vllm_xargs ---------------------

def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> tuple[int, dict]:
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    """``vllm serve`` on a loopback port, the processor named with --logits-processors, and
    gramgen's structured-output backend turned on (GRAMGEN_VLLM_STRUCTURED_OUTPUT=1: the
    plugin patches the API server's request validation and the engine core process's
    grammar set-up, two processes here)."""
    import os
    import time
    import urllib.request

    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_path,
               "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
               "--max-model-len", "512", "--max-num-seqs", "8", "--seed", "0",
               "--logits-processors", "gramgen.vllm:GramgenLogitsProcessor"]
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", GRAMGEN_VLLM_STRUCTURED_OUTPUT="1")
    with open(log, "wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"vllm serve exited ({process.returncode}):\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve did not come up in 240 s:\n{log.read_text()[-4000:]}")
            time.sleep(1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_vllm_serve_with_vllm_xargs(server, model_path):
    body = {"model": model_path, "prompt": "Person:", "max_tokens": 96, "temperature": 1.0, "seed": 3,
            "vllm_xargs": extra_args(schema=PERSON)}
    status, answer = _post(server + "/v1/completions", body)
    assert status == 200, answer
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    jsonschema.validate(json.loads(choice["text"]), PERSON)

    bad = dict(body, vllm_xargs={"gramgen_regex": "a(b"})
    status, answer = _post(server + "/v1/completions", bad)
    assert status == 400, answer
    assert "gramgen_regex: GrammarError" in json.dumps(answer), answer

    # the server is still up and serving constrained requests
    status, answer = _post(server + "/v1/completions", dict(body, seed=4, vllm_xargs=extra_args(regex=REGEX)))
    assert status == 200 and re.fullmatch(REGEX, answer["choices"][0]["text"]), answer


def test_vllm_serve_response_format_served_by_gramgen(server, model_path):
    """A chat request's response_format, served by gramgen's structured-output backend: the
    JSON comes in gramgen's layout (json.dumps' separators; vLLM's default xgrammar backend
    lets this random model write whitespace without end), and a bad schema is answered 400
    with gramgen's message."""
    schema = {"name": "person", "schema": PERSON}
    body = {"model": model_path, "messages": [{"role": "user", "content": "A person, as JSON."}],
            "max_tokens": 96, "temperature": 1.0, "seed": 5,
            "response_format": {"type": "json_schema", "json_schema": schema}}
    status, answer = _post(server + "/v1/chat/completions", body)
    assert status == 200, answer
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    text = choice["message"]["content"]
    value = json.loads(text)
    jsonschema.validate(value, PERSON)
    assert text == json.dumps(value, ensure_ascii=False), text

    bad = dict(body, response_format={"type": "json_schema", "json_schema": {
        "name": "bad", "schema": {"type": "integer", "minimum": "zero"}}})
    status, answer = _post(server + "/v1/chat/completions", bad)
    assert status == 400, answer
    assert "gramgen: structured_outputs.json: SchemaError" in json.dumps(answer), answer
