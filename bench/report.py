"""results.json -> RESULTS.md, plots (latency CDFs, compile time vs schema size), --check."""

from __future__ import annotations

import heapq
from pathlib import Path

import numpy as np

GRAMGEN = "gramgen"
RAN = ("ok", "timeout")  # run statuses whose figures are shown


# --------------------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------------------
def pct(values, qs=(50, 90, 99)) -> dict:
    """p50/p90/p99/max/n of a list of numbers ({} when empty)."""
    if not len(values):
        return {}
    a = np.asarray(values, dtype=np.float64)
    d = {f"p{q}": float(np.percentile(a, q)) for q in qs}
    d["max"] = float(a.max())
    d["n"] = int(a.size)
    return d


def cases(run: dict) -> list[dict]:
    """The run's cases; results.json files written before cases existed had one implicit case."""
    if "cases" in run:
        return run["cases"]
    return [{"id": run.get("workload"), "status": run.get("status"), "compile": run.get("compile", {}),
             "texts": run.get("texts", []), "timeouts": run.get("timeouts", {})}]


def texts(run: dict) -> list[dict]:
    return [t for c in cases(run) for t in c.get("texts", [])]


def mask_latencies(run: dict) -> list[int]:
    return [x for t in texts(run) for x in t.get("mask_ns", [])]


def slowest_masks(run: dict, n: int = 5) -> list[tuple[float, str, str, int]]:
    """The run's ``n`` slowest masks as (µs, case, text, step), slowest first."""
    found = ((ns / 1e3, c.get("id") or "", t.get("id") or "", step)
             for c in cases(run) for t in c.get("texts", [])
             for step, ns in enumerate(t.get("mask_ns") or []))
    return heapq.nlargest(n, found, key=lambda x: x[0])


def masks_between(run: dict, lo_us: float, hi_us: float, n: int, seed: int = 0) -> list[tuple[float, str, str, int]]:
    """``n`` of the run's masks that took between ``lo_us`` and ``hi_us`` (a fixed-seed sample,
    slowest first), as :func:`slowest_masks`: what the masks around a percentile are."""
    import random

    found = [(ns / 1e3, c.get("id") or "", t.get("id") or "", step)
             for c in cases(run) for t in c.get("texts", [])
             for step, ns in enumerate(t.get("mask_ns") or []) if lo_us <= ns / 1e3 <= hi_us]
    picked = random.Random(seed).sample(found, min(n, len(found)))
    return sorted(picked, key=lambda x: -x[0])


def mask_gc_us(run: dict, case: str, text: str, step: int) -> float | None:
    """µs the garbage collector ran during that mask (None: the run did not record it)."""
    for c in cases(run):
        if c.get("id") == case:
            for t in c.get("texts", []):
                if t.get("id") == text:
                    gc_ns = t.get("mask_gc_ns")
                    return None if gc_ns is None else gc_ns.get(str(step), 0) / 1e3
    return None


def _mb(b):
    return None if b is None else b / 2**20


def _rate(num: int, den: int):
    return None if den == 0 else 100.0 * num / den


def case_compile_s(case: dict) -> float:
    """One case's compile time in a multi-case workload: the median of its repetitions
    when there were any, else its only (first) compile."""
    secs = case["compile"]["seconds"]
    return float(np.median(secs[1:])) if len(secs) > 1 else secs[0]


