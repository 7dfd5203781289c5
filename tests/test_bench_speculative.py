"""bench/speculative.py's own logic on fabricated records (no model): aggregation, the ratios
against each row's baseline, the greedy identity count and mismatch list, the draft-layer
pick, the targets and the report's tables; these are what the committed numbers rest on."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT))

from bench.speculative import (BASELINE, mismatches, pick_draft_layers, report, rotated,  # noqa: E402
                               summarize, targets)


def _rec(task, config, tokens, forward, seconds, decoding="greedy", workload="extraction", family=None,
         drafted=0, accepted=0, draft_forward=0, cpu=None):
    return {"workload": workload, "task": task, "config": config, "decoding": decoding,
            "family": family or ("transformers" if config.startswith("hf") else "gramgen"),
            "tokens": list(tokens), "n_tokens": len(tokens), "forward_passes": forward, "seconds": seconds,
            "cpu_seconds": 2 * seconds if cpu is None else cpu, "drafted": drafted, "accepted": accepted,
            "draft_forward_passes": draft_forward, "text": "".join(map(str, tokens))}


def _records():
    a, b = list(range(10)), list(range(20))
    return [
        _rec("d1", "plain", a, 10, 1.0), _rec("d2", "plain", b, 20, 2.0),
        _rec("d1", "prompt_lookup", a, 5, 0.5, drafted=8, accepted=5),
        _rec("d2", "prompt_lookup", b, 8, 1.0, drafted=12, accepted=12),
        # the same text as plain on d1, not on d2 (a greedy mismatch to report)
        _rec("d1", "draft", a, 10, 2.0, drafted=10, accepted=0, draft_forward=10),
        _rec("d2", "draft", b[:5] + [99] + b[6:], 20, 4.0, drafted=10, accepted=1, draft_forward=10),
        _rec("d1", "plain", [1, 2, 3, 4], 4, 1.0, decoding="sampled"),
        _rec("d1", "prompt_lookup", [1, 2, 3], 2, 0.25, decoding="sampled", drafted=2, accepted=1),
        _rec("d1", "hf", list(range(30)), 30, 3.0), _rec("d1", "hf+prompt_lookup", list(range(30)), 10, 1.5),
    ]


def _row(rows, config, decoding="greedy", workload="extraction"):
    return next(r for r in rows if (r["workload"], r["config"], r["decoding"]) == (workload, config, decoding))


def test_totals_and_per_token_rates():
    rows = summarize(_records())
    plain = _row(rows, "plain")
    assert (plain["outputs"], plain["tokens"], plain["forward_passes"]) == (2, 30, 30)
    assert plain["forward_per_token"] == 1.0 and plain["tokens_per_second"] == 10.0
    assert plain["acceptance"] is None and plain["draft_forward_per_token"] is None
    lookup = _row(rows, "prompt_lookup")
    assert lookup["acceptance"] == pytest.approx(17 / 20)
    assert lookup["forward_per_token"] == pytest.approx(13 / 30)
    assert _row(rows, "draft")["draft_forward_per_token"] == pytest.approx(20 / 30)


def test_ratios_against_the_baseline_of_the_same_decoding():
    rows = summarize(_records())
    lookup = _row(rows, "prompt_lookup")
    assert lookup["baseline"] == "plain"
    assert lookup["forward_ratio"] == pytest.approx(1.0 / (13 / 30))        # fewer passes
    assert lookup["speedup"] == pytest.approx((30 / 1.5) / (30 / 3.0))       # ratio of the totals
    assert lookup["speedup_median"] == pytest.approx(2.0)                    # per prompt: 2x and 2x
    assert lookup["cpu_speedup"] == pytest.approx(2.0)
    sampled = _row(rows, "prompt_lookup", "sampled")   # against sampled plain, not greedy plain
    assert sampled["forward_ratio"] == pytest.approx((4 / 4) / (2 / 3))
    assert sampled["speedup"] == pytest.approx((3 / 0.25) / (4 / 1.0))
    assert sampled["identical"] is None                # identity is a greedy-only check
    hf = _row(rows, "hf+prompt_lookup")
    assert hf["baseline"] == "hf" and hf["forward_ratio"] == pytest.approx(3.0)


def test_median_is_taken_over_prompts_not_over_time():
    records = [_rec("d1", "plain", range(10), 10, 1.0), _rec("d2", "plain", range(10), 10, 1.0),
               _rec("d3", "plain", range(10), 10, 1.0),
               # a burst of load makes d3's run 10x slower: the median keeps the 2x of the others
               _rec("d1", "forced", range(10), 5, 0.5), _rec("d2", "forced", range(10), 5, 0.5),
               _rec("d3", "forced", range(10), 5, 10.0)]
    forced = _row(summarize(records), "forced")
    assert forced["speedup_median"] == pytest.approx(2.0)
    assert forced["speedup"] == pytest.approx(3.0 / 11.0)


def test_identical_outputs_counted_against_plain_and_mismatches_listed():
    records = _records()
    rows = summarize(records)
    assert (_row(rows, "prompt_lookup")["identical"], _row(rows, "prompt_lookup")["compared"]) == (2, 2)
    assert (_row(rows, "draft")["identical"], _row(rows, "draft")["compared"]) == (1, 2)
    assert _row(rows, "plain")["identical"] is None     # a baseline is not compared with itself
    found = mismatches(records)
    assert [(m["task"], m["config"], m["baseline"], m["first_difference"]) for m in found] == [
        ("d2", "draft", "plain", 5)]


def test_a_shorter_output_differs_where_it_ends():
    records = [_rec("d1", "plain", [1, 2, 3], 3, 1.0), _rec("d1", "forced", [1, 2], 2, 1.0)]
    assert mismatches(records)[0]["first_difference"] == 2


def test_baselines_are_run_configurations_and_constrained_rows_end_at_gramgen_plain():
    assert all(base in BASELINE for base in BASELINE.values())
    for config in BASELINE:
        seen = [config]
        while BASELINE[seen[-1]] != seen[-1]:
            seen.append(BASELINE[seen[-1]])
        assert seen[-1] == ("hf" if config in ("hf", "hf+prompt_lookup") else "plain"), seen


def test_pick_draft_layers_by_tokens_per_cpu_second_then_acceptance():
    sweep = [{"layers": 8, "acceptance": 0.1, "tokens_per_second": 9.0, "tokens_per_cpu_second": 4.0},
             {"layers": 16, "acceptance": 0.3, "tokens_per_second": 8.0, "tokens_per_cpu_second": 4.5},
             {"layers": 24, "acceptance": 0.5, "tokens_per_second": 7.0, "tokens_per_cpu_second": 3.0}]
    assert pick_draft_layers(sweep) == 16
    sweep[0]["tokens_per_cpu_second"] = 4.5
    assert pick_draft_layers(sweep) == 16   # tie: the higher acceptance
    with pytest.raises(ValueError):
        pick_draft_layers([])


def test_targets_and_configurations_slower_than_plain():
    t = targets(summarize(_records()))
    assert t["forward_ratio_met"] and t["speedup_met"]
    assert t["slower_than_plain"] == ["extraction draft greedy (0.50x)"]
    slow = [_rec("d1", "plain", range(10), 10, 1.0), _rec("d1", "prompt_lookup", range(10), 8, 0.9)]
    t = targets(summarize(slow))
    assert not t["forward_ratio_met"] and not t["speedup_met"]   # 1.25x fewer passes, 1.11x speed


def test_rotated_orders_start_at_each_position_in_turn():
    names = ["a", "b", "c"]
    assert [rotated(names, k) for k in range(4)] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"],
                                                       ["a", "b", "c"]]
    assert rotated([], 3) == []


def test_report_has_one_table_per_workload_the_sweep_targets_and_mismatches():
    records = _records() + [_rec("c1", "plain", range(8), 8, 1.0, workload="code"),
                            _rec("c1", "prompt_lookup", range(8), 3, 0.5, workload="code", drafted=6, accepted=5)]
    rows = summarize(records)
    meta = {"command": "python -m bench.speculative", "date": "2026-01-01", "machine": "x86_64",
            "gramgen": "0", "torch": "0", "transformers": "0", "python": "3", "num_draft_tokens": 5,
            "draft_layers": 16, "target_layers": 30, "draft_layers_source": "the layer sweep",
            "temperature": 0.7, "load_before": "1.0", "load_after": "2.0", "sweep_tasks": 2,
            "sweep_plain_tokens_per_second": 10.0, "sweep_plain_tokens_per_cpu_second": 5.0,
            "workloads": {"extraction": {"description": "documents"}, "code": {"description": "python"}}}
    sweep = [{"layers": 16, "acceptance": 0.25, "forward_per_token": 0.8, "draft_forward_per_token": 1.0,
              "tokens_per_second": 8.0, "tokens_per_cpu_second": 4.0}]
    text = report(rows, meta, sweep, mismatches(records))
    assert text.index("## extraction") < text.index("## code") < text.index("## Draft model")
    table = [line for line in text.splitlines() if line.startswith("| prompt_lookup | greedy")]
    assert len(table) == 2
    cells = [c.strip() for c in table[0].strip("|").split("|")]
    assert cells[:7] == ["prompt_lookup", "greedy", "2", "30", "0.433", "2.31 (vs plain)", "85 %"]
    assert cells[-1] == "2/2"
    assert "| 16 | 25 % | 0.800 | 1.00 | 8.0 | 4.0 |" in text
    assert "extraction d2 draft vs plain: first different token at 5" in text
    assert "2.31x fewer target forward passes (target >= 1.5: met)" in text
