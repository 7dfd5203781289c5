"""The benchmark's own logic: statistics, ratios, verdict bookkeeping, --check, the JSON
instance serialization, and adapter verdicts on a tiny grammar (bench/ is not part of the
library, but its numbers are what performance changes are judged by)."""

from __future__ import annotations

import gc
import importlib.util
import json
import sys
import types

import numpy as np
import pytest
from conftest import ROOT, hf_tokenizer

sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.__main__ import _walk, split_runs  # noqa: E402
from bench.adapters import CompileFailed, NotApplicable, byte_level_token_bytes, make_adapter  # noqa: E402
from bench.workloads import schema_order, serialize_instance, _validator  # noqa: E402


def _text(tid, expect=None, accepted=True, mask_ns=(1000, 3000), **kw):
    t = {"id": tid, "expect": expect, "accepted": accepted, "mask_ns": list(mask_ns),
         "advance_ns": [10] * len(mask_ns), "steps": len(mask_ns), "n_tokens": len(mask_ns),
         "rejected_at": None if accepted else 1, "allowed_counts": [5] * len(mask_ns)}
    t.update(kw)
    return t


def _case(cid, status="ok", seconds=(0.01,), texts=(), **kw):
    c = {"workload": "jsonschema", "id": cid, "status": status, "reason": "",
         "compile": {"seconds": list(seconds), "rss_delta_bytes": 2**20} if status == "ok" else {"seconds": []},
         "texts": list(texts), "timeouts": {"compile": 0, "text": 0, "case": 0}}
    c.update(kw)
    return c


def _run(lib, cs, tokenizer="smollm2", status="ok"):
    return {"lib": lib, "tokenizer": tokenizer, "workload": "jsonschema", "status": status,
            "prepare_seconds": 0.5, "cases": cs}


def test_percentiles_and_formatting():
    d = report.pct(list(range(1, 101)))
    assert d["p50"] == pytest.approx(50.5) and d["max"] == 100 and d["n"] == 100
    assert d["p99"] == pytest.approx(99.01)
    assert report.pct([]) == {}
    assert report.ratio(3.0, 1.5) == "2.00×"
    assert report.ratio(1.0, None) == "—" and report.ratio(None, 1.0) == "—" and report.ratio(1, 0) == "—"
    assert report.dur(0.0025, "s") == "2.5 ms"
    assert report.dur(1500, "µs") == "1.5 ms"
    assert report.dur(2.5, "ms") == "2.5 ms"
    assert report.dur(3e6, "µs") == "3.00 s"


def test_summarize_counts_compile_failures_timeouts_and_verdicts():
    run = _run("xgrammar", [
        _case("a", texts=[_text("a#0", True), _text("a#1", False, accepted=False),
                          _text("a#2", False, accepted=True, mask_ns=())]),
        _case("b", status="compile_error"),
        _case("c", status="timeout", timeouts={"compile": 0, "text": 0, "case": 1}),
        _case("d", status="n/a"),
        _case("e", texts=[_text("e#0", True, accepted=False, truncated=True)]),
    ])
    s = report.summarize(run)
    assert s["n_cases"] == 4  # n/a is not a case the library was asked to compile
    assert s["n_compiled"] == 2 and s["compile_success_pct"] == 50.0
    assert s["n_compile_failed"] == 1 and s["n_case_timeouts"] == 1 and s["timeouts"] == 1
    assert (s["n_valid"], s["n_valid_accepted"]) == (2, 1)
    assert s["valid_accepted_pct"] == 100.0  # the cut text has no verdict
    assert (s["n_invalid"], s["n_invalid_rejected"]) == (2, 1)
    assert s["invalid_rejected_pct"] == 50.0
    assert s["mask_us"]["n"] == 6 and s["mask_us"]["max"] == 3.0
    assert s["n_truncated"] == 1
    assert s["rss_delta_mb"] == 1.0


def test_best_peer_and_summary_ratio():
    g = report.summarize(_run("gramgen", [_case("a", seconds=(0.02,), texts=[_text("a#0", True, mask_ns=(4000,) * 3)])]))
    x = report.summarize(_run("xgrammar", [_case("a", seconds=(0.01,), texts=[_text("a#0", True, mask_ns=(2000,) * 3)])]))
    ll = report.summarize(_run("llguidance", [_case("a", seconds=(0.04,), texts=[_text("a#0", True, mask_ns=(8000,) * 3)])]))
    sums = {"gramgen": g, "xgrammar": x, "llguidance": ll}
    lib, v = report.best_peer(sums, lambda s: s["mask_us"]["p50"])
    assert lib == "xgrammar" and v == 2.0
    assert report.ratio(g["mask_us"]["p50"], v) == "2.00×"
    assert report.best_peer(sums, lambda s: s["compile_success_pct"], higher_is_better=True)[1] == 100.0