def summarize(run: dict) -> dict:
    cs = cases(run)
    applicable = [c for c in cs if c.get("status") not in ("n/a", "not_run")]
    compiled = [c for c in applicable if c.get("compile", {}).get("seconds")]
    if len(cs) > 1:
        # multi-case: one value per case, the median of its repetitions when there were any
        # (the first compile of a case pays what the case's process has not warmed yet)
        comp_s = [case_compile_s(c) for c in compiled]
        first_s = [c["compile"]["seconds"][0] for c in compiled]
    else:
        comp_s = [x for c in compiled for x in c["compile"]["seconds"]]
        first_s = []
    rss = [c["compile"]["rss_delta_bytes"] for c in compiled if c["compile"].get("rss_delta_bytes") is not None]
    ts = texts(run)
    valid = [t for t in ts if t.get("expect") is not False]
    invalid = [t for t in ts if t.get("expect") is False]
    adv = [x for t in ts for x in t.get("advance_ns", [])]
    first = next((t for t in valid if t.get("mask_ns")), None)
    n_to = sum(sum((c.get("timeouts") or {}).values()) for c in cs)
    n_to += sum((run.get("job_timeouts") or {}).values()) if run.get("job_timeouts") else 0
    tm = [c["compile"].get("tracemalloc_peak_bytes") for c in compiled
          if c["compile"].get("tracemalloc_peak_bytes") is not None]
    return {
        "status": run.get("status"),
        "prepare_s": run.get("prepare_seconds"),
        "n_cases": len(applicable),
        "n_compiled": len(compiled),
        "n_compile_failed": sum(1 for c in applicable if c.get("status") == "compile_error"),
        "n_case_timeouts": sum(1 for c in applicable if c.get("status") == "timeout"),
        "n_case_errors": sum(1 for c in applicable if c.get("status") == "error"),
        "compile_success_pct": _rate(len(compiled), len(applicable)),
        "compile_cold_s": compiled[0]["compile"]["seconds"][0] if len(cs) == 1 and compiled else None,
        "compile_s": pct(comp_s),
        "compile_first_s": pct(first_s) if first_s else {},
        "mask_us": {k: (v / 1e3 if k != "n" else v) for k, v in pct(mask_latencies(run)).items()},
        "advance_p50_us": float(np.median(adv)) / 1e3 if adv else None,
        "first_mask_us": first["mask_ns"][0] / 1e3 if first else None,
        "n_texts": len(ts),
        "n_valid": len(valid),
        "n_valid_accepted": sum(1 for t in valid if t.get("accepted")),
        "n_invalid": len(invalid),
        "n_invalid_rejected": sum(1 for t in invalid if _decided_reject(t)),
        # rates over the texts whose walk finished (not cut at the budget, not timed out)
        "valid_accepted_pct": _rate(sum(1 for t in valid if t.get("accepted")),
                                    sum(1 for t in valid if _finished(t))),
        "invalid_rejected_pct": _rate(sum(1 for t in invalid if _decided_reject(t)),
                                      sum(1 for t in invalid if _finished(t))),
        # kept for the one-line log and the older table layout
        "n_accepted": sum(1 for t in valid if t.get("accepted")),
        "n_truncated": sum(1 for t in ts if t.get("truncated") or t.get("timeout")),
        "n_inconsistent": sum(t.get("n_inconsistent", 0) for t in ts),
        "tracemalloc_mb": _mb(max(tm)) if tm else None,
        "rss_delta_mb": _mb(max(rss)) if rss else None,
        "rss_delta_p50_mb": _mb(float(np.median(rss))) if rss else None,
        "timeouts": n_to,
    }


def _finished(t: dict) -> bool:
    return not t.get("truncated") and not t.get("timeout")


def _decided_reject(t: dict) -> bool:
    return not t.get("accepted") and _finished(t)


def one_line(run: dict) -> str:
    s = summarize(run)
    if s["status"] not in RAN:
        return f"{s['status']}: {str(run.get('reason', ''))[:200]}"
    parts = [s["status"]]
    if s["prepare_s"] is not None:
        parts.append(f"prep {s['prepare_s']:.2f}s")
    parts.append(f"compiled {s['n_compiled']}/{s['n_cases']}")
    if s["compile_s"]:
        parts.append(f"compile p50 {s['compile_s']['p50'] * 1e3:.1f}ms")
    m = s["mask_us"]
    if m:
        parts.append(f"mask p50 {m['p50']:.1f}us p99 {m['p99']:.1f}us over {m['n']} steps")
    parts.append(f"valid accepted {s['n_valid_accepted']}/{s['n_valid']}")
    if s["n_invalid"]:
        parts.append(f"invalid rejected {s['n_invalid_rejected']}/{s['n_invalid']}")
    if s["n_truncated"]:
        parts.append(f"{s['n_truncated']} texts cut")
    if s["timeouts"]:
        parts.append(f"{s['timeouts']} timeouts")
    return ", ".join(parts)


# --------------------------------------------------------------------------------------
# formatting
# --------------------------------------------------------------------------------------
def _f(x, fmt="{:.1f}"):
    return "—" if x is None else fmt.format(x)


