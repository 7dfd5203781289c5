"""gramgen vs peers (xgrammar, llguidance, outlines-core, transformers-cfg) on the same
workloads, in one run.

    python -m bench                      # --quick: small sample, < 10 min on 2 cores
    python -m bench --full
    python -m bench --workloads json --tokenizers smollm2,llama3,qwen2 --libs gramgen,xgrammar
    python -m bench --check 1.25         # gramgen only; fail if mask p50/p99 got > 1.25x worse
    python -m bench --report-only        # rebuild RESULTS.md and plots from results.json

Every (library, tokenizer) job runs in its own subprocess (`--worker`), one at a time, over
all cases (grammars, schemas) of all workloads, with time limits per phase (tokenizer
preprocessing, each compile, each text), per case and per job; after a kill the job
resumes after the case or text that was running, in a fresh process.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import gc
import json
import os
import platform
import queue
import resource
import select
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
from .adapters import ADAPTERS
from .workloads import BUILTIN_GRAMMARS, FULL, QUICK, REPO, SHARED, WORKLOADS, load

ALL_LIBS = ["gramgen", "xgrammar", "llguidance", "outlines-core", "transformers-cfg"]
#: in quick mode these workloads run with the first tokenizer only (--all-tokenizers: all)
FIRST_TOKENIZER_ONLY = ("python", "jsonschema", "lark", "gbnf")
#: multi-case workloads repeat a case's compile in its process only when the first took
#: less than this (see --case-reps)
WARM_REPS_BELOW_S = 1.0
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


class _GCPauses:
    """Nanoseconds the cyclic garbage collector has run in this process (a gc callback),
    so each timed mask can say how much of it was a collection."""

    def __init__(self):
        self.ns = 0
        self._start = 0
        gc.callbacks.append(self._note)

    def _note(self, phase, info):
        if phase == "start":
            self._start = time.perf_counter_ns()
        else:
            self.ns += time.perf_counter_ns() - self._start


_gc_pauses: _GCPauses | None = None


def _walk(adapter, compiled, ids: list[int], budget_s: float | None = None, timed: bool = True) -> dict:
    """Walk one text: time mask() alone at every step, then advance with the text's token.
    Stops at the first rejected token, or when the text's time budget is spent (then
    `truncated` is set and the verdict is unknown).  `timed=False` (invalid instances):
    advance only, no masks; the mask latency figures come from valid texts. `mask_gc_ns`:
    {step: ns} for the masks during which the garbage collector ran (its pause included in
    mask_ns)."""
    global _gc_pauses
    if _gc_pauses is None:
        _gc_pauses = _GCPauses()
    pauses = _gc_pauses
    pc = time.perf_counter_ns
    t0 = pc()
    deadline = t0 + int(budget_s * 1e9) if budget_s else None
    truncated = False
    m = adapter.matcher(compiled)
    matcher_ns = pc() - t0
    mask = adapter.mask_callable(m)
    allowed, advance, after = adapter.allowed, adapter.advance, adapter.after_mask
    bm = m.bitmask.view(np.uint32)
    mask_ns: list[int] = []
    mask_gc_ns: dict[str, int] = {}
    adv_ns: list[int] = []
    allowed_counts: list[int] = []  # popcount of each mask, to compare libraries
    inconsistent: list[int] = []  # steps where the mask bit and advance() disagree
    rejected_at = None
    for step, tok in enumerate(ids):
        bit = None
        if timed:
            before = pauses.ns
            a = pc()
            mask()
            b = pc()
            mask_ns.append(b - a)
            if pauses.ns != before:
                mask_gc_ns[str(step)] = pauses.ns - before
            after(m)
            allowed_counts.append(int(np.bitwise_count(bm).sum()))
            bit = allowed(m, tok)
        c = pc()
        ok = advance(m, tok)
        adv_ns.append(pc() - c)
        if bit is not None and bit != ok:
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
        "steps": len(adv_ns),
        "accepted": bool(acc),
        "rejected_at": rejected_at,
        "truncated": truncated,
        "inconsistent_steps": inconsistent[:20],
        "n_inconsistent": len(inconsistent),
        "matcher_ns": matcher_ns,
        "mask_ns": mask_ns,
        "mask_gc_ns": mask_gc_ns,
        "advance_ns": adv_ns,
        "allowed_counts": allowed_counts,
    }


def worker_main() -> None:
    """One (library, tokenizer) job: prepare the vocabulary once, then compile and walk
    every case, reporting events as JSON lines so the parent can enforce time limits."""
    job = json.loads(sys.stdin.readline())
    # Results go to a private copy of stdout; anything a library prints goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(**kw):
        out.write(json.dumps(kw) + "\n")
        out.flush()

    def turn():
        """With libraries taking turns (``job["turns"]``): ask the parent for the turn and
        wait for it (a line on stdin); returns the function that hands it back."""
        if not job.get("turns"):
            return lambda: None
        emit(event="turn")
        if not sys.stdin.readline():
            raise SystemExit("the parent closed the turn channel")
        return lambda: emit(event="turn_done")

    sys.path.insert(0, str(REPO / "src"))
    from .adapters import CompileFailed, NotApplicable, make_adapter

    # (with turns, loading the library and the tokenizer is in the first turn too: another
    # worker's imports would otherwise run beside this one's tokenizer preprocessing and
    # first compiles)
    done_turn = turn()
    try:
        adapter = make_adapter(job["lib"], job.get("options"))
        t0 = time.perf_counter()
        try:
            adapter.load()
        except ImportError as e:
            emit(event="missing", reason=f"not installed: {e}")
            return
        emit(event="version", version=adapter.version(), import_seconds=time.perf_counter() - t0)
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(job["tokenizer_path"])
        emit(event="phase", phase="prepare")
        t0 = time.perf_counter()
        try:
            adapter.prepare(tok, job["tokenizer_path"])
        except NotApplicable as e:
            emit(event="missing", reason=str(e))
            return
        emit(event="prepare", seconds=time.perf_counter() - t0, vocab_size=adapter.vocab_size)
        # What the harness itself loaded (transformers, torch, the tokenizer, the library's
        # vocabulary tables) goes to the permanent generation, as a serving process does
        # after start-up: otherwise every full collection that a library's own allocations
        # trigger also walks ~200k harness objects (~100 ms), whichever library it lands in.
        # The library's own objects (its caches, its matchers) are still collected and timed.
        gc.collect()
        gc.freeze()
    except Exception as e:  # noqa: BLE001 - reported, not hidden
        tb = traceback.format_exc()
        sys.stderr.write(tb)
        emit(event="error", reason=f"{type(e).__name__}: {str(e)[:500]}", traceback=tb[-3000:])
        return
    finally:
        done_turn()

    def run_case(case: dict, probes: list | None = None) -> None:
        """One case; its memory probe is appended to ``probes`` (run now when None)."""
        key = case["key"]
        try:
            try:
                choice = adapter.grammar_for(case, case["workload"])
            except NotApplicable as e:
                emit(event="case_na", case=key, reason=str(e))
                return
            emit(event="grammar", case=key, kind=choice.kind, description=choice.description)
            emit(event="phase", phase="compile", case=key)
            try:
                # (timed alone: the memory probe, whose heap trim and sampling thread would
                # slow this compile and the masks after it, runs on a compile of its own; see
                # probe_compile_memory)
                adapter.cold_start()
                t0 = time.perf_counter()
                compiled = adapter.compile(choice)
                dt = time.perf_counter() - t0
            except CompileFailed as e:
                emit(event="compile_error", case=key, seconds=time.perf_counter() - t0, reason=str(e)[:500])
                return
            emit(event="compile", case=key, rep=0, seconds=dt,
                 compiled_bytes=adapter.compiled_size_bytes(compiled))
            # multi-case workloads: the first compile ran in the case's fresh (forked) process;
            # repeat it there (caches cleared by the adapter, so each is still a cold compile
            # of this schema) to measure what a running server pays, unless it is slow enough
            # that process warm-up is noise and repeating would eat the case limit
            warm = case.get("warm_reps", 0) if dt < WARM_REPS_BELOW_S else 0
            if warm and not case.get("resumed"):
                for rep in range(1, warm + 1):
                    gc.collect()
                    adapter.cold_start()
                    t0 = time.perf_counter()
                    adapter.compile(choice)
                    emit(event="compile", case=key, rep=rep, seconds=time.perf_counter() - t0)
            if case.get("reps") and not case.get("resumed"):
                for rep in range(1, case["reps"] + 1):
                    emit(event="phase", phase="compile", case=key)
                    gc.collect()
                    adapter.cold_start()
                    t0 = time.perf_counter()
                    adapter.compile(choice)
                    emit(event="compile", case=key, rep=rep, seconds=time.perf_counter() - t0)
                # Python-side peak of one more compile (native allocations are invisible here).
                import tracemalloc

                emit(event="phase", phase="compile", case=key)
                gc.collect()
                adapter.cold_start()
                tracemalloc.start()
                adapter.compile(choice)
                _, peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                emit(event="compile_mem", case=key, tracemalloc_peak_bytes=peak)
            for t in case["texts"]:
                emit(event="phase", phase="text", case=key, id=t["id"])
                r = _walk(adapter, compiled, t["ids"], job.get("text_budget_s"), t.get("expect") is not False)
                r["id"] = t["id"]
                r["expect"] = t.get("expect")
                k = r["rejected_at"]
                if k is not None:  # show where it happened
                    r["rejected_token"] = tok.decode([t["ids"][k]])
                    r["rejected_context"] = tok.decode(t["ids"][max(0, k - 12): k + 1])[-80:]
                emit(event="text", case=key, **r)
            del compiled
            if probes is None:
                probe_compile_memory(key, choice, dt)
            else:
                probes.append((key, choice, dt))
            emit(event="case_done", case=key)
        except Exception as e:  # noqa: BLE001 - one case's crash is that case's error
            tb = traceback.format_exc()
            sys.stderr.write(tb)
            emit(event="case_error", case=key, reason=f"{type(e).__name__}: {str(e)[:500]}",
                 traceback=tb[-2000:])

    def probe_compile_memory(key: str, choice, first_s: float) -> None:
        """RSS growth of one more cold compile of a case: the heap trimmed first, RSS
        sampled by a thread meanwhile. The trim makes the compiles and masks after it pay
        the page faults of growing the heap again, so the probes of a worker's cases run
        after all of them (or at the end of a forked case). Skipped where the first compile
        took over a quarter of the case's time limit."""
        limit = job.get("case_limit_s")
        if limit and first_s > limit / 4:
            return
        emit(event="phase", phase="memory", case=key)
        adapter.cold_start()
        with _RssPeak() as rss:
            adapter.compile(choice)
        emit(event="compile_rss", case=key, rss_delta_bytes=rss.delta)

    def run_case_forked(case: dict, limit: float) -> None:
        """One case in a child forked from this prepared worker, killed after `limit`
        seconds: a pathological schema costs its time limit, not a worker restart (imports,
        tokenizer loading and preprocessing again).  Every case starts from the same state."""
        key = case["key"]
        out.flush()
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                run_case(case)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                out.flush()
                os._exit(code)
        fd = os.pidfd_open(pid)
        try:
            ready, _, _ = select.select([fd], [], [], limit)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                emit(event="case_timeout", case=key, seconds=limit)
                return
            _, status = os.waitpid(pid, 0)
            if status != 0:
                emit(event="case_error", case=key, reason=f"case process died (wait status {status})")
        finally:
            os.close(fd)

    fork = job.get("fork", False) and hasattr(os, "fork") and hasattr(os, "pidfd_open")
    probes: list = []
    per_turn = max(1, int(job.get("turn_cases") or 1))
    for i, case in enumerate(job["cases"]):
        if i % per_turn == 0:
            done_turn = turn()
        emit(event="phase", phase="case", case=case["key"])
        if fork and not case.get("reps") and job.get("case_limit_s"):
            run_case_forked(case, case_limit(job, case))
        else:
            run_case(case, probes)
        if i % per_turn == per_turn - 1 or i == len(job["cases"]) - 1:
            done_turn()
    done_turn = turn()
    for key, choice, first_s in probes:
        try:
            probe_compile_memory(key, choice, first_s)
        except Exception:  # noqa: BLE001 - the case compiled before; no memory figure for it
            pass
    done_turn()
    emit(event="done")