def test_slowest_masks_name_case_text_and_step():
    run = _run("gramgen", [
        _case("a", texts=[_text("a#0", mask_ns=(1000, 9000, 2000)), _text("a#1", mask_ns=(4000,))]),
        _case("b", texts=[_text("b#0", mask_ns=(7000, 500))]),
        _case("c", status="compile_error"),
    ])
    assert report.slowest_masks(run, 3) == [(9.0, "a", "a#0", 1), (7.0, "b", "b#0", 0), (4.0, "a", "a#1", 0)]
    md = "\n".join(report.slowest_section({"runs": [run]}))
    assert "## Slowest masks" in md and "| gramgen | 9 | — | a | a#0 | 1 |" in md   # (no gc recorded)
    run["cases"][0]["texts"][0]["mask_gc_ns"] = {"1": 6000}
    run["cases"][1]["texts"][0]["mask_gc_ns"] = {}
    md = "\n".join(report.slowest_section({"runs": [run]}))
    assert "| gramgen | 9 | 6 | a | a#0 | 1 |" in md and "| gramgen | 7 | 0 | b | b#0 | 0 |" in md


def test_disagreements_list_which_library_agrees_with_jsonschema():
    results = {"workloads": {"jsonschema": {"cases": [
        {"id": "a", "texts": [{"id": "a#0", "expect": True, "jsonschema_valid": True},
                              {"id": "a#1", "expect": False, "jsonschema_valid": False},
                              {"id": "a#2", "expect": True, "jsonschema_valid": True}]}]}}}
    runs = {
        "gramgen": _run("gramgen", [_case("a", texts=[_text("a#0", True), _text("a#1", False, accepted=False),
                                                      _text("a#2", True)])]),
        "xgrammar": _run("xgrammar", [_case("a", texts=[_text("a#0", True), _text("a#1", False, accepted=True),
                                                        _text("a#2", True)])]),
        "outlines-core": _run("outlines-core", [_case("a", status="compile_error")]),
    }
    rows = report.disagreements(results, "jsonschema", "smollm2", runs)
    assert [r["text"] for r in rows] == ["a#1"]
    assert rows[0]["agree"] == ["gramgen"]
    assert rows[0]["verdicts"]["outlines-core"] == "compile failed"
    md = report.markdown({"meta": {"command": "python -m bench", "mode": "quick", "seed": 0, "compile_reps": 0,
                                   "date": "d", "wall_seconds": 1, "machine": {"cpu": "c", "usable_cores": 1,
                                   "logical_cores": 1, "os": "o", "python": "3"}, "versions": {},
                                   "threads": "t"},
                          "workloads": {"jsonschema": {**results["workloads"]["jsonschema"], "n_texts": 3,
                                                       "source": "s", "notes": []}},
                          "runs": list(runs.values())})
    assert "| jsonschema | smollm2 |" in md
    assert "| `a` | `#1` | invalid | invalid | reject @1 '' | accept | compile failed | gramgen |" in md


def test_check_fails_only_past_the_ratio():
    def res(mask_ns):
        return {"meta": {"mode": "quick", "date": "d"},
                "runs": [_run("gramgen", [_case("a", texts=[_text("a#0", True, mask_ns=mask_ns)])])]}

    old = res([1000] * 100)
    ok, _ = report.check(res([1200] * 100), old, 1.3)
    assert ok
    ok, lines = report.check(res([1500] * 100), old, 1.3)
    assert not ok and lines[-1] == "FAILED"
    # the format written before cases existed (texts directly on the run) still compares
    legacy = {"meta": {"mode": "quick", "date": "d"}, "runs": [
        {"lib": "gramgen", "tokenizer": "smollm2", "workload": "jsonschema", "status": "ok",
         "texts": [_text("x", mask_ns=[1000] * 10)], "compile": {"seconds": [0.1]}}]}
    assert report.check(res([1000] * 100), legacy, 1.3)[0]


def test_split_runs_groups_cases_per_workload():
    job = {"lib": "gramgen", "tokenizer": "qwen2", "status": "ok", "prepare_seconds": 1.0, "cases": {
        "lark:x": dict(_case("x"), workload="lark"), "gbnf:y": dict(_case("y", status="n/a"), workload="gbnf")}}
    runs = split_runs(job, ["lark", "gbnf", "json"])
    assert [(r["workload"], r["status"]) for r in runs] == [("lark", "ok"), ("gbnf", "n/a")]


