"""results.json -> RESULTS.md, latency CDF plots, and the --check comparison."""

from __future__ import annotations

from pathlib import Path

import numpy as np

PEERS = ("xgrammar", "llguidance")
GRAMGEN = "gramgen"


# --------------------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------------------
def _pct(values, qs=(50, 90, 99)) -> dict:
    if not values:
        return {}
    a = np.asarray(values, dtype=np.float64)
    d = {f"p{q}": float(np.percentile(a, q)) for q in qs}
    d["max"] = float(a.max())
    d["n"] = int(a.size)
    return d


def mask_latencies(run: dict) -> list[int]:
    return [x for t in run.get("texts", []) for x in t.get("mask_ns", [])]


def summarize(run: dict) -> dict:
    texts = run.get("texts", [])
    mask = mask_latencies(run)
    adv = [x for t in texts for x in t.get("advance_ns", [])]
    comp = run.get("compile", {})
    s = {
        "status": run.get("status"),
        "prepare_s": run.get("prepare_seconds"),
        "compile_cold_s": comp["seconds"][0] if comp.get("seconds") else None,
        "compile_s": _pct(comp.get("seconds", [])),
        "mask_us": {k: (v / 1e3 if k != "n" else v) for k, v in _pct(mask).items()},
        "advance_p50_us": float(np.median(adv)) / 1e3 if adv else None,
        "first_mask_us": texts[0]["mask_ns"][0] / 1e3 if texts and texts[0].get("mask_ns") else None,
        "n_texts": len(texts),
        "n_accepted": sum(1 for t in texts if t.get("accepted")),
        "n_truncated": sum(1 for t in texts if t.get("truncated")),
        "n_inconsistent": sum(t.get("n_inconsistent", 0) for t in texts),
        "tracemalloc_mb": _mb(comp.get("tracemalloc_peak_bytes")),
        "rss_delta_mb": _mb(comp.get("rss_delta_bytes")),
        "compiled_mb": _mb(comp.get("compiled_bytes")),
        "timeouts": sum(run.get("timeouts", {}).values()),
    }
    return s


def _mb(b):
    return None if b is None else b / 2**20


def one_line(run: dict) -> str:
    s = summarize(run)
    if s["status"] not in ("ok", "timeout"):
        return f"{s['status']}: {run.get('reason', '')[:200]}"
    m = s["mask_us"]
    parts = [s["status"]]
    if s["prepare_s"] is not None:
        parts.append(f"prep {s['prepare_s']:.2f}s")
    if s["compile_cold_s"] is not None:
        parts.append(f"compile {s['compile_cold_s'] * 1e3:.1f}ms cold, p50 {s['compile_s']['p50'] * 1e3:.1f}ms")
    if m:
        parts.append(f"mask p50 {m['p50']:.1f}us p99 {m['p99']:.1f}us over {m['n']} steps")
    parts.append(f"accepted {s['n_accepted']}/{s['n_texts']}")
    if s["n_truncated"]:
        parts.append(f"{s['n_truncated']} texts cut at the time budget")
    if s["timeouts"]:
        parts.append(f"{s['timeouts']} timeouts")
    return ", ".join(parts)


# --------------------------------------------------------------------------------------
# markdown
# --------------------------------------------------------------------------------------
def _f(x, fmt="{:.1f}"):
    return "—" if x is None else fmt.format(x)


def _dur(x, unit):
    """Human-readable duration from a value in `unit` ('ms' or 'µs')."""
    if x is None:
        return "—"
    us = x * 1e3 if unit == "ms" else x
    if us < 1e3:
        return f"{us:.1f} µs"
    if us < 1e6:
        return f"{us / 1e3:.1f} ms"
    return f"{us / 1e6:.2f} s"


def _ratio(g, p):
    if g is None or p is None or p <= 0:
        return "—"
    return f"{g / p:.2f}×"


