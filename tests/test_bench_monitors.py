"""bench/monitors.py's own logic, no model: where sites are cut, which are picked, where the
prompt starts, the NIM and hallucination scores and their aggregation, on fabricated code
and records; the committed MONITORS.md numbers rest on these."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT))

from bench.monitors import (KINDS, ORIGINS, candidates, defined_after, first_identifier,  # noqa: E402
                            keyword_sites, member_sites, pick_sites, prompt_start, report,
                            rewrite_report, score, summarize, targets, timing, valid_names,
                            written_name)

CODE = '''import os
x = "a,b".split(",")
y = os.path.join("a", "b")
café = 1; z = obj.attr
obj.name = 3
n = 1.5.real
w = f(a, key=1,
      other=2)
g(first=(1, 2), **extra)
h(a , spaced=3)
'''


def _cut_at(text, sites):
    return [(s.truth, text[s.offset - 1], text[s.offset:s.offset + len(s.truth)]) for s in sites]


def test_member_sites_cut_right_after_the_dot_of_reads_of_non_literals():
    sites = member_sites(CODE)
    assert [s.truth for s in sites] == ["path", "join", "attr"]
    for truth, before, after in _cut_at(CODE, sites):
        assert before == "." and after == truth
    # the column of `obj.attr` follows a non-ASCII character on its line: ast counts bytes
    assert CODE[:sites[-1].offset].endswith("café = 1; z = obj.")
    assert [s.line for s in sites] == [3, 3, 4]


def test_keyword_sites_cut_after_the_open_paren_or_comma():
    sites = keyword_sites(CODE)
    assert [s.truth for s in sites] == ["key", "other", "first", "spaced"]
    prefixes = [CODE[:s.offset] for s in sites]
    assert prefixes[0].endswith("w = f(a,")
    assert prefixes[1].endswith("key=1,")   # the newline and indentation are the model's
    assert prefixes[2].endswith("g(")
    assert prefixes[3].endswith("h(a ,")
    for s in sites:
        assert CODE[s.offset:].lstrip().startswith(s.truth + "=")


def test_sites_inside_f_string_fields_are_marked():
    text = 'a = o.x\nb = f"{o.y} {g(k=1)}"\n'
    assert [(s.truth, s.in_fstring) for s in member_sites(text)] == [("x", False), ("y", True)]
    assert [(s.truth, s.in_fstring) for s in keyword_sites(text)] == [("k", True)]


def test_defined_after_the_cut():
    text = "x = self.\nclass A:\n    def run(self): pass\n    size: int = 3\nself.data = 1\nn == 2\n"
    cut = text.index(".") + 1
    assert defined_after(text, cut, "run") and defined_after(text, cut, "A")
    assert defined_after(text, cut, "size") and defined_after(text, cut, "data")
    assert not defined_after(text, cut, "n")          # a comparison defines nothing
    assert not defined_after(text, cut, "x")          # defined above the cut only
    assert not defined_after(text, cut, "ru")


def test_sites_with_a_comment_before_the_keyword_are_left_out():
    text = "f(a,  # why\n  key=1)\n"
    assert keyword_sites(text) == []
    assert [s.truth for s in keyword_sites("f(a,\n  key=1)\n")] == ["key"]


def test_candidates_keep_only_sites_below_the_first_lines():
    text = "\n".join(f"v{i} = o.a{i}" for i in range(1, 15)) + "\n"
    found = candidates(text, "member")
    assert [s.truth for s in found] == [f"a{i}" for i in range(11, 15)]


def _fake_files(tmp_path: Path, n: int):
    files = {}
    for origin in ORIGINS:
        files[origin] = []
        for i in range(n):
            path = tmp_path / f"{origin}{i}.py"
            body = "\n" * 12 + f"r = obj.m{i}\ns = f(a, k{i}=1)\n"
            path.write_text(body)
            files[origin].append((path, tmp_path))
    return files


def test_pick_sites_alternates_kinds_and_origins_one_site_per_file_and_is_seeded(tmp_path):
    files = _fake_files(tmp_path, 6)
    picked = pick_sites(files, 8, seed=3, read=lambda p: p.read_text())
    assert [(o, s.kind) for o, _, _, _, s in picked] == [
        (ORIGINS[i // 2 % 2], KINDS[i % 2]) for i in range(8)]
    assert len({p for _, p, _, _, _ in picked}) == 8
    for _, path, _, text, site in picked:
        assert text == path.read_text() and site.truth in text
    again = pick_sites(files, 8, seed=3, read=lambda p: p.read_text())
    assert [(p, s) for _, p, _, _, s in again] == [(p, s) for _, p, _, _, s in picked]
    other = pick_sites(files, 8, seed=4, read=lambda p: p.read_text())
    assert [p for _, p, _, _, _ in other] != [p for _, p, _, _, _ in picked]


def test_pick_sites_skips_unreadable_files(tmp_path):
    files = _fake_files(tmp_path, 4)
    bad = {files["stdlib"][0][0], files["stdlib"][1][0]}
    picked = pick_sites(files, 2, seed=0, read=lambda p: None if p in bad else p.read_text())
    assert len(picked) == 2 and not {p for _, p, _, _, _ in picked} & bad
    with pytest.raises(ValueError, match="not enough stdlib files"):
        pick_sites(files, 5, seed=0, read=lambda p: None if p in bad else p.read_text())


def _offsets(text):
    """Spans of a toy tokenization: every 3 characters."""
    return [(i, min(i + 3, len(text))) for i in range(0, len(text), 3)]


def test_prompt_starts_at_a_line_start_within_the_last_tokens():
    text = "aaaaaa\nbbbbbb\ncccccc\nobj."
    offsets = _offsets(text)
    assert prompt_start(text, offsets, len(offsets)) == 0
    # the last 7 tokens start at character 6 (the end of the first line): the next line
    assert text[prompt_start(text, offsets, 7):] == "bbbbbb\ncccccc\nobj."
    # 8 tokens start exactly at a line start (character 3 is inside it: the next one)
    assert text[prompt_start(text, offsets, 8):] == "bbbbbb\ncccccc\nobj."
    assert text[prompt_start(text, offsets, 4):] == "obj."      # from character 15
    spans = [(0, 7), (7, 14), (14, 25)]                          # a token that is a whole line
    assert text[prompt_start(text, spans, 2):] == "bbbbbb\ncccccc\nobj."
    # a token budget smaller than the last line: the last line still
    assert text[prompt_start(text, offsets, 1):] == "obj."


def test_first_identifier_and_the_name_written_at_the_cursor():
    assert first_identifier("append(x)") == "append"
    assert first_identifier(" 1e5 + foo") == "foo"
    assert first_identifier("(a.b)") == "a"
    assert first_identifier("()") is None
    assert written_name("member", "append(x)") == "append"
    assert written_name("member", "\nfoo") is None
    assert written_name("keyword", "\n    key=1)") == "key"
    assert written_name("keyword", " key == 1)") is None
    assert written_name("keyword", " value)") is None


def test_score_nim_and_hallucination():
    valid = {"append", "count"}
    assert score("member", "append(1)", "append", valid) == {
        "first": "append", "nim": True, "name": "append", "unfinished": False, "spaced": False,
        "hallucinated": False}
    # the budget ran out inside a name: a prefix of a valid one is no hallucination, but no match
    cut = score("member", "appe", "append", valid)
    assert cut["unfinished"] and not cut["hallucinated"] and not cut["nim"]
    assert score("member", "appx", "append", valid)["hallucinated"]
    assert score("member", "append", "append", valid)["nim"]
    assert score("member", "apend(1)", "append", valid)["hallucinated"]
    # jedi knows nothing: nothing can be called hallucinated
    assert not score("member", "apend(1)", "append", None)["hallucinated"]
    # a positional argument is no keyword name
    kw = score("keyword", " k)", "key", {"key"})
    assert not kw["hallucinated"] and not kw["nim"] and kw["name"] is None
    assert score("keyword", " kee=1)", "key", {"key"})["hallucinated"]
    spaced = score("keyword", "\n    kee = 1)", "key", {"key"})
    assert spaced["hallucinated"] and spaced["spaced"] and spaced["name"] == "kee"
    assert not score("keyword", " kee=1)", "key", {"key"})["spaced"]


def _record(kind, origin, known, plain, monitor, truth="t", truth_valid=True):
    valid = {truth, "other"} if known else None

    def side(text, seconds):
        return {"text": text, "seconds": seconds, "mask_seconds": 0.5, "queries": 2,
                "query_seconds": 0.2, "failures": 0, "fallbacks": 0,
                **score(kind, text, truth, valid)}
    return {"kind": kind, "origin": origin, "known": known, "truth": truth, "file": "f.py", "line": 1,
            "truth_valid": known and truth_valid, "prompt_tokens": 100, "oracle_seconds": 0.1,
            "plain": side(plain, 1.0), "monitor": {**side(monitor, 2.0), "queries": 1}}


def _records():
    return [
        _record("member", "stdlib", True, "tx(", "t("),              # hallucination fixed, NIM gained
        _record("member", "stdlib", True, "t(", "t("),
        _record("member", "packages", False, "zz", "zz"),           # unknown: not hallucinated
        _record("keyword", "packages", True, " bad=1)", " t=1)"),
        _record("keyword", "stdlib", True, " x)", " x)"),           # positional: no name
    ]


def test_summarize_counts_per_group():
    rows = {r["group"]: r for r in summarize(_records())}
    all_ = rows["all"]
    assert (all_["sites"], all_["known"], all_["truth_valid"]) == (5, 4, 4)
    assert all_["nim_plain"] == 20.0 and all_["nim_monitor"] == 60.0 and all_["nim_gain"] == 40.0
    assert all_["hallucinated_plain"] == 2 and all_["hallucinated_monitor"] == 0
    assert all_["hallucinated_plain_pct"] == 50.0
    assert all_["changed"] == 2
    assert rows["member, jedi unknown"]["sites"] == 1 and rows["member, jedi knows"]["sites"] == 2
    assert rows["keyword"]["no_name_plain"] == 1
    assert rows["stdlib"]["sites"] == 3 and rows["packages"]["sites"] == 2
    goal = targets(summarize(_records()), _records())
    assert goal["nim_gain"] and goal["no_hallucinated_member_where_known"]


def test_targets_fail_on_a_hallucinated_member_with_the_monitor_where_jedi_knows():
    records = _records() + [_record("member", "stdlib", True, "t", "tx")]
    goal = targets(summarize(records), records)
    assert not goal["no_hallucinated_member_where_known"]
    assert goal["hallucinated_members_with_monitor_where_known"] == 1


def test_targets_count_keyword_names_apart_and_the_spaced_ones():
    records = _records() + [_record("keyword", "stdlib", True, " t=1", " bad = 1"),
                            _record("keyword", "stdlib", True, " t=1", " bad=1"),
                            _record("keyword", "stdlib", False, " t=1", " bad = 1")]   # unknown: free
    goal = targets(summarize(records), records)
    assert goal["no_hallucinated_member_where_known"]
    assert goal["hallucinated_keywords_with_monitor_where_known"] == 2 and goal["of_which_spaced"] == 1


def test_timing_and_report():
    records = _records()
    untimed = _record("member", "stdlib", True, "t", "t")
    untimed["timed"] = False
    untimed["monitor"]["seconds"] = 0.1   # reused the plain call's forward passes
    records.append(untimed)
    times = timing(records)
    assert times["timed_sites"] == 5
    assert times["plain_mean"] == 1.0 and times["monitor_mean"] == 2.0
    assert times["queries"] == 6 and times["query_mean"] == pytest.approx(0.2)
    rows = summarize(records)
    data = {"meta": {"command": "python -m bench.monitors --sites 5", "date": "d", "machine": "m",
                     "python": "3", "jedi": "0", "model": "SmolLM2", "max_new_tokens": 8, "seed": 1,
                     "prompt_tokens": 100, "timed_every": 5, "packages": ["jedi"], "wall_minutes": 1.0},
            "summary": rows, "timing": times, "targets": targets(rows, records), "records": records}
    records.append(_record("member", "stdlib", True, "t", "tx", truth_valid=False))
    records[-1]["in_fstring"], records[-1]["defined_after"] = True, True
    records.append(_record("keyword", "stdlib", True, " t=1", " bad = 1"))
    rows = summarize(records)
    data["summary"], data["targets"] = rows, targets(rows, records)
    text = report(data)
    assert text.splitlines()[3] == "python -m bench.monitors --sites 5"
    assert "| member `f.py:1` | `tx` | `tx` | 1 | inside an f-string's replacement field" in text
    assert "| keyword `f.py:1` | `bad` | ` bad = 1` | 1 | `name = value`" in text
    assert "1 of 4 member sites where jedi knows the type" in text
    assert "| `f.py:1` | `t` | yes | `t` | `tx` |" in text
    assert "| all | 8 | 7 | 6 / 7 | 50.0 % | 50.0 % | 0.0 pt |" in text
    assert "`tx(` | `t(`" in text


def test_valid_names_asks_jedi(tmp_path):
    """The oracle itself, on a two-file project (jedi only, no model)."""
    (tmp_path / "shapes.py").write_text("class Circle:\n    def __init__(self, r):\n        self.radius = r\n"
                                        "    def area(self):\n        return 3 * self.radius ** 2\n"
                                        "def make(radius, *, unit='m'):\n    return Circle(radius)\n"
                                        "def free(**kw):\n    pass\n")
    main = tmp_path / "main.py"
    names = valid_names("member", "from shapes import Circle\nc = Circle(2)\nc.", str(main), str(tmp_path))
    assert {"radius", "area"} <= names and "make" not in names
    assert valid_names("keyword", "from shapes import make\nmake(1,", str(main), str(tmp_path)) == {"radius", "unit"}
    assert valid_names("keyword", "from shapes import free\nfree(", str(main), str(tmp_path)) is None
    assert valid_names("member", "def f(x):\n    return x.", str(main), str(tmp_path)) is None


def test_report_only_rebuilds_from_the_json(tmp_path):
    import json

    records = _records()
    rows = summarize(records)
    meta = {"command": "c", "date": "d", "machine": "m", "python": "3", "jedi": "0", "model": "SmolLM2",
            "max_new_tokens": 8, "seed": 1, "prompt_tokens": 100, "timed_every": 5, "packages": [],
            "wall_minutes": 1.0}
    for r in records:   # an older run's records: no path, no f-string or below-the-cut marks
        r["root"] = str(tmp_path)
        r["offset"] = 0
    (tmp_path / "f.py").write_text("x = 1\n")
    (tmp_path / "monitors.json").write_text(json.dumps(
        {"meta": meta, "summary": [], "timing": {}, "targets": {}, "records": records}))
    assert rewrite_report(tmp_path) == 0
    data = json.loads((tmp_path / "monitors.json").read_text())
    assert data["summary"] == rows
    assert all(r["path"] == str(tmp_path / "f.py") and r["in_fstring"] is False for r in data["records"])
    assert "| all | 5 | 4 | 4 / 4 |" in (tmp_path / "MONITORS.md").read_text()