def test_schema_order_follows_refs_allof_and_the_matching_anyof_branch():
    schema = {
        "$defs": {"P": {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "string"}}}},
        "type": "object",
        "allOf": [{"properties": {"z": {"$ref": "#/$defs/P"}}}],
        "properties": {"y": {"anyOf": [{"type": "string"},
                                       {"type": "object", "properties": {"q": {}, "p": {}}}]},
                       "l": {"type": "array", "items": {"$ref": "#/$defs/P"}}},
    }
    inst = {"extra": 0, "l": [{"a": "x", "b": 1}], "z": {"a": "x", "b": 1, "c": 3}, "y": {"p": 1, "q": 2}}
    out = schema_order(inst, schema, _validator(schema))
    assert out == inst  # same content ...
    assert list(out) == ["y", "l", "z", "extra"]  # ... declared keys first, in declaration order
    assert list(out["z"]) == ["b", "a", "c"] and list(out["y"]) == ["q", "p"] and list(out["l"][0]) == ["b", "a"]
    text, valid = serialize_instance(inst, schema)
    assert valid is True and json.loads(text) == inst and ", " not in text and ": " not in text


def test_byte_level_token_bytes_round_trip():
    tok = hf_tokenizer("smollm2")
    table, special = byte_level_token_bytes(tok)
    assert tok.eos_token_id in special and tok.eos_token_id not in table
    s = "héllo wörld 😀 {\"a\": [1, 2]}\n\tend"
    ids = tok.encode(s, add_special_tokens=False)
    assert b"".join(table[i] for i in ids) == s.encode("utf-8")


ARITH = 'root ::= expr "\\n"\nexpr ::= num (("+" | "*") num)*\nnum ::= [0-9]+\n'


@pytest.mark.parametrize("lib", ["gramgen", "xgrammar", "llguidance", "transformers-cfg"])
def test_adapter_verdicts_on_a_tiny_grammar(lib):
    module = {"gramgen": "gramgen", "xgrammar": "xgrammar", "llguidance": "llguidance",
              "transformers-cfg": "transformers_cfg"}[lib]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{lib} is not installed (pip install -e .[bench])")
    tok = hf_tokenizer("smollm2")
    a = make_adapter(lib)
    a.load()
    a.prepare(tok, str(ROOT.parent / "shared" / "tokenizers" / "smollm2"))
    case = {"kind": "gbnf", "source": ARITH, "start": "root", "path": "arith"}
    compiled = a.compile(a.grammar_for(case, "gbnf"))

    def walk(s):
        return _walk(a, compiled, tok.encode(s, add_special_tokens=False))

    good = walk("12+3*45\n")
    assert good["accepted"] and good["n_inconsistent"] == 0 and good["steps"] == good["n_tokens"]
    assert all(n > 0 for n in good["allowed_counts"]) and len(good["mask_ns"]) == good["steps"]
    bad = walk("12++3\n")
    assert not bad["accepted"] and bad["rejected_at"] is not None and bad["n_inconsistent"] == 0
    assert not walk("12+3")["accepted"]  # a prefix, not a sentence
    unmasked = _walk(a, compiled, tok.encode("7\n", add_special_tokens=False), timed=False)
    assert unmasked["accepted"] and unmasked["mask_ns"] == []
    if lib == "transformers-cfg":
        with pytest.raises(NotApplicable):
            a.grammar_for({"kind": "jsonschema", "source": "{}", "start": "", "path": "s"}, "jsonschema")
    else:
        with pytest.raises(CompileFailed):
            a.compile(a.grammar_for({"kind": "gbnf", "source": "root ::= (", "start": "root", "path": "x"}, "gbnf"))


class _CollectingAdapter:
    """A stand-in library whose mask runs a garbage collection at the given steps."""

    def __init__(self, collect_at):
        self.collect_at = set(collect_at)

    def matcher(self, compiled):
        return types.SimpleNamespace(bitmask=np.zeros((1, 1), dtype=np.int32), step=0)

    def mask_callable(self, m):
        def mask():
            if m.step in self.collect_at:
                gc.collect()
        return mask

    def allowed(self, m, tok):
        return True

    def advance(self, m, tok):
        m.step += 1
        return True

    def after_mask(self, m):
        pass

    def accepting(self, m):
        return True