def _best_peer(sums: dict, getter):
    best = None
    for lib in sums:
        if lib == GRAMGEN:
            continue
        v = getter(sums[lib])
        if v is not None and (best is None or v < best[1]):
            best = (lib, v)
    return best


def _getters():
    return {
        "compile cold": lambda s: s["compile_cold_s"] and s["compile_cold_s"] * 1e3,
        "compile p50": lambda s: s["compile_s"].get("p50") and s["compile_s"]["p50"] * 1e3,
        "mask p50": lambda s: s["mask_us"].get("p50"),
        "mask p99": lambda s: s["mask_us"].get("p99"),
    }


def _groups(results):
    """{(workload, tokenizer): {lib: run}} in run order."""
    g: dict = {}
    for r in results["runs"]:
        g.setdefault((r["workload"], r["tokenizer"]), {})[r["lib"]] = r
    return g


def _accepted_cell(s: dict) -> str:
    txt = f"{s['n_accepted']}/{s['n_texts']}"
    if s["n_truncated"]:
        txt += f" ({s['n_truncated']} cut)"
    return txt


def _decided(verdict: str) -> bool:
    return verdict == "accept" or verdict.startswith("reject") or verdict == "not accepting at end"


def _verdict(t: dict | None, run: dict | None) -> str:
    if run is None:
        return "not run"
    if run.get("status") in ("unsupported", "error"):
        return run["status"]
    if t is None:
        return "not reached"
    if t.get("timeout"):
        return "timeout (worker killed)"
    if t.get("truncated"):
        return f"unknown: time budget spent after {t['steps']}/{t['n_tokens']} tokens"
    if t.get("accepted"):
        return "accept"
    if t.get("rejected_at") is not None:
        tok = t.get("rejected_token", "")
        return f"reject @token {t['rejected_at']} ({tok!r})"
    return "not accepting at end"


