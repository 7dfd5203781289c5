"""gramgen vs peers (xgrammar, llguidance) on the same workloads, in one run.

    python -m bench                      # --quick: small sample, < 10 min on 2 cores
    python -m bench --full
    python -m bench --workloads json --tokenizers smollm2,llama3,qwen2 --libs gramgen,xgrammar
    python -m bench --check 1.25         # gramgen only; fail if mask p50/p99 got > 1.25x worse
    python -m bench --report-only        # rebuild RESULTS.md and plots from results.json

Every (library, tokenizer, workload) job runs in its own subprocess (`--worker`), one at a
time, with time limits per phase (tokenizer preprocessing, each compile, each text) and per
job; a timed-out text is recorded and the job resumes after it in a fresh process.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import queue
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from . import report
from .workloads import FULL, QUICK, REPO, SHARED, load

ALL_LIBS = ["gramgen", "xgrammar", "llguidance"]
THREAD_ENV = {
    "RAYON_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TRANSFORMERS_VERBOSITY": "error",
    "HF_HUB_OFFLINE": "1",
}


# ======================================================================================
# worker: one (library, tokenizer, workload) job, events as JSON lines on the result fd
# ======================================================================================
def _malloc_trim() -> None:
    """Hand freed heap memory back to the OS (glibc) so RSS growth reflects new allocations."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _RssPeak:
    """Peak resident set size while a block runs: max of /proc/self/statm sampled every
    2 ms by a thread, and of ru_maxrss if the process-wide peak rose during the block."""

    def __enter__(self):
        gc.collect()
        _malloc_trim()
        self.before = _rss_bytes()
        self.maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        self.peak = self.before
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss_bytes())

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _rss_bytes())
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if maxrss > self.maxrss_before:
            self.peak = max(self.peak, maxrss)
        self.delta = self.peak - self.before
        return False


def _walk(adapter, compiled, ids: list[int], budget_s: float | None = None) -> dict:
    """Walk one text: time mask() alone at every step, then advance with the text's token.
    Stops at the first rejected token, or when the text's time budget is spent
    (then `truncated` is set and the verdict is unknown)."""
    pc = time.perf_counter_ns
    t0 = pc()
    deadline = t0 + int(budget_s * 1e9) if budget_s else None
    truncated = False
    m = adapter.matcher(compiled)
    matcher_ns = pc() - t0
    mask = adapter.mask_callable(m)
    allowed, advance = adapter.allowed, adapter.advance
    bm = m.bitmask.view(np.uint32)
    mask_ns: list[int] = []
    adv_ns: list[int] = []
    allowed_counts: list[int] = []  # popcount of each mask, to compare libraries
    inconsistent: list[int] = []  # steps where the mask bit and advance() disagree
    rejected_at = None
    for step, tok in enumerate(ids):
        a = pc()
        mask()
        b = pc()
        mask_ns.append(b - a)
        allowed_counts.append(int(np.bitwise_count(bm).sum()))
        bit = allowed(m, tok)
        c = pc()
        ok = advance(m, tok)
        adv_ns.append(pc() - c)
        if bit != ok:
            inconsistent.append(step)
        if not ok:
            rejected_at = step
            break
        if deadline is not None and c > deadline and step + 1 < len(ids):
            truncated = True
            break
    acc = rejected_at is None and not truncated and adapter.accepting(m)
    return {
        "n_tokens": len(ids),
        "steps": len(mask_ns),
        "accepted": bool(acc),
        "rejected_at": rejected_at,
        "truncated": truncated,
        "inconsistent_steps": inconsistent[:20],
        "n_inconsistent": len(inconsistent),
        "matcher_ns": matcher_ns,
        "mask_ns": mask_ns,
        "advance_ns": adv_ns,
        "allowed_counts": allowed_counts,
    }