# ======================================================================================
# parent: run jobs in subprocesses with time limits
# ======================================================================================
class Limits:
    """Hard limits (the worker is killed) per phase, per case of a multi-case workload
    (e.g. one JSON schema: compile + all its instances) and per job; the soft per-text
    budget (the worker stops walking that text and records it as truncated); and how many
    times a job is resumed in a fresh process after a kill."""

    def __init__(self, full: bool, compile_timeout: float | None, text_budget: float | None,
                 case_timeout: float | None = None):
        self.prepare = 600.0 if full else 180.0
        self.compile = compile_timeout or (600.0 if full else 60.0)
        self.text_budget = text_budget or (60.0 if full else 2.0)
        self.text = self.text_budget + (120.0 if full else 20.0)  # one step may overrun
        self.case = case_timeout or (30.0 if full else 6.0)
        self.job = 12 * 3600.0 if full else 300.0
        self.restarts = 200 if full else 8


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
    proc.stdin.write(json.dumps(job) + "\n")
    proc.stdin.flush()
    if not job.get("turns"):
        proc.stdin.close()
    return proc, q


class Turns:
    """The libraries' workers of one tokenizer take turns: one at a time prepares, runs a
    few cases (``--turn-cases``) or probes memory, round the table in a fixed order
    (``names``), so with two libraries each few cases of one run right after the same
    cases of the other. A change in the machine's speed during a run then moves both alike,
    where running one library's cases all before the other's put a slow spell in one
    library's figures only (the compile ratio of one commit moved by 0.6 between runs 16
    minutes apart). (Turns of one case each cost every case the other process's cold
    caches: compiles took 1.3-1.9x as long.) A library whose job has ended leaves the table
    (:meth:`Seat.leave`); a worker that restarts keeps its seat."""

    def __init__(self, names: list[str]):
        self._cond = threading.Condition()
        self._order = list(names)
        self._seated = set(names)
        self._at = 0          # (whose turn is next)
        self._holder = None   # (who has it now)

    def seat(self, name: str) -> "Turns.Seat":
        return Turns.Seat(self, name)

    def _advance(self) -> None:
        for step in range(1, len(self._order) + 1):
            nxt = (self._at + step) % len(self._order)
            if self._order[nxt] in self._seated:
                self._at = nxt
                return

    class Seat:
        """One library's place at the table."""

        def __init__(self, turns: "Turns", name: str):
            self.turns, self.name = turns, name
            #: set once this library has had its first turn (or left): the next worker is
            #: started only then, so that its start-up (imports) runs while the others wait
            #: for its turn, not beside another's timed work
            self.started = threading.Event()

        def acquire(self) -> None:
            t = self.turns
            with t._cond:
                while t._holder is not None or t._order[t._at] != self.name:
                    t._cond.wait()
                t._holder = self.name

        def release(self) -> None:
            t = self.turns
            with t._cond:
                if t._holder == self.name:
                    t._holder = None
                    t._advance()
                    t._cond.notify_all()
            self.started.set()

        def leave(self) -> None:
            t = self.turns
            with t._cond:
                if t._holder == self.name:
                    t._holder = None
                t._seated.discard(self.name)
                if t._order[t._at] == self.name:
                    t._advance()
                t._cond.notify_all()
            self.started.set()


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the worker's own session (start_new_session)
    except ProcessLookupError:
        pass
    proc.wait()