def dur(x, unit):
    """Human-readable duration from a value in `unit` ('s', 'ms' or 'µs')."""
    if x is None:
        return "—"
    us = x * {"s": 1e6, "ms": 1e3, "µs": 1.0}[unit]
    if us < 1e3:
        return f"{us:.1f} µs"
    if us < 1e6:
        return f"{us / 1e3:.1f} ms"
    return f"{us / 1e6:.2f} s"


def ratio(g, p):
    """gramgen / peer as text ('—' when either is missing or the peer is 0)."""
    if g is None or p is None or p <= 0:
        return "—"
    return f"{g / p:.2f}×"


def best_peer(sums: dict, getter, higher_is_better: bool = False):
    """(library, value) of the best peer by `getter` (lowest, or highest for rates)."""
    best = None
    for lib, s in sums.items():
        if lib == GRAMGEN or s["status"] not in RAN:
            continue
        v = getter(s)
        if v is None:
            continue
        if best is None or (v > best[1] if higher_is_better else v < best[1]):
            best = (lib, v)
    return best


def _ms(q):
    return lambda s: s["compile_s"].get(q) * 1e3 if s["compile_s"].get(q) is not None else None


def _us(q):
    return lambda s: s["mask_us"].get(q)


# (title, getter, unit or "%", higher is better)
SUMMARY = [
    ("tok. prep", lambda s: s["prepare_s"], "s", False),
    ("compile p50", _ms("p50"), "ms", False),
    ("compile p99", _ms("p99"), "ms", False),
    ("mask p50", _us("p50"), "µs", False),
    ("mask p99", _us("p99"), "µs", False),
    ("compiled", lambda s: s["compile_success_pct"], "%", True),
    ("valid accepted", lambda s: s["valid_accepted_pct"], "%", True),
    ("invalid rejected", lambda s: s["invalid_rejected_pct"], "%", True),
]


def _cell(v, unit):
    if unit == "%":
        return "—" if v is None else f"{v:.0f}%"
    return dur(v, unit)


def _groups(results):
    """{(workload, tokenizer): {lib: run}} in run order."""
    g: dict = {}
    for r in results["runs"]:
        g.setdefault((r["workload"], r["tokenizer"]), {})[r["lib"]] = r
    return g


def _clean(s: str) -> str:
    return " ".join(str(s).split()).replace("|", "/")


# --------------------------------------------------------------------------------------
# verdicts and disagreements
# --------------------------------------------------------------------------------------
def verdict(t: dict | None, case: dict | None, run: dict | None) -> str:
    if run is None:
        return "not run"
    if run.get("status") not in RAN:
        return run.get("status", "?")
    if case is None:
        return "not run"
    if case.get("status") == "n/a":
        return "n/a"
    if case.get("status") == "compile_error":
        return "compile failed"
    if case.get("status") in ("timeout", "error", "not_run") and t is None:
        return f"case {case['status']}"
    if t is None:
        return "not reached"
    if t.get("timeout"):
        return "timeout"
    if t.get("truncated"):
        return f"cut after {t['steps']}/{t['n_tokens']} tokens"
    if t.get("accepted"):
        return "accept"
    if t.get("rejected_at") is not None:
        return f"reject @{t['rejected_at']} {t.get('rejected_token', '')!r}"
    return "reject (not accepting at end)"


def _decision(v: str):
    """True accept, False reject, None undecided."""
    if v == "accept":
        return True
    if v.startswith("reject"):
        return False
    return None


def disagreements(results: dict, w: str, tk: str, runs: dict) -> list[dict]:
    """Texts where the libraries' decided verdicts differ, or a library's verdict differs
    from the text's label (valid / invalid)."""
    libs = list(runs)
    idx = {lib: {c["id"]: (c, {t["id"]: t for t in c.get("texts", [])}) for c in cases(r)}
           for lib, r in runs.items()}
    rows = []
    for cmeta in results["workloads"].get(w, {}).get("cases", []):
        for tmeta in cmeta.get("texts", []):
            vs = {}
            for lib in libs:
                c, tmap = idx[lib].get(cmeta["id"], (None, {}))
                vs[lib] = verdict(tmap.get(tmeta["id"]), c, runs[lib])
            dec = {lib: _decision(v) for lib, v in vs.items()}
            decided = {lib: d for lib, d in dec.items() if d is not None}
            expect = tmeta.get("expect")  # None: an unlabeled sample, only inter-library differences
            want = tmeta.get("jsonschema_valid") if tmeta.get("jsonschema_valid") is not None else expect
            if len(set(decided.values())) > 1 or (want is not None and any(d != want for d in decided.values())):
                rows.append({"case": cmeta["id"], "text": tmeta["id"], "expect": expect,
                             "jsonschema": tmeta.get("jsonschema_valid"), "verdicts": vs,
                             "agree": None if want is None else [lib for lib, d in decided.items() if d == want]})
    return rows