def worker_main() -> None:
    job = json.load(sys.stdin)
    # Results go to a private copy of stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    sys.path.insert(0, str(REPO / "src"))
    from types import SimpleNamespace

    from .adapters import Unsupported, make_adapter

    try:
        adapter = make_adapter(job["lib"], job.get("options"))
        from transformers import AutoTokenizer

        t0 = time.perf_counter()
        adapter.load()
        emit(event="version", version=adapter.version(), import_seconds=time.perf_counter() - t0)

        tok = AutoTokenizer.from_pretrained(job["tokenizer_path"])
        emit(event="phase", phase="prepare")
        t0 = time.perf_counter()
        adapter.prepare(tok)
        emit(event="prepare", seconds=time.perf_counter() - t0, vocab_size=adapter.vocab_size)

        choice = adapter.grammar_for(SimpleNamespace(**job["workload"]))
        emit(event="grammar", kind=choice.kind, description=choice.description)

        emit(event="phase", phase="compile", rep=0)
        with _RssPeak() as rss:
            t0 = time.perf_counter()
            compiled = adapter.compile(choice)
            dt = time.perf_counter() - t0
        emit(
            event="compile",
            rep=0,
            seconds=dt,
            rss_delta_bytes=rss.delta,
            compiled_bytes=adapter.compiled_size_bytes(compiled),
        )
        if not job.get("resume"):
            for rep in range(1, job["reps"] + 1):
                emit(event="phase", phase="compile", rep=rep)
                gc.collect()
                t0 = time.perf_counter()
                adapter.compile(choice)
                emit(event="compile", rep=rep, seconds=time.perf_counter() - t0)
            # Python-side peak of one more compile (native allocations are invisible here).
            import tracemalloc

            emit(event="phase", phase="compile", rep="tracemalloc")
            gc.collect()
            tracemalloc.start()
            adapter.compile(choice)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            emit(event="compile_mem", tracemalloc_peak_bytes=peak)

        for t in job["texts"]:
            emit(event="phase", phase="text", id=t["id"])
            gc.collect()
            r = _walk(adapter, compiled, t["ids"], job.get("text_budget_s"))
            r["id"] = t["id"]
            k = r["rejected_at"]
            if k is not None:  # show where it happened
                r["rejected_token"] = tok.decode([t["ids"][k]])
                r["rejected_context"] = tok.decode(t["ids"][max(0, k - 12) : k + 1])[-80:]
            emit(event="text", **r)
        emit(event="done")
    except Unsupported as e:
        emit(event="unsupported", reason=str(e))
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        emit(event="error", reason=f"{type(e).__name__}: {str(e)[:500]}", traceback=tb[-3000:])


# ======================================================================================
# parent: run jobs in subprocesses with time limits
# ======================================================================================
class Limits:
    """Hard limits (the worker is killed) per phase and per job, the soft per-text budget
    (the worker stops walking that text and records it as truncated), and how many times
    a job is resumed after a killed text."""

    def __init__(self, full: bool, compile_timeout: float | None, text_budget: float | None):
        self.prepare = 600.0 if full else 180.0
        self.compile = compile_timeout or (600.0 if full else 60.0)
        self.text_budget = text_budget or (60.0 if full else 10.0)
        self.text = self.text_budget + (120.0 if full else 45.0)  # one step may overrun
        self.job = 3 * 3600.0 if full else 300.0
        self.restarts = 3 if full else 1


def _spawn(job: dict, stderr_file):
    env = dict(os.environ, **THREAD_ENV)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "src")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "--worker"],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr_file,
        text=True,
        start_new_session=True,
    )
    q: queue.Queue = queue.Queue()

    def reader():
        for line in proc.stdout:
            q.put(line)
        q.put(None)

    threading.Thread(target=reader, daemon=True).start()
    proc.stdin.write(json.dumps(job))
    proc.stdin.close()
    return proc, q


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own session (start_new_session)
    except ProcessLookupError:
        pass
    proc.wait()