def _new_case(c: dict) -> dict:
    return {"workload": c["workload"], "id": c["id"], "status": "not_run", "reason": "",
            "grammar": "", "grammar_kind": "",
            "compile": {"seconds": []}, "texts": [],
            "timeouts": {"compile": 0, "text": 0, "case": 0}}


def run_job(job: dict, limits: Limits, log, turns: "Turns.Seat | None" = None) -> dict:
    """Run one (library, tokenizer) job over all its cases in worker subprocesses, killing a
    worker at a phase/case/job time limit and resuming after what it was doing. ``turns``:
    this library's seat at a table shared with the jobs of the other libraries, which take
    turns with this one (the worker waits for its turn before preparing, before each case
    and before its memory probes; see :class:`Turns`)."""
    try:
        return _run_job(job, limits, log, turns)
    finally:
        if turns is not None:
            turns.leave()


def _run_job(job: dict, limits: Limits, log, turns: "Turns.Seat | None") -> dict:
    res: dict = {
        "lib": job["lib"], "tokenizer": job["tokenizer"], "status": "ok", "reason": "",
        "timeouts": {"prepare": 0, "job": 0}, "restarts": 0,
        "cases": {c["key"]: _new_case(c) for c in job["cases"]},
    }
    cases = res["cases"]
    by_key = {c["key"]: c for c in job["cases"]}
    job_deadline = time.monotonic() + limits.job
    done_texts: dict[str, set] = {k: set() for k in by_key}
    finished: set[str] = set()
    restarts = 0

    def pending() -> list[dict]:
        out = []
        for c in job["cases"]:
            if c["key"] in finished:
                continue
            texts = [t for t in c["texts"] if t["id"] not in done_texts[c["key"]]]
            resumed = bool(cases[c["key"]]["compile"]["seconds"])
            out.append(dict(c, texts=texts, resumed=resumed))
        return out

    while True:
        todo = pending()
        if not todo:
            break
        sub = dict(job, cases=todo)
        killed = False
        with tempfile.TemporaryFile("w+") as errf:
            proc, q = _spawn(sub, errf)
            phase, cur_case, cur_text = "prepare", None, None
            probed = None   # the case whose memory probe runs (phase "memory")
            phase_deadline = time.monotonic() + limits.prepare
            case_deadline = float("inf")
            holding = False   # (this worker has the turn)
            try:
                while True:
                    deadline = min(phase_deadline, case_deadline, job_deadline)
                    try:
                        line = q.get(timeout=max(0.0, deadline - time.monotonic()))
                    except queue.Empty:
                        _kill(proc)
                        killed = True
                        if deadline == job_deadline:
                            res["timeouts"]["job"] += 1
                            res["status"], res["reason"] = "timeout", "job time limit"
                            for k in by_key:
                                if k not in finished and cases[k]["status"] == "not_run":
                                    cases[k]["reason"] = "job time limit reached before this case"
                            if cur_case:
                                cases[cur_case]["status"] = "timeout"
                                cases[cur_case]["reason"] = "job time limit"
                            log("      timeout: job time limit")
                            return res
                        if phase == "memory":  # (no memory figure; the cases left go on in a new worker)
                            log(f"      timeout in the memory probe of {probed}")
                            break
                        if phase == "prepare":
                            res["timeouts"]["prepare"] += 1
                            res["status"], res["reason"] = "timeout", "tokenizer preprocessing time limit"
                            log("      timeout in tokenizer preprocessing")
                            return res
                        c = cases[cur_case]
                        if deadline == case_deadline:
                            c["timeouts"]["case"] += 1
                            c["status"], c["reason"] = "timeout", f"case time limit ({limits.case:.0f} s)"
                            finished.add(cur_case)
                        elif phase == "compile":
                            c["timeouts"]["compile"] += 1
                            if not c["compile"]["seconds"]:
                                c["status"], c["reason"] = "timeout", f"compile time limit ({limits.compile:.0f} s)"
                            finished.add(cur_case)
                        else:  # text
                            c["timeouts"]["text"] += 1
                            c["texts"].append({"id": cur_text, "timeout": True, "accepted": False,
                                               "expect": _expect(by_key[cur_case], cur_text)})
                            done_texts[cur_case].add(cur_text)
                        log(f"      timeout in {phase} ({cur_case}{' / ' + cur_text if cur_text else ''})")
                        break
                    if line is None:  # worker exited without "done"
                        proc.wait()
                        errf.seek(0)
                        tail = errf.read()[-2000:]
                        if res["status"] in ("missing", "error"):
                            return res
                        if phase == "memory":
                            log(f"      worker died in the memory probe of {probed}: exit code {proc.returncode}")
                            killed = True
                            break
                        if cur_case is None:
                            res["status"] = "error"
                            res["reason"] = f"worker exited with code {proc.returncode}"
                            res["stderr_tail"] = tail
                            return res
                        c = cases[cur_case]
                        c["status"] = "error"
                        c["reason"] = f"worker died (exit code {proc.returncode}) in {phase}"
                        c["stderr_tail"] = tail
                        finished.add(cur_case)
                        killed = True
                        log(f"      worker died in {cur_case}: exit code {proc.returncode}")
                        break
                    ev = json.loads(line)
                    kind = ev.pop("event")
                    key = ev.pop("case", None)
                    c = cases.get(key) if key else None
                    if kind == "turn":
                        turns.acquire()
                        holding = True
                        # (the wait was not the worker's: its next phase sets its own limit)
                        phase_deadline = time.monotonic() + limits.prepare
                        try:
                            proc.stdin.write("go\n")
                            proc.stdin.flush()
                        except OSError:
                            pass   # (the worker is gone: its end comes next from the reader)
                    elif kind == "turn_done":
                        holding = False
                        turns.release()
                    elif kind == "phase":
                        phase = ev["phase"]
                        if phase == "case":
                            cur_case, cur_text = key, None
                            multi = not by_key[key].get("reps")
                            # the worker enforces the case limit itself (forked case); this is the backstop
                            backstop = case_limit(sub, sub_case(sub, key)) + 30
                            case_deadline = time.monotonic() + backstop if multi else float("inf")
                            phase_deadline = float("inf")
                        else:
                            cur_text = ev.get("id")
                            if phase == "memory":
                                probed = key
                            limit = limits.compile if phase == "compile" else limits.text
                            phase_deadline = time.monotonic() + limit
                    elif kind == "version":
                        res["version"] = ev["version"]
                        res.setdefault("import_seconds", ev["import_seconds"])
                    elif kind == "prepare":
                        res.setdefault("prepare_seconds", ev["seconds"])
                        res.setdefault("vocab_size", ev["vocab_size"])
                    elif kind == "grammar":
                        c["grammar"], c["grammar_kind"] = ev["description"], ev["kind"]
                    elif kind == "case_na":
                        c["status"], c["reason"] = "n/a", ev["reason"]
                        finished.add(key)
                    elif kind == "compile_error":
                        c["status"], c["reason"] = "compile_error", ev["reason"]
                        c["compile"]["failed_seconds"] = ev["seconds"]
                        finished.add(key)
                    elif kind == "compile":
                        if not sub_case(sub, key).get("resumed"):
                            c["compile"]["seconds"].append(ev["seconds"])
                            if ev["rep"] == 0:
                                c["compile"]["compiled_bytes"] = ev["compiled_bytes"]
                    elif kind == "compile_rss":
                        if not sub_case(sub, key).get("resumed"):
                            c["compile"]["rss_delta_bytes"] = ev["rss_delta_bytes"]
                    elif kind == "compile_mem":
                        c["compile"]["tracemalloc_peak_bytes"] = ev["tracemalloc_peak_bytes"]
                    elif kind == "text":
                        c["texts"].append(ev)
                        done_texts[key].add(ev["id"])
                    elif kind == "case_done":
                        if c["status"] == "not_run":
                            c["status"] = "ok"
                        elif c["status"] == "timeout" and c["compile"]["seconds"]:
                            c["status"] = "ok"  # texts timed out, the case itself finished
                        finished.add(key)
                        case_deadline = float("inf")
                        cur_case = None
                    elif kind == "case_timeout":
                        c["timeouts"]["case"] += 1
                        c["status"], c["reason"] = "timeout", f"case time limit ({ev['seconds']:.0f} s with its texts' budgets)"
                        finished.add(key)
                        case_deadline = float("inf")
                        cur_case = None
                    elif kind == "case_error":
                        c["status"], c["reason"] = "error", ev["reason"]
                        c["traceback"] = ev.get("traceback")
                        finished.add(key)
                    elif kind == "done":
                        proc.wait()
                        break
                    elif kind in ("missing", "error"):
                        res["status"] = kind
                        res["reason"] = ev["reason"]
                        if "traceback" in ev:
                            res["traceback"] = ev["traceback"]
            finally:
                if holding:
                    turns.release()
                if turns is not None and not proc.stdin.closed:
                    try:
                        proc.stdin.close()
                    except OSError:
                        pass
        if killed:
            restarts += 1
            res["restarts"] = restarts
            if restarts > limits.restarts:
                for k in by_key:
                    if k not in finished and cases[k]["status"] == "not_run":
                        cases[k]["reason"] = f"not run: more than {limits.restarts} worker restarts"
                res["status"], res["reason"] = "timeout", f"gave up after {limits.restarts} restarts"
                return res
            continue
        break
    for k in by_key:  # a case with texts that timed out still finished
        if cases[k]["status"] == "timeout" and cases[k]["compile"]["seconds"] and not cases[k]["timeouts"]["case"]:
            cases[k]["status"] = "ok"
    return res