def test_walk_records_collections_inside_masks():
    """mask_gc_ns names the steps whose mask a garbage collection ran in, with its pause
    (part of that mask's time); automatic collections are off here, so no other step has
    one."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        walked = _walk(_CollectingAdapter({1, 3}), None, [5, 6, 7, 8, 9])
        quiet = _walk(_CollectingAdapter(()), None, [5, 6, 7])
    finally:
        if enabled:
            gc.enable()
    assert set(walked["mask_gc_ns"]) == {"1", "3"}
    assert all(0 < ns <= walked["mask_ns"][int(step)] for step, ns in walked["mask_gc_ns"].items())
    assert quiet["mask_gc_ns"] == {} and len(quiet["mask_ns"]) == 3


def test_outlines_adapter_on_a_tiny_schema():
    if importlib.util.find_spec("outlines_core") is None:
        pytest.skip("outlines-core is not installed (pip install -e .[bench])")
    tok = hf_tokenizer("smollm2")
    a = make_adapter("outlines-core")
    a.load()
    a.prepare(tok, "")
    schema = json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
    compiled = a.compile(a.grammar_for({"kind": "jsonschema", "source": schema, "start": "", "path": "s"}, "jsonschema"))
    ok = _walk(a, compiled, tok.encode('{"n":12}', add_special_tokens=False))
    assert ok["accepted"] and ok["n_inconsistent"] == 0
    assert not _walk(a, compiled, tok.encode('{"n":"x"}', add_special_tokens=False))["accepted"]
    with pytest.raises(NotApplicable):
        a.grammar_for({"kind": "lark", "source": "start: 'a'", "start": "start", "path": "l"}, "lark")
    assert np.asarray(ok["allowed_counts"]).min() > 0


def test_lark_labels_samples_with_lark_itself():
    from bench.workloads import Text, lark_label

    calc = 'start: expr\n?expr: NUMBER | expr "+" NUMBER\n%import common.NUMBER\n%import common.WS\n%ignore WS\n'
    assert lark_label(calc, "start", Text("a", "1 + 2"), ROOT).expect is True
    assert lark_label(calc, "start", Text("b", "1 +"), ROOT).expect is False
    indented = "start: _INDENT 'x'\n%declare _INDENT\n"
    assert lark_label(indented, "start", Text("c", "x"), ROOT).expect is None  # needs a postlexer


def test_why_slow_replays_the_slowest_mask_of_a_run(tmp_path, capsys):
    """bench.why_slow finds the run's slowest gramgen mask, replays the case up to that
    step and prints its parts: here the third mask of a quick-sample schema's first valid
    instance, with gpt2's vocabulary."""
    from bench import why_slow
    from bench.workloads import QUICK, load_jsonschema

    case = load_jsonschema(QUICK, 0).cases[0]
    text = next(t for t in case.texts if t.expect)
    run = _run("gramgen", [_case(case.id, texts=[_text(text.id, mask_ns=(1000, 2000, 9000, 3000))])],
               tokenizer="gpt2")
    meta = {"command": "python -m bench --workloads jsonschema --tokenizers gpt2", "versions": {}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"meta": meta, "runs": [run]}))
    assert why_slow.main(["--results", str(path), "-n", "1", "--max-work", "0"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 9 |")]
    assert len(rows) == 1
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == "—" and cells[9] == case.id and cells[10] == "2"
    replay, classify, walk = (float(cells[i].split()[0].replace(",", "")) for i in (2, 3, 4))
    assert replay >= classify + walk >= 0


def test_why_slow_between_samples_the_masks_of_a_time_band(tmp_path, capsys):
    """--between LO HI replays masks that took between LO and HI µs in the run (the masks
    around a percentile), not the slowest: here the only mask of 1.5-2.5 µs."""
    from bench import why_slow
    from bench.report import masks_between
    from bench.workloads import QUICK, load_jsonschema

    case = load_jsonschema(QUICK, 0).cases[0]
    text = next(t for t in case.texts if t.expect)
    run = _run("gramgen", [_case(case.id, texts=[_text(text.id, mask_ns=(1000, 2000, 9000, 3000))])],
               tokenizer="gpt2")
    assert [m[3] for m in masks_between(run, 0.5, 3.5, 10)] == [3, 1, 0]
    meta = {"command": "python -m bench --workloads jsonschema --tokenizers gpt2", "versions": {}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"meta": meta, "runs": [run]}))
    assert why_slow.main(["--results", str(path), "--between", "1.5", "2.5"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 2 |")]
    assert len(rows) == 1 and "masks of 1.5-2.5 µs" in out and "| 9 |" not in out
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[8] == case.id and cells[9] == "1"   # (no bounded column without --max-work)


def test_gramgen_adapter_cold_or_warm_caches():
    """--gramgen-caches: cold (the default) empties gramgen's process caches before each
    compile (``cold_start``, which the harness calls untimed before every timed compile);
    warm keeps what an earlier case left (and says so in its policy)."""
    from gramgen.grammar.json_schema import strings

    tok = hf_tokenizer("smollm2")
    first = json.dumps({"type": "string", "pattern": "^[a-c]+x$"})
    second = json.dumps({"type": "string", "pattern": "^[d-f]+y$"})
    from gramgen._lru import clear_all

    for mode in ("cold", "warm"):
        clear_all()
        a = make_adapter("gramgen", {"gramgen_caches": mode})
        a.load()
        a.prepare(tok, "")
        for source in (first, second):
            a.cold_start()
            a.compile(a.grammar_for({"kind": "jsonschema", "source": source, "start": "", "path": "s"},
                                    "jsonschema"))
        kept = strings.pattern_dfa.cache_info().currsize
        assert kept == (1 if mode == "cold" else 2), mode
        assert ("warm" in a.json_schema_policy) == (mode == "warm")


def test_turns_go_round_the_table():
    """``Turns``: the seated libraries hold the turn one at a time and in their order,
    however fast each asks again; one that leaves is skipped."""
    import threading
    import time

    from bench.__main__ import Turns

    turns, order, holders = Turns(["A", "B", "C"]), [], []

    def worker(name, rounds, pause):
        seat = turns.seat(name)
        for _ in range(rounds):
            seat.acquire()
            holders.append(name)
            assert len(holders) == 1
            order.append(name)
            time.sleep(0.001)
            holders.pop()
            seat.release()
            time.sleep(pause)
        seat.leave()

    threads = [threading.Thread(target=worker, args=args) for args in (("A", 10, 0), ("B", 10, 0.003), ("C", 4, 0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert order == ["A", "B", "C"] * 4 + ["A", "B"] * 6, order


@pytest.mark.parametrize("per_turn, turns_each", [(None, 5), (2, 4)])
def test_workers_take_turns_case_by_case(per_turn, turns_each):
    """With turns, two library jobs run side by side but never in a phase at the same time:
    each worker asks for the turn before it prepares, before each few cases (``turn_cases``)
    and before its memory probes, and the two alternate."""
    import threading
    import time

    from bench.__main__ import Limits, Turns, run_job
    from conftest import require_shared

    tok = hf_tokenizer("smollm2")
    schemas = [{"type": "integer"}, {"type": "string", "maxLength": 3}, {"enum": ["a", "b"]}]
    cases = []
    for i, schema in enumerate(schemas):
        text = json.dumps(1 if i == 0 else "ab" if i == 1 else "a")
        cases.append({"id": str(i), "kind": "jsonschema", "source": json.dumps(schema), "start": "", "path": "",
                      "key": f"jsonschema#{i}", "workload": "jsonschema", "reps": 0, "warm_reps": 0,
                      "texts": [{"id": "t", "ids": tok.encode(text, add_special_tokens=False), "expect": True}]})
    spans: list[tuple[str, float, float]] = []
    turns = Turns(["A", "B"])

    class Recorded(Turns.Seat):
        def acquire(self):
            super().acquire()
            self.since = time.monotonic()

        def release(self):
            spans.append((self.name, self.since, time.monotonic()))
            super().release()

    results = {}

    def one(name):
        job = {"lib": "gramgen", "tokenizer": "smollm2", "cases": cases, "text_budget_s": 5.0,
               "tokenizer_path": str(require_shared() / "tokenizers" / "smollm2"), "options": {},
               "case_limit_s": 30.0, "fork": False, "turns": True, "turn_cases": per_turn}
        results[name] = run_job(job, Limits(False, None, None), lambda msg: None, Recorded(turns, name))

    threads = [threading.Thread(target=one, args=(n,)) for n in "AB"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for name in "AB":
        r = results[name]
        assert r["status"] == "ok" and all(c["status"] == "ok" for c in r["cases"].values()), r
    # prepare, the three cases one or two a turn, the memory probes: alternating, never overlapping
    spans.sort(key=lambda s: s[1])
    assert [n for n, _, _ in spans] == ["A", "B"] * turns_each
    assert all(a[2] <= b[1] for a, b in zip(spans, spans[1:]))