def run_job(job: dict, limits: Limits, log) -> dict:
    res: dict = {
        "lib": job["lib"],
        "tokenizer": job["tokenizer"],
        "workload": job["workload"]["name"],
        "status": "ok",
        "reason": "",
        "timeouts": {"prepare": 0, "compile": 0, "text": 0, "job": 0},
        "compile": {"seconds": [], "rss_method": "peak of /proc/self/statm (2 ms samples) "
                    "and ru_maxrss, minus RSS before the first compile (after gc + malloc_trim)"},
        "texts": [],
    }
    job_deadline = time.monotonic() + limits.job
    remaining = list(job["texts"])
    sub = dict(job)
    restarts = 0
    while True:
        sub["texts"] = remaining
        with tempfile.TemporaryFile("w+") as errf:
            proc, q = _spawn(sub, errf)
            phase, phase_deadline, cur_text, finished = "start", time.monotonic() + limits.prepare, None, False
            while True:
                now = time.monotonic()
                deadline = min(phase_deadline, job_deadline)
                try:
                    line = q.get(timeout=max(0.0, deadline - now))
                except queue.Empty:
                    _kill(proc)
                    which = "job" if job_deadline <= phase_deadline else phase
                    which = "prepare" if which == "start" else which
                    res["timeouts"][which] += 1
                    log(f"      timeout in {which}" + (f" ({cur_text})" if cur_text else ""))
                    if which == "text":
                        res["texts"].append({"id": cur_text, "timeout": True, "accepted": False})
                        done_ids = {t["id"] for t in res["texts"]}
                        remaining = [t for t in remaining if t["id"] not in done_ids]
                        if remaining and restarts < limits.restarts and time.monotonic() < job_deadline:
                            restarts += 1
                            sub = dict(job, resume=True)
                            break
                    res["status"] = "timeout"
                    res["reason"] = f"{which} time limit"
                    finished = True
                    break
                if line is None:  # worker exited without "done"
                    proc.wait()
                    if res["status"] == "ok":
                        errf.seek(0)
                        tail = errf.read()[-2000:]
                        res["status"] = "error"
                        res["reason"] = f"worker exited with code {proc.returncode}"
                        res["stderr_tail"] = tail
                    finished = True
                    break
                ev = json.loads(line)
                kind = ev.pop("event")
                if kind == "phase":
                    phase = ev["phase"]
                    cur_text = ev.get("id")
                    limit = {"prepare": limits.prepare, "compile": limits.compile}.get(phase, limits.text)
                    phase_deadline = time.monotonic() + limit
                elif kind == "version":
                    res["version"] = ev["version"]
                    res.setdefault("import_seconds", ev["import_seconds"])
                elif kind == "prepare":
                    if "prepare_seconds" not in res:
                        res["prepare_seconds"] = ev["seconds"]
                        res["vocab_size"] = ev["vocab_size"]
                elif kind == "grammar":
                    res["grammar"] = ev["description"]
                    res["grammar_kind"] = ev["kind"]
                elif kind == "compile":
                    if not sub.get("resume"):
                        res["compile"]["seconds"].append(ev["seconds"])
                    if ev["rep"] == 0 and "rss_delta_bytes" not in res["compile"]:
                        res["compile"]["rss_delta_bytes"] = ev["rss_delta_bytes"]
                        res["compile"]["compiled_bytes"] = ev["compiled_bytes"]
                elif kind == "compile_mem":
                    res["compile"]["tracemalloc_peak_bytes"] = ev["tracemalloc_peak_bytes"]
                elif kind == "text":
                    res["texts"].append(ev)
                elif kind == "done":
                    proc.wait()
                    finished = True
                    break
                elif kind in ("unsupported", "error"):
                    res["status"] = kind
                    res["reason"] = ev["reason"]
                    if "traceback" in ev:
                        res["traceback"] = ev["traceback"]
                    # keep reading until EOF so the process exits cleanly
        if finished:
            break
    return res


# ======================================================================================
def _machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    return {
        "cpu": cpu,
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "memory_bytes": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
    }


def _tokenize(tokenizers: list[str], workloads: dict) -> dict:
    """ids[tokenizer][workload][text_id] with canonical tokenization, no special tokens."""
    from transformers import AutoTokenizer

    ids: dict = {}
    for name in tokenizers:
        path = _tokenizer_path(name)
        tok = AutoTokenizer.from_pretrained(path)
        ids[name] = {
            w: {t.id: tok.encode(t.text, add_special_tokens=False) for t in wl.texts}
            for w, wl in workloads.items()
        }
    return ids


def _tokenizer_path(name: str) -> str:
    p = Path(name)
    if p.is_dir():
        return str(p)
    return str(SHARED / "tokenizers" / name)


def _parse_args(argv):
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small sample (default)")
    mode.add_argument("--full", action="store_true", help="large sample, more compile repetitions")
    ap.add_argument("--workloads", default="json,python")
    ap.add_argument("--libs", default=None, help=f"default: {','.join(ALL_LIBS)} (gramgen with --check)")
    ap.add_argument("--tokenizers", default="smollm2,llama3",
                    help="names under ../shared/tokenizers/ or tokenizer directories")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--check", type=float, metavar="RATIO", default=None,
                    help="compare gramgen's mask p50/p99 with the committed results.json; "
                    "exit 1 if new/old > RATIO (results go to <out>/check.tmp/)")
    ap.add_argument("--report-only", action="store_true", help="rebuild RESULTS.md + plots from results.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reps", type=int, default=None, help="compile repetitions after the cold one")
    ap.add_argument("--compile-timeout", type=float, default=None)
    ap.add_argument("--text-budget", type=float, default=None,
                    help="seconds per text before the walk stops and the text counts as "
                    "truncated (default 10 quick, 60 full); the worker is killed 45/120 s later")
    ap.add_argument("--json-grammar", default=str(REPO / "grammars" / "json.lark"))
    ap.add_argument("--python-grammar", default=str(REPO / "grammars" / "python.lark"))
    ap.add_argument("--python-texts", default=str(REPO / "tests" / "data" / "python"))
    ap.add_argument("--llg-json", choices=["auto", "lark", "builtin"], default="auto",
                    help="llguidance's JSON grammar: the same Lark file as gramgen, its builtin "
                    "%%json, or auto (the Lark file if llguidance accepts it)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _load_baseline(out_dir: Path) -> dict | None:
    rel = None
    try:
        rel = (out_dir / "results.json").resolve().relative_to(REPO)
    except ValueError:
        pass
    if rel is not None:
        try:  # read-only: the committed version
            txt = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=REPO, capture_output=True,
                                 text=True, check=True).stdout
            return json.loads(txt)
        except (subprocess.CalledProcessError, FileNotFoundError, json.JSONDecodeError):
            pass
    p = out_dir / "results.json"
    return json.loads(p.read_text()) if p.is_file() else None