def not_applicable(job: dict) -> dict:
    """The result of a job whose cases the library has no frontend for (no worker started)."""
    cs = {c["key"]: dict(_new_case(c), status="n/a", reason=f"{job['lib']} has no {c['kind']} frontend")
          for c in job["cases"]}
    return {"lib": job["lib"], "tokenizer": job["tokenizer"], "status": "ok", "reason": "",
            "timeouts": {"prepare": 0, "job": 0}, "restarts": 0, "cases": cs}


def case_limit(job: dict, case: dict) -> float:
    """Hard limit for one case of a multi-case workload: the case limit (compile and
    anything pathological) plus the soft budget of each of its texts and the most that
    its compile repetitions may take."""
    return (job.get("case_limit_s", 0.0) + len(case.get("texts", ())) * (job.get("text_budget_s") or 0.0)
            + case.get("warm_reps", 0) * WARM_REPS_BELOW_S)


def sub_case(sub: dict, key: str) -> dict:
    for c in sub["cases"]:
        if c["key"] == key:
            return c
    return {}


def _expect(case: dict, text_id: str):
    for t in case["texts"]:
        if t["id"] == text_id:
            return t.get("expect")
    return None


def split_runs(job_result: dict, workloads: list[str]) -> list[dict]:
    """One run per (library, tokenizer, workload), the shape the report reads."""
    runs = []
    for w in workloads:
        cs = [c for c in job_result["cases"].values() if c["workload"] == w]
        if not cs:
            continue
        status = job_result["status"]
        if status in ("ok", "timeout") and all(c["status"] == "n/a" for c in cs):
            status = "n/a"
        runs.append({
            "lib": job_result["lib"], "tokenizer": job_result["tokenizer"], "workload": w,
            "status": status, "reason": job_result.get("reason", "") if status != "n/a" else cs[0]["reason"],
            "version": job_result.get("version"), "import_seconds": job_result.get("import_seconds"),
            "prepare_seconds": job_result.get("prepare_seconds"), "vocab_size": job_result.get("vocab_size"),
            "restarts": job_result.get("restarts", 0),
            "job_timeouts": job_result.get("timeouts"),
            "cases": cs,
        })
    return runs


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
    """ids[tokenizer][(case key, text id)] with canonical tokenization, no special tokens."""
    from transformers import AutoTokenizer

    ids: dict = {}
    for name in tokenizers:
        tok = AutoTokenizer.from_pretrained(_tokenizer_path(name))
        ids[name] = {
            (_key(w, c.id), t.id): tok.encode(t.text, add_special_tokens=False)
            for w, wl in workloads.items() for c in wl.cases for t in c.texts
        }
    return ids