# --------------------------------------------------------------------------------------
# markdown
# --------------------------------------------------------------------------------------
def slowest_section(results: dict) -> list[str]:
    """The report's lines listing each library's five slowest masks per workload and tokenizer."""
    L = ["## Slowest masks\n",
         "Per workload and tokenizer, each library's five slowest masks: where they fell "
         "(case, text, step = the index of the token the mask was computed before), and how "
         "much of it the garbage collector ran (gc µs). `python -m bench.why_slow` replays "
         "gramgen's and times their parts; see `docs/benchmarks.md` (Known costs).\n"]
    for (w, tk), runs in _groups(results).items():
        rows = [(lib, slowest_masks(r)) for lib, r in runs.items() if r["status"] in RAN]
        rows = [(lib, worst) for lib, worst in rows if worst]
        if not rows:
            continue
        L.append(f"### {w} × {tk}\n")
        L.append("| library | mask µs | gc µs | case | text | step |")
        L.append("|---|---|---|---|---|---|")
        for lib, worst in rows:
            for us, case, text, step in worst:
                gc_us = mask_gc_us(runs[lib], case, text, step)
                gc_cell = "—" if gc_us is None else f"{gc_us:,.0f}"
                L.append(f"| {lib} | {us:,.0f} | {gc_cell} | {_clean(case)} | {_clean(text)} | {step} |")
        L.append("")
    return L