def main(argv=None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        worker_main()
        return 0
    out_dir = Path(args.out)
    if not out_dir.is_absolute():
        out_dir = Path.cwd() / out_dir
    if args.report_only:
        results = json.loads((out_dir / "results.json").read_text())
        report.write(results, out_dir)
        print(f"wrote {out_dir / 'RESULTS.md'}")
        return 0

    baseline = None
    if args.check is not None:
        baseline = _load_baseline(out_dir)
        if baseline is None:
            print("--check: no committed results.json to compare with", file=sys.stderr)
            return 2
        out_dir = out_dir / "check.tmp"
    full = bool(args.full)
    sizes = FULL if full else QUICK
    libs = (args.libs or ("gramgen" if args.check is not None else ",".join(ALL_LIBS))).split(",")
    libs = [x.strip() for x in libs if x.strip()]
    tokenizers = [x.strip() for x in args.tokenizers.split(",") if x.strip()]
    reps = args.reps if args.reps is not None else (10 if full else 3)
    limits = Limits(full, args.compile_timeout, args.text_budget)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    started = time.time()
    load_start = os.getloadavg()
    workloads, skipped = {}, {}
    for w in [x.strip() for x in args.workloads.split(",") if x.strip()]:
        try:
            workloads[w] = load(w, args, sizes)
        except FileNotFoundError as e:
            skipped[w] = str(e)
            log(f"workload {w} skipped: {e}")
    log(f"tokenizing {sum(len(w.texts) for w in workloads.values())} texts with {', '.join(tokenizers)}")
    ids = _tokenize(tokenizers, workloads)

    runs = []
    for tk in tokenizers:
        for wname, wl in workloads.items():
            for lib in libs:
                log(f"[{tk} / {wname} / {lib}]")
                job = {
                    "lib": lib,
                    "tokenizer": tk,
                    "tokenizer_path": _tokenizer_path(tk),
                    "workload": {"name": wname, "grammar_path": wl.grammar_path,
                                 "grammar_text": wl.grammar_text, "start": wl.start},
                    "texts": [{"id": t.id, "ids": ids[tk][wname][t.id]} for t in wl.texts],
                    "reps": reps,
                    "text_budget_s": limits.text_budget,
                    "options": {"llg_json": args.llg_json},
                }
                t0 = time.time()
                r = run_job(job, limits, log)
                r["wall_seconds"] = time.time() - t0
                log("      " + report.one_line(r))
                runs.append(r)

    results = {
        "meta": {
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python -m bench"] + [shlex.quote(a) for a in sys.argv[1:]]),
            "mode": "full" if full else "quick",
            "seed": args.seed,
            "compile_reps": reps,
            "limits_seconds": vars(limits),
            "machine": _machine(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "versions": _versions(libs),
            "threads": "single-threaded: xgrammar GrammarCompiler(max_threads=1, cache_enabled=False); "
            "llguidance single-matcher calls (no LLExecutor); RAYON/OMP_NUM_THREADS=1",
            "wall_seconds": time.time() - started,
            "skipped_workloads": skipped,
        },
        "workloads": {w: wl.describe() for w, wl in workloads.items()},
        "token_counts": {tk: {w: {i: len(v) for i, v in d.items()} for w, d in per.items()}
                         for tk, per in ids.items()},
        "runs": runs,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, separators=(",", ":")))
    report.write(results, out_dir)
    log(f"wrote {out_dir / 'RESULTS.md'} and {out_dir / 'results.json'} "
        f"({time.time() - started:.0f} s)")
    if baseline is not None:
        ok, lines = report.check(results, baseline, args.check)
        print("\n".join(lines))
        return 0 if ok else 1
    return 0


def _versions(libs) -> dict:
    import importlib.metadata as md

    v = {}
    for d in ["xgrammar", "llguidance", "transformers", "tokenizers", "numpy"]:
        try:
            v[d] = md.version(d)
        except md.PackageNotFoundError:
            v[d] = None
    try:
        sys.path.insert(0, str(REPO / "src"))
        import gramgen

        v["gramgen"] = getattr(gramgen, "__version__", None) or "src (uninstalled)"
        try:
            rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                                 capture_output=True, text=True).stdout.strip()
            dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=REPO,
                                   capture_output=True, text=True).stdout.strip()
            v["gramgen_git"] = rev + ("+dirty" if dirty else "") if rev else None
        except FileNotFoundError:
            pass
    except Exception as e:  # noqa: BLE001
        v["gramgen"] = f"not importable ({type(e).__name__})"
    return v


if __name__ == "__main__":
    sys.exit(main())