def _key(workload: str, case_id: str) -> str:
    return f"{workload}:{case_id}"


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
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--libs", default=None, help=f"default: {','.join(ALL_LIBS)} (gramgen with --check)")
    ap.add_argument("--tokenizers", default="smollm2,llama3,qwen2",
                    help="names under ../shared/tokenizers/ or tokenizer directories")
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--check", type=float, metavar="RATIO", default=None,
                    help="compare gramgen's mask p50/p99 with the committed results.json; "
                    "exit 1 if new/old > RATIO (results go to <out>/check.tmp/)")
    ap.add_argument("--report-only", action="store_true", help="rebuild RESULTS.md + plots from results.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--case-reps", type=int, default=3,
                    help="multi-case workloads (JSON Schema): compiles of each case repeated in its "
                    "process after the first (when that took < %.1f s); compile p50/p99 use their median "
                    "per case" % WARM_REPS_BELOW_S)
    ap.add_argument("--reps", type=int, default=None,
                    help="compile repetitions after the cold one (json/python workloads)")
    ap.add_argument("--schemas-per-category", type=int, default=None,
                    help="jsonschema workload sample size (default 1 quick, all full)")
    ap.add_argument("--compile-timeout", type=float, default=None)
    ap.add_argument("--case-timeout", type=float, default=None,
                    help="hard limit per case of a multi-case workload (one schema or grammar: "
                    "compile + its texts), plus each text's budget; default 6 s quick, 30 s full")
    ap.add_argument("--text-budget", type=float, default=None,
                    help="seconds per text before the walk stops and the text counts as "
                    "truncated (default 2 quick, 60 full); the worker is killed 20/120 s later")
    ap.add_argument("--json-grammar", default=str(BUILTIN_GRAMMARS / "json.lark"))
    ap.add_argument("--python-grammar", default=str(BUILTIN_GRAMMARS / "python_subset.lark"))
    ap.add_argument("--python-texts", default=str(REPO / "tests" / "data" / "python"))
    ap.add_argument("--llg-json", choices=["auto", "lark", "builtin"], default="auto",
                    help="llguidance's JSON grammar: the same Lark file as gramgen, its builtin "
                    "%%json, or auto (the Lark file if llguidance accepts it)")
    ap.add_argument("--gramgen-caches", choices=["cold", "warm"], default="cold",
                    help="cold: every gramgen compile empties its process caches first (as "
                    "xgrammar's cache_enabled=False); warm: a compile reuses what earlier cases left "
                    "there (as a serving process; use with --case-reps 0, or repetitions reuse "
                    "their own case's automata)")
    ap.add_argument("--any-order", action="store_true",
                    help="xgrammar: compile_json_schema(any_order=True) (object keys in any order)")
    ap.add_argument("--all-tokenizers", action="store_true",
                    help="quick mode: run every workload with every tokenizer (by default the "
                    f"{', '.join(FIRST_TOKENIZER_ONLY)} workloads use only the first tokenizer)")
    ap.add_argument("--fork", action="store_true",
                    help="run each case of a multi-case workload in a child forked from the prepared "
                    "worker (a timeout costs only that case instead of a worker restart, but every case "
                    "then pays the fork's copy-on-write page faults in its compile and first masks); by "
                    "default cases run in the worker itself, as in a serving process")
    ap.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=True,
                    help="the libraries' workers of a tokenizer take turns, case by case (one runs at "
                    "a time): a change in the machine's speed during the run then moves every library "
                    "alike (default); --no-interleave runs one library's cases all before the next's")
    ap.add_argument("--turn-cases", type=int, default=20,
                    help="with --interleave, how many cases a library runs in one turn (the first of "
                    "each turn meets caches the other library left)")
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
    if args.schemas_per_category is not None:
        sizes = dataclasses.replace(sizes, schemas_per_category=args.schemas_per_category)
    libs = (args.libs or ("gramgen" if args.check is not None else ",".join(ALL_LIBS))).split(",")
    libs = [x.strip() for x in libs if x.strip()]
    tokenizers = [x.strip() for x in args.tokenizers.split(",") if x.strip()]
    reps = args.reps if args.reps is not None else (10 if full else 3)
    limits = Limits(full, args.compile_timeout, args.text_budget, args.case_timeout)

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
    n_texts = sum(len(c.texts) for w in workloads.values() for c in w.cases)
    log(f"tokenizing {n_texts} texts with {', '.join(tokenizers)}")
    ids = _tokenize(tokenizers, workloads)

    def tokenizers_for(wname: str) -> list[str]:
        if full or args.all_tokenizers or wname not in FIRST_TOKENIZER_ONLY:
            return tokenizers
        return tokenizers[:1]

    runs = []
    options = {"llg_json": args.llg_json, "any_order": args.any_order, "gramgen_caches": args.gramgen_caches}
    for tk in tokenizers:
        jobs = []
        for lib in libs:
            cases = []
            for wname, wl in workloads.items():
                if tk not in tokenizers_for(wname):
                    continue
                for c in wl.cases:
                    key = _key(wname, c.id)
                    cases.append(dict(c.to_job(), key=key, workload=wname,
                                      reps=reps if wl.reps else 0,
                                      warm_reps=0 if wl.reps else args.case_reps,
                                      texts=[{"id": t.id, "ids": ids[tk][(key, t.id)], "expect": t.expect}
                                             for t in c.texts]))
            job = {"lib": lib, "tokenizer": tk, "tokenizer_path": _tokenizer_path(tk),
                   "cases": cases, "text_budget_s": limits.text_budget, "options": options,
                   "case_limit_s": limits.case, "fork": args.fork}
            kinds = getattr(ADAPTERS.get(lib), "kinds", None)
            jobs.append((job, kinds is not None and not any(c["kind"] in kinds for c in cases)))
        workers = [job for job, na in jobs if not na]
        turns = Turns([j["lib"] for j in workers]) if args.interleave and len(workers) > 1 else None
        done: dict[str, tuple[dict, float]] = {}

        def run_one(job: dict, seat: "Turns.Seat", t0: float) -> None:
            try:
                done[job["lib"]] = (run_job(job, limits, log, seat), time.time() - t0)
            except Exception as e:  # noqa: BLE001 - reported as that library's error
                traceback.print_exc()
                cs = {c["key"]: dict(_new_case(c), reason="the harness failed") for c in job["cases"]}
                done[job["lib"]] = ({"lib": job["lib"], "tokenizer": job["tokenizer"], "status": "error",
                                     "reason": f"harness: {type(e).__name__}: {e}", "timeouts": {"prepare": 0, "job": 0},
                                     "restarts": 0, "cases": cs}, time.time() - t0)
            finally:
                seat.leave()   # (run_job leaves too; this covers a failure before it)

        if turns is not None:
            log(f"[{tk} / {', '.join(j['lib'] for j in workers)}, taking turns of {args.turn_cases} cases]")
            threads = []
            for job in workers:
                job["turns"], job["turn_cases"] = True, args.turn_cases
                seat = turns.seat(job["lib"])
                threads.append(threading.Thread(target=run_one, args=(job, seat, time.time())))
                threads[-1].start()
                seat.started.wait()   # (the next worker starts when this one has had its first turn)
            for t in threads:
                t.join()
        for job, na in jobs:
            if na:
                r, wall = not_applicable(job), 0.0
            elif turns is not None:
                r, wall = done[job["lib"]]
            else:
                log(f"[{tk} / {job['lib']}]")
                t0 = time.time()
                r = run_job(job, limits, log)
                wall = time.time() - t0
            for run in split_runs(r, list(workloads)):
                run["wall_seconds"] = wall
                log(f"      {run['workload']}: " + report.one_line(run))
                runs.append(run)

    results = {
        "meta": {
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python -m bench"] + [shlex.quote(a) for a in sys.argv[1:]]),
            "mode": "full" if full else "quick",
            "seed": args.seed,
            "compile_reps": reps,
            "case_compile_reps": args.case_reps,
            "case_process": ("a child forked from the prepared worker per case" if args.fork
                             else "the worker process, one case after another (a timeout restarts the worker)"),
            "libraries_take_turns": (f"{args.turn_cases} cases a turn" if args.interleave else False),
            "limits_seconds": vars(limits),
            "machine": _machine(),
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "versions": _versions(libs),
            "gc": "after loading the library and the tokenizer, each worker calls gc.collect(); gc.freeze() "
                  "(the harness's own objects are not walked by later collections; the library's are)",
            "threads": "single-threaded: xgrammar GrammarCompiler(max_threads=1, cache_enabled=False); "
            "llguidance single-matcher calls (no LLExecutor); RAYON/OMP_NUM_THREADS=1",
            "wall_seconds": time.time() - started,
            "skipped_workloads": skipped,
            "tokenizers_per_workload": {w: tokenizers_for(w) for w in workloads},
            "json_schema_policy": _policies(libs, options),
        },
        "workloads": {w: wl.describe() for w, wl in workloads.items()},
        "token_counts": {tk: {f"{k[0]}#{k[1]}": len(v) for k, v in per.items()} for tk, per in ids.items()},
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


def _policies(libs, options) -> dict:
    from .adapters import ADAPTERS

    out = {}
    for lib in libs:
        if lib in ADAPTERS:
            out[lib] = ADAPTERS[lib](options).json_schema_policy
    return out


def _versions(libs) -> dict:
    import importlib.metadata as md

    v = {}
    for d in ["xgrammar", "llguidance", "outlines_core", "transformers-cfg", "transformers",
              "tokenizers", "numpy", "jsonschema"]:
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