def markdown(results: dict) -> str:
    meta = results["meta"]
    mach = meta["machine"]
    L: list[str] = []
    L.append("# gramgen vs peers: grammar-constrained decoding benchmark\n")
    L.append(f"- Command: `{meta['command'].strip()}` (mode: {meta['mode']}, seed {meta['seed']}, "
             f"{meta['compile_reps']} compile repetitions after the cold one for json/python"
             + (f", {meta['case_compile_reps']} per case after the first for JSON Schema"
                if meta.get("case_compile_reps") else "") + ")"
             + (f"; JSON Schema / Lark / GBNF cases run in {meta['case_process']}" if meta.get("case_process") else ""))
    L.append(f"- Date: {meta['date']}; wall time {meta['wall_seconds']:.0f} s")
    L.append(f"- Machine: {mach['cpu']}, {mach['usable_cores']} usable cores "
             f"({mach['logical_cores']} logical), {_f(_mb(mach.get('memory_bytes')), '{:.0f}')} MiB RAM, "
             f"{mach['os']}, Python {mach['python']}; load average (1/5/15 min) at the start "
             f"{', '.join(f'{x:.2f}' for x in meta.get('loadavg_start', []))}, at the end "
             f"{', '.join(f'{x:.2f}' for x in meta.get('loadavg_end', []))}")
    L.append("- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
    L.append(f"- Threads: {meta['threads']}")
    if meta.get("gc"):
        L.append(f"- Garbage collector: {meta['gc']}")
    lim = meta.get("limits_seconds", {})
    if lim:
        L.append("- Time limits (s): " + ", ".join(f"{k} {v:g}" for k, v in lim.items()))
    for w, why in (meta.get("skipped_workloads") or {}).items():
        L.append(f"- Workload `{w}` skipped: {why}")
    L.append("")
    L.append("Mask latency = one call that computes the full-vocabulary next-token mask "
             "(int32 bitmask of ceil(V/32) words; transformers-cfg: its boolean vector), timed "
             "with `time.perf_counter_ns` at every token of every valid text; compile = grammar "
             "or schema text to ready-to-match object (tokenizer preprocessing excluded and shown "
             "separately); percentages count texts whose walk finished. See `bench/README.md`.\n")

    groups = _groups(results)
    runs_all = results["runs"]
    missing = sorted({(r["lib"], r.get("reason", "")) for r in runs_all if r["status"] == "missing"})
    for lib, why in missing:
        L.append(f"- **{lib} not run**: {_clean(why)}")
    if missing:
        L.append("")

    # ---- summary -------------------------------------------------------------------
    L.append("## Summary: gramgen / best peer\n")
    L.append("Each cell: gramgen, best peer (which), ratio gramgen / best peer. Times: lower is "
             "better, ratio < 1 = gramgen faster. Rates (compiled, valid accepted, invalid "
             "rejected): higher is better, ratio < 1 = gramgen lower. Best peer = the best of the "
             "peers that ran the workload. † = some texts were cut at the time budget or timed "
             "out: latencies cover only what was reached.\n")
    L.append("| workload | tokenizer | " + " | ".join(t for t, *_ in SUMMARY) + " |")
    L.append("|---|---|" + "---|" * len(SUMMARY))
    for (w, tk), runs in groups.items():
        sums = {lib: summarize(r) for lib, r in runs.items()}
        gs = sums.get(GRAMGEN)
        row = [w, tk]
        for title, get, unit, hib in SUMMARY:
            gv = get(gs) if gs and gs["status"] in RAN else None
            bp = best_peer(sums, get, hib)
            mark = ""
            if title.startswith("mask") and gs and gs["n_truncated"]:
                mark = "†"
            txt = _cell(gv, unit) + mark
            if gv is None and bp is None:
                txt = "—"
            elif bp:
                pm = "†" if title.startswith("mask") and sums[bp[0]]["n_truncated"] else ""
                txt += f" · {_cell(bp[1], unit)}{pm} ({bp[0]}) · **{ratio(gv, bp[1])}**"
            else:
                txt += " · no peer"
            row.append(txt)
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    # ---- grammars / policies -------------------------------------------------------------
    pol = meta.get("json_schema_policy") or {}
    if pol and "jsonschema" in results["workloads"]:
        L.append("## JSON Schema policy per library\n")
        L.append("Instances: " + "; ".join(results["workloads"]["jsonschema"]["notes"]) + "\n")
        L.append("| library | compiles each schema with |")
        L.append("|---|---|")
        for lib, p in pol.items():
            L.append(f"| {lib} | {_clean(p)} |")
        L.append("")
    L.append("## What each library ran\n")
    L.append("Single-grammar workloads: the grammar each library ran. Multi-case workloads: "
             "how many cases compiled, failed to compile, timed out, or were not applicable, "
             "and the first failure messages.\n")
    L.append("| workload | library | tokenizer | grammar / cases | status |")
    L.append("|---|---|---|---|---|")
    for (w, tk), runs in groups.items():
        for lib, r in runs.items():
            cs = cases(r)
            if r["status"] not in RAN:
                L.append(f"| {w} | {lib} | {tk} | — | {r['status']}: {_clean(r.get('reason', ''))[:300]} |")
                continue
            if len(cs) == 1:
                c = cs[0]
                st = c.get("status", "") + (f": {c['reason']}" if c.get("reason") else "")
                L.append(f"| {w} | {lib} | {tk} | {_clean(c.get('grammar') or '—')} | {_clean(st)[:400]} |")
            else:
                from collections import Counter

                cnt = Counter(c.get("status") for c in cs)
                fails = [f"`{c['id']}`: {_clean(c.get('reason', ''))[:160]}" for c in cs
                         if c.get("status") in ("compile_error", "timeout", "error")][:4]
                L.append(f"| {w} | {lib} | {tk} | " + ", ".join(f"{k} {v}" for k, v in sorted(cnt.items()))
                         + f" | {'; '.join(fails) or '—'} |")
    L.append("")
    for w, d in results["workloads"].items():
        L.append(f"- `{w}`: {d.get('n_cases', 1)} case(s), {d['n_texts']} texts from `{d['source']}`; "
                 + "; ".join(d["notes"]))
    L.append("")

    # ---- details -------------------------------------------------------------------
    L.append("## Details per workload and tokenizer\n")
    L.append("Tokenizer preprocessing in s; compile in ms (json/python: the first compile in a "
             "fresh process and the repetitions; multi-case workloads: one value per case, the "
             "median of the repetitions after its first compile, or that first compile when it "
             "took 1 s or more; the first compiles are listed below the table); "
             "compile memory = RSS peak minus RSS before, max over cases (includes native "
             "allocations); mask latency in µs over all steps of all valid texts. In the gramgen "
             "row, (r×) = gramgen / best peer. Valid / invalid: texts accepted / rejected among "
             "those walked (texts of cases that compiled).\n")
    for (w, tk), runs in groups.items():
        sums = {lib: summarize(r) for lib, r in runs.items()}
        L.append(f"### {w} × {tk}\n")
        L.append(f"![mask latency CDF](mask_latency_cdf_{w}_{tk}.png)\n")
        L.append("| library | tok. prep s | compiled | compile p50 | p90 | p99 | max ms | mask p50 | p90 "
                 "| p99 | max µs | first mask µs | advance p50 µs | steps | valid accepted "
                 "| invalid rejected | mask≠advance | RSS Δ MB | timeouts |")
        L.append("|" + "---|" * 19)
        for lib, s in sums.items():
            if s["status"] not in RAN:
                L.append(f"| {lib} | {s['status']} |" + " — |" * 17)
                continue
            if s["n_cases"] == 0:
                L.append(f"| {lib} | n/a |" + " — |" * 17)
                continue
            cs, ms = s["compile_s"], s["mask_us"]

            def cell(v, get=None, scale=1.0, hib=False):
                txt = _f(None if v is None else v * scale)
                if lib == GRAMGEN and get is not None and v is not None:
                    bp = best_peer(sums, get, hib)
                    if bp:
                        txt += f" ({ratio(v * scale, bp[1])})"
                return txt

            L.append("| " + " | ".join([
                lib, _f(s["prepare_s"], "{:.2f}"),
                f"{s['n_compiled']}/{s['n_cases']}",
                *[cell(cs.get(q), _ms(q), 1e3) for q in ("p50", "p90", "p99", "max")],
                *[cell(ms.get(q), _us(q)) for q in ("p50", "p90", "p99", "max")],
                cell(s["first_mask_us"], lambda x: x["first_mask_us"]),
                _f(s["advance_p50_us"]),
                str(ms.get("n", 0)),
                f"{s['n_valid_accepted']}/{s['n_valid']}" + (f" ({s['n_truncated']} cut)" if s["n_truncated"] else ""),
                f"{s['n_invalid_rejected']}/{s['n_invalid']}" if s["n_invalid"] else "—",
                str(s["n_inconsistent"]),
                _f(s["rss_delta_mb"], "{:.1f}"),
                str(s["timeouts"]),
            ]) + " |")
        L.append("")
        firsts = [(lib, s["compile_first_s"]) for lib, s in sums.items()
                  if s["status"] in RAN and s.get("compile_first_s")]
        if firsts:
            L.append("First compile of each case, p50 / p99 ms: "
                     + "; ".join(f"{lib} {f['p50'] * 1e3:.1f} / {f['p99'] * 1e3:.1f}" for lib, f in firsts) + "\n")
        if w == "jsonschema":
            L.append(f"![compile time vs schema size](compile_vs_size_{w}_{tk}.png)\n")

    L += slowest_section(results)

    # ---- disagreements -------------------------------------------------------------
    L.append("## Disagreements on acceptance\n")
    L.append("Texts where the libraries' verdicts differ, or where a library's verdict differs "
             "from the text's label: json/python texts are valid by construction; JSONSchemaBench "
             "instances carry the dataset's valid/invalid label and *jsonschema* = the `jsonschema` "
             "package's verdict on the instance; Lark sample texts are labeled by lark itself "
             "where it can build the grammar; GBNF samples are unlabeled (*sample*: only "
             "differences between libraries count). *agrees* = the libraries whose decided verdict "
             "matches jsonschema, else the label. Each row is a grammar difference, a peer bug, or "
             "ours. Undecided verdicts (compile failed, cut, timeout) do not count as disagreeing.\n")
    any_dis = False
    for (w, tk), runs in groups.items():
        rows = disagreements(results, w, tk, runs)
        if not rows:
            continue
        any_dis = True
        libs = [lib for lib, r in runs.items() if r["status"] != "n/a"]
        L.append(f"### {w} × {tk} ({len(rows)} texts)\n")
        L.append("| case | text | label | jsonschema | " + " | ".join(libs) + " | agrees |")
        L.append("|---|---|---|---|" + "---|" * len(libs) + "---|")
        for row in rows[:150]:
            lab = {None: "sample", True: "valid", False: "invalid"}[row["expect"]]
            js = {None: "—", True: "valid", False: "invalid"}[row["jsonschema"]]
            tid = row["text"][len(row["case"]):] if row["text"].startswith(row["case"] + "#") else row["text"]
            L.append(f"| `{_clean(row['case'])}` | `{_clean(tid)}` | {lab} | {js} | "
                     + " | ".join(_clean(row["verdicts"][lib]) for lib in libs)
                     + f" | {'—' if row['agree'] is None else ', '.join(row['agree']) or 'none'} |")
        if len(rows) > 150:
            L.append(f"\n… {len(rows) - 150} more in results.json")
        L.append("")
    if not any_dis:
        L.append("None.\n")

    # ---- mask agreement -------------------------------------------------------------
    L.append("## Mask agreement\n")
    L.append("Number of allowed tokens in each mask, compared step by step between gramgen and "
             "each peer on the texts and steps both walked. Exact masks for the same language "
             "have equal counts; a difference means the grammars differ (different JSON grammar, "
             "a peer's Lark/GBNF conversion, a schema policy) or one library's mask is wrong. "
             "Counts include EOS where a library allows it.\n")
    L.append("| workload | tokenizer | peer | steps compared | steps differing | first difference "
             "(case / text, step: gramgen vs peer) |")
    L.append("|---|---|---|---|---|---|")
    n_rows = 0
    for (w, tk), runs in groups.items():
        g = runs.get(GRAMGEN)
        if not g or g["status"] not in RAN:
            continue
        gt = {(c["id"], t["id"]): t for c in cases(g) for t in c.get("texts", [])}
        for lib, r in runs.items():
            if lib == GRAMGEN or r["status"] not in RAN:
                continue
            compared = differ = 0
            first = ""
            for c in cases(r):
                for t in c.get("texts", []):
                    a = gt.get((c["id"], t["id"]), {}).get("allowed_counts")
                    b = t.get("allowed_counts")
                    if not a or not b:
                        continue
                    for i, (x, y) in enumerate(zip(a, b)):
                        compared += 1
                        if x != y:
                            differ += 1
                            if not first:
                                first = f"`{_clean(c['id'])}` / `{_clean(t['id'])}`, step {i}: {x} vs {y}"
            if compared:
                L.append(f"| {w} | {tk} | {lib} | {compared} | {differ} | {first or '—'} |")
                n_rows += 1
    if not n_rows:
        L.append("| — | — | — | — | — | nothing compared |")
    L.append("")

    # ---- inconsistencies / failures -------------------------------------------------
    bad = [(r, c, t) for r in runs_all for c in cases(r) for t in c.get("texts", []) if t.get("n_inconsistent")]
    if bad:
        L.append("## Mask / advance inconsistencies\n")
        L.append("Steps where the bit of the text's token in the mask disagreed with `advance`.\n")
        for r, c, t in bad[:100]:
            L.append(f"- {r['lib']} / {r['tokenizer']} / {r['workload']} `{c['id']}` / `{t['id']}`: "
                     f"{t['n_inconsistent']} steps, first at {t['inconsistent_steps'][:5]}")
        L.append("")
    errs = [r for r in runs_all if r["status"] in ("error", "timeout")]
    errs_c = [(r, c) for r in runs_all for c in cases(r) if c.get("status") in ("error", "timeout")]
    if errs or errs_c:
        L.append("## Errors and timeouts\n")
        for r in errs:
            L.append(f"- {r['lib']} / {r['tokenizer']} / {r['workload']}: {r['status']}: "
                     f"{_clean(r.get('reason', ''))}")
        for r, c in errs_c[:100]:
            L.append(f"- {r['lib']} / {r['tokenizer']} / {r['workload']} `{c['id']}`: {c['status']}: "
                     f"{_clean(c.get('reason', ''))[:300]}")
        L.append("")
    return "\n".join(L)


# --------------------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------------------
COLORS = {"gramgen": "tab:red", "xgrammar": "tab:blue", "llguidance": "tab:green",
          "outlines-core": "tab:purple", "transformers-cfg": "tab:orange"}


def plots(results: dict, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for (w, tk), runs in _groups(results).items():
        fig, ax = plt.subplots(figsize=(7, 4.2))
        drawn = 0
        for lib, r in runs.items():
            lat = np.sort(np.asarray(mask_latencies(r), dtype=np.float64)) / 1e3
            if lat.size == 0:
                continue
            y = np.arange(1, lat.size + 1) / lat.size
            s = summarize(r)
            cut = ", texts cut" if s["n_truncated"] else ""
            ax.step(lat, y, where="post",
                    label=f"{lib} (p50 {dur(float(np.median(lat)), 'µs')}, n={lat.size}{cut})",
                    color=COLORS.get(lib))
            drawn += 1
        if drawn:
            ax.set_xscale("log")
            ax.set_xlabel("mask latency per token (µs, log scale)")
            ax.set_ylabel("fraction of steps ≤ x")
            ax.set_ylim(0, 1.001)
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"Full-vocabulary mask latency: {w}, {tk}")
            ax.legend(loc="lower right", fontsize=8)
            fig.tight_layout()
            p = out_dir / f"mask_latency_cdf_{w}_{tk}.png"
            fig.savefig(p, dpi=100)
            paths.append(p)
        plt.close(fig)
        if w != "jsonschema":
            continue
        sizes = {c["id"]: c["size"] for c in results["workloads"][w]["cases"]}
        fig, ax = plt.subplots(figsize=(7, 4.2))
        drawn = 0
        for lib, r in runs.items():
            pts = [(sizes.get(c["id"]), case_compile_s(c)) for c in cases(r)
                   if c.get("compile", {}).get("seconds") and sizes.get(c["id"])]
            if not pts:
                continue
            x, y = zip(*pts)
            ax.scatter(x, np.asarray(y) * 1e3, s=12, alpha=0.7, color=COLORS.get(lib),
                       label=f"{lib} ({len(pts)} compiled)")
            drawn += 1
        if drawn:
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("schema size (characters of JSON)")
            ax.set_ylabel("compile time (ms, log scale)")
            ax.grid(True, which="both", alpha=0.3)
            ax.set_title(f"JSON Schema compile time vs size: {tk}")
            ax.legend(loc="upper left", fontsize=8)
            fig.tight_layout()
            p = out_dir / f"compile_vs_size_{w}_{tk}.png"
            fig.savefig(p, dpi=100)
            paths.append(p)
        plt.close(fig)
    return paths


def write(results: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    plots(results, out_dir)
    (out_dir / "RESULTS.md").write_text(markdown(results), encoding="utf-8")


# --------------------------------------------------------------------------------------
# --check
# --------------------------------------------------------------------------------------
def check(new: dict, old: dict, limit: float) -> tuple[bool, list[str]]:
    """gramgen's mask p50/p99 per (workload, tokenizer): fail if new/old > limit."""
    lines = [f"--check {limit}: gramgen mask latency vs committed results.json "
             f"({old['meta'].get('date')}, {old['meta'].get('mode')})"]
    if old["meta"].get("mode") != new["meta"].get("mode"):
        lines.append(f"  note: committed results are from --{old['meta'].get('mode')}, "
                     f"this run is --{new['meta'].get('mode')}: samples differ")
    oldg = {(r["workload"], r["tokenizer"]): r for r in old["runs"] if r["lib"] == GRAMGEN}
    ok, compared = True, 0
    for r in new["runs"]:
        if r["lib"] != GRAMGEN:
            continue
        key = (r["workload"], r["tokenizer"])
        o = oldg.get(key)
        ns, os_ = summarize(r)["mask_us"], summarize(o)["mask_us"] if o else {}
        if not ns or not os_:
            lines.append(f"  {key[0]} × {key[1]}: nothing to compare "
                         f"(new {r['status']}, old {o['status'] if o else 'absent'})")
            continue
        for q in ("p50", "p99"):
            compared += 1
            rr = ns[q] / os_[q]
            bad = rr > limit
            ok &= not bad
            lines.append(f"  {key[0]} × {key[1]} mask {q}: {os_[q]:.1f} -> {ns[q]:.1f} µs "
                         f"({rr:.2f}×){'  WORSE than allowed' if bad else ''}")
    if not compared:
        lines.append("  nothing compared")
        ok = False
    lines.append("OK" if ok else "FAILED")
    return ok, lines