def markdown(results: dict) -> str:
    meta = results["meta"]
    mach = meta["machine"]
    L: list[str] = []
    L.append("# gramgen vs peers: grammar-constrained mask benchmark\n")
    L.append(f"- Command: `{meta['command'].strip()}` (mode: {meta['mode']}, seed {meta['seed']}, "
             f"{meta['compile_reps']} compile repetitions after the cold one)")
    L.append(f"- Date: {meta['date']}; wall time {meta['wall_seconds']:.0f} s")
    L.append(f"- Machine: {mach['cpu']}, {mach['usable_cores']} usable cores "
             f"({mach['logical_cores']} logical), {_f(_mb(mach.get('memory_bytes')), '{:.0f}')} MiB RAM, "
             f"{mach['os']}, Python {mach['python']}; load average (1/5/15 min) at the start "
             f"{', '.join(f'{x:.2f}' for x in meta.get('loadavg_start', []))}, at the end "
             f"{', '.join(f'{x:.2f}' for x in meta.get('loadavg_end', []))}")
    L.append("- Versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
    L.append(f"- Threads: {meta['threads']}")
    if meta.get("skipped_workloads"):
        for w, why in meta["skipped_workloads"].items():
            L.append(f"- Workload `{w}` skipped: {why}")
    L.append("")
    L.append("Mask latency = one call that computes the full-vocabulary next-token bitmask "
             "(int32, ceil(V/32) words), timed with `time.perf_counter_ns` at every token of "
             "every text; compile = grammar text to ready-to-match object (tokenizer "
             "preprocessing excluded and shown separately). See `bench/README.md`.\n")

    groups = _groups(results)
    getters = _getters()

    # ---- summary -------------------------------------------------------------------
    L.append("## Summary: gramgen / best peer\n")
    L.append("Ratio < 1 means gramgen is faster. Best peer = the fastest of the peers that ran. "
             "† = some texts were cut at the time budget, so that library's latencies cover "
             "only the prefixes it reached: compare with care.\n")
    L.append("| workload | tokenizer | " + " | ".join(
        f"{k} gramgen | {k} best peer | {k} ratio" for k in getters) + " | accepted (gramgen) |")
    L.append("|---|---|" + "---|---|---|" * len(getters) + "---|")
    for (w, tk), runs in groups.items():
        sums = {lib: summarize(r) for lib, r in runs.items()}
        row = [w, tk]
        gs = sums.get(GRAMGEN)
        def cut(lib):
            return "†" if sums[lib]["n_truncated"] or sums[lib]["timeouts"] else ""

        for k, get in getters.items():
            unit = "ms" if k.startswith("compile") else "µs"
            gv = get(gs) if gs and gs["status"] in ("ok", "timeout") else None
            bp = _best_peer({lib: s for lib, s in sums.items() if s["status"] in ("ok", "timeout")}, get)
            mark = (lambda lib: cut(lib)) if k.startswith("mask") else (lambda lib: "")
            row += [_dur(gv, unit) + (mark(GRAMGEN) if gv is not None else ""),
                    f"{_dur(bp[1], unit)}{mark(bp[0])} ({bp[0]})" if bp else "—",
                    _ratio(gv, bp[1] if bp else None)]
        row.append(_accepted_cell(gs) if gs else "not run")
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    # ---- grammars ------------------------------------------------------------------
    L.append("## What each library ran\n")
    L.append("| workload | library | grammar | status |")
    L.append("|---|---|---|---|")
    seen = set()
    for r in results["runs"]:
        key = (r["workload"], r["lib"], r.get("grammar"), r["status"], r.get("reason"))
        if key in seen:
            continue
        seen.add(key)
        st = r["status"] + (f": {r['reason']}" if r.get("reason") else "")
        st = " ".join(st.split())
        L.append(f"| {r['workload']} | {r['lib']} | {' '.join(r.get('grammar', '—').split()).replace('|', '/')} | "
                 f"{st.replace('|', '/')} |")
    L.append("")
    for w, d in results["workloads"].items():
        L.append(f"- `{w}` texts: {d['n_texts']} from `{d['source']}`; " + "; ".join(d["notes"]))
    L.append("")

    # ---- details -------------------------------------------------------------------
    L.append("## Details per workload and tokenizer\n")
    L.append("Times: tokenizer preprocessing in s; compile in ms (cold = first compile in a fresh "
             "process; p50/p90/p99/max over the cold one and the repetitions); mask latency in µs "
             "over all steps of all texts; first mask = the very first mask after compile. "
             "In the gramgen row, (r×) = gramgen / best peer. Memory of one compile: "
             "tracemalloc peak (Python-side allocations only) and RSS peak minus RSS before "
             "(includes native allocations).\n")
    for (w, tk), runs in groups.items():
        sums = {lib: summarize(r) for lib, r in runs.items()}
        ok_sums = {lib: s for lib, s in sums.items() if s["status"] in ("ok", "timeout")}
        L.append(f"### {w} × {tk}\n")
        L.append(f"![mask latency CDF](mask_latency_cdf_{w}_{tk}.png)\n")
        L.append("| library | status | tok. prep s | compile cold ms | compile p50 | p90 | p99 | max ms "
                 "| mask p50 | p90 | p99 | max µs | first mask µs | advance p50 µs | steps "
                 "| accepted | mask≠advance | tracemalloc MB | RSS Δ MB | timeouts |")
        L.append("|" + "---|" * 20)
        for lib, s in sums.items():
            if s["status"] not in ("ok", "timeout"):
                L.append(f"| {lib} | {s['status']} |" + " — |" * 18)
                continue
            cs, ms = s["compile_s"], s["mask_us"]

            def cell(v, get=None, scale=1.0):
                txt = _f(None if v is None else v * scale)
                if lib == GRAMGEN and get is not None and v is not None:
                    bp = _best_peer(ok_sums, get)
                    if bp:
                        txt += f" ({_ratio(v * scale, bp[1])})"
                return txt

            def cget(q):
                return lambda x: x["compile_s"].get(q) and x["compile_s"][q] * 1e3

            def mget(q):
                return lambda x: x["mask_us"].get(q)

            L.append("| " + " | ".join([
                lib, s["status"], _f(s["prepare_s"], "{:.2f}"),
                cell(s["compile_cold_s"], lambda x: x["compile_cold_s"] and x["compile_cold_s"] * 1e3, 1e3),
                *[cell(cs.get(q), cget(q), 1e3) for q in ("p50", "p90", "p99", "max")],
                *[cell(ms.get(q), mget(q)) for q in ("p50", "p90", "p99", "max")],
                cell(s["first_mask_us"], lambda x: x["first_mask_us"]),
                _f(s["advance_p50_us"]),
                str(ms.get("n", 0)),
                _accepted_cell(s),
                str(s["n_inconsistent"]),
                _f(s["tracemalloc_mb"], "{:.2f}"),
                _f(s["rss_delta_mb"], "{:.1f}"),
                str(s["timeouts"]),
            ]) + " |")
        L.append("")

    # ---- disagreements -------------------------------------------------------------
    L.append("## Disagreements on acceptance\n")
    L.append("Texts that some library rejected (all texts are valid JSON / Python, so a "
             "rejection is either a grammar difference or a bug). Texts a library did not "
             "finish (time budget, timeout) count as undecided and are listed only when "
             "another library rejected them.\n")
    any_dis = False
    for (w, tk), runs in groups.items():
        libs = list(runs)
        by_id = {lib: {t["id"]: t for t in r.get("texts", [])} for lib, r in runs.items()}
        ran = [lib for lib in libs if runs[lib]["status"] in ("ok", "timeout")]
        ids = results["workloads"].get(w, {}).get("texts", [])
        rows = []
        for tmeta in ids:
            tid = tmeta["id"]
            verdicts = {lib: _verdict(by_id[lib].get(tid), runs[lib]) for lib in libs}
            decided = [verdicts[lib] == "accept" for lib in ran if _decided(verdicts[lib])]
            if decided and not all(decided):  # someone rejected a valid text
                rows.append((tid, verdicts))
        if rows:
            any_dis = True
            L.append(f"### {w} × {tk}\n")
            L.append("| text | " + " | ".join(libs) + " |")
            L.append("|---|" + "---|" * len(libs))
            for tid, v in rows:
                L.append(f"| `{tid}` | " + " | ".join(v[lib].replace("|", "/") for lib in libs) + " |")
            L.append("")
            ctx = []
            for lib in libs:
                for tid, _ in rows:
                    t = by_id[lib].get(tid)
                    if t and t.get("rejected_context"):
                        ctx.append(f"- {lib} on `{tid}`: rejected at …`{t['rejected_context']!r}`")
            L.extend(ctx)
            L.append("")
    if not any_dis:
        L.append("None: no library rejected a text.\n")

    # ---- mask agreement -------------------------------------------------------------
    L.append("## Mask agreement\n")
    L.append("Number of allowed tokens in each mask, compared step by step between gramgen and "
             "each peer on the texts and steps both walked. Exact masks for the same language "
             "have equal counts; a difference means the grammars differ (e.g. xgrammar's builtin "
             "JSON) or one library's mask is wrong. Allowed counts include EOS where a library "
             "allows it.\n")
    L.append("| workload | tokenizer | peer | grammar vs gramgen's | steps compared | steps differing "
             "| first difference (text, step: gramgen vs peer) |")
    L.append("|---|---|---|---|---|---|---|")
    n_rows = 0
    for (w, tk), runs in groups.items():
        g = runs.get(GRAMGEN)
        if not g or g["status"] not in ("ok", "timeout"):
            continue
        gt = {t["id"]: t for t in g.get("texts", [])}
        for lib, r in runs.items():
            if lib == GRAMGEN or r["status"] not in ("ok", "timeout"):
                continue
            same_file = r.get("grammar", "").split(" ")[0] == g.get("grammar", "").split(" ")[0]
            if r.get("grammar_kind") != "lark" or not same_file:
                same = "no: different grammar"
            elif "expanded" in r.get("grammar", ""):
                same = "same language (template-expanded text)"
            else:
                same = "same file"
            compared = differ = 0
            first = ""
            for t in r.get("texts", []):
                a, b = gt.get(t["id"], {}).get("allowed_counts"), t.get("allowed_counts")
                if not a or not b:
                    continue
                for i, (x, y) in enumerate(zip(a, b)):
                    compared += 1
                    if x != y:
                        differ += 1
                        if not first:
                            first = f"`{t['id']}`, step {i}: {x} vs {y}"
            L.append(f"| {w} | {tk} | {lib} | {same} | {compared} | {differ} | {first or '—'} |")
            n_rows += 1
    if not n_rows:
        L.append("| — | — | — | — | — | — | gramgen did not run |")
    L.append("")

    # ---- inconsistencies / failures -------------------------------------------------
    bad = [(r, t) for r in results["runs"] for t in r.get("texts", []) if t.get("n_inconsistent")]
    if bad:
        L.append("## Mask / advance inconsistencies\n")
        L.append("Steps where the bit of the text's token in the mask disagreed with `advance`.\n")
        for r, t in bad:
            L.append(f"- {r['lib']} / {r['tokenizer']} / {r['workload']} `{t['id']}`: "
                     f"{t['n_inconsistent']} steps, first at {t['inconsistent_steps'][:5]}")
        L.append("")
    errs = [r for r in results["runs"] if r["status"] in ("error", "timeout")]
    if errs:
        L.append("## Errors and timeouts\n")
        for r in errs:
            L.append(f"- {r['lib']} / {r['tokenizer']} / {r['workload']}: {r['status']}: "
                     f"{r.get('reason', '')}; timeouts {r.get('timeouts')}")
        L.append("")
    return "\n".join(L)


# --------------------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------------------
COLORS = {"gramgen": "tab:red", "xgrammar": "tab:blue", "llguidance": "tab:green"}


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
            cut = ", texts cut" if s["n_truncated"] or s["timeouts"] else ""
            ax.step(lat, y, where="post",
                    label=f"{lib} (p50 {_dur(float(np.median(lat)), 'µs')}, n={lat.size}{cut})",
                    color=COLORS.get(lib))
            drawn += 1
        if not drawn:
            plt.close(fig)
            continue
        ax.set_xscale("log")
        ax.set_xlabel("mask latency per token (µs, log scale)")
        ax.set_ylabel("fraction of steps ≤ x")
        ax.set_ylim(0, 1.001)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(f"Full-vocabulary mask latency: {w}, {tk}")
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        p = out_dir / f"mask_latency_cdf_{w}_{tk}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def write(results: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    plots(results, out_dir)
    (out_dir / "RESULTS.md").write_text(markdown(results), encoding="utf-8")


# --------------------------------------------------------------------------------------
# --check
# --------------------------------------------------------------------------------------
def check(new: dict, old: dict, ratio: float) -> tuple[bool, list[str]]:
    """gramgen's mask p50/p99 per (workload, tokenizer): fail if new/old > ratio."""
    lines = [f"--check {ratio}: gramgen mask latency vs committed results.json "
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
            bad = rr > ratio
            ok &= not bad
            lines.append(f"  {key[0]} × {key[1]} mask {q}: {os_[q]:.1f} -> {ns[q]:.1f} µs "
                         f"({rr:.2f}×){'  WORSE than allowed' if bad else ''}")
    if not compared:
        lines.append("  nothing compared")
        ok = False
    lines.append("OK" if ok else "FAILED")
    return ok, lines
