"""The language server's engine on scripted models: candidates, token healing, where
completions and ghost text stop, cancellation and the time budget from another thread,
the jedi monitor over the whole document, the Python grammar, failures."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

import gramgen
from gramgen import cli
from gramgen.errors import ConfigurationError
from gramgen.generation import SyntheticLM
from gramgen.lsp.engine import CompletionEngine, Job, Request, ServerOptions, StopGuard, TokenTable
from gramgen.lsp.server import jedi_monitors
from gramgen.monitors import JediMonitor, Unconstrained
from gramgen.testing import assert_consistent

PROJECT = Path(__file__).parent / "fixtures" / "lsp_project"
#: tokens past the 256 bytes: a few words, so that token healing has a token to take off
WORDS = [b"wh", b"white", b"radius", b"ou"]
VOCAB = gramgen.Vocabulary([bytes([b]) for b in range(256)] + WORDS + [b""], eos_token_ids=[256 + len(WORDS)])
EOS = VOCAB.eos_token_ids[0]


class ScriptedLM(SyntheticLM):
    """Greedy-readable logits: after the last ``after`` in the context, each rule
    (after, continuation, score) adds ``score`` to the token of the continuation's next
    byte (and a little more to a word token spelling its next bytes); other tokens are
    unlikely, a newline a little less so. ``delay`` seconds per scored context make it slow."""

    def __init__(self, rules, delay: float = 0.0):
        self.rules = rules
        self.delay = delay
        super().__init__(VOCAB, self._logits)

    def prompt_ids(self, text: str, chat: bool = False) -> list[int]:
        data, ids, i = text.encode("utf-8"), [], 0
        while i < len(data):
            word = max((w for w in WORDS if data.startswith(w, i)), key=len, default=None)
            ids.append(256 + WORDS.index(word) if word else data[i])
            i += len(word) if word else 1
        return ids

    def _logits(self, context) -> np.ndarray:
        if self.delay:
            time.sleep(self.delay)
        text = b"".join(VOCAB.tokens[t] for t in context).decode("utf-8", errors="replace")
        logits = np.full(VOCAB.size, -8.0)
        logits[ord("\n")] = -4.0
        for after, continuation, score in self.rules:
            at = text.rfind(after)
            if at < 0:
                continue
            tail = text[at + len(after):]
            if not continuation.startswith(tail) or len(tail) == len(continuation):
                continue
            rest = continuation[len(tail):].encode("utf-8")
            logits[rest[0]] = max(logits[rest[0]], 0) + score
            for i, word in enumerate(WORDS):
                if rest.startswith(word):
                    logits[256 + i] = max(logits[256 + i], 0) + score + 0.1 * len(word)
        return logits


def engine(rules, delay: float = 0.0, monitors=None, **options) -> CompletionEngine:
    lm = ScriptedLM(rules, delay)
    return CompletionEngine(ServerOptions(**{"timeout": 60.0, "max_new_tokens": 24, **options}),
                            loader=lambda: lm, monitors=monitors)


def run(eng: CompletionEngine, what: str, text: str, offset: int | None = None, job: Job | None = None,
        path: Path | None = None):
    job = job or Job(eng.options.timeout)
    request = Request(text, len(text) if offset is None else offset, path, PROJECT)
    eng.load()
    job.start()
    try:
        return getattr(eng, what)(request, job), job
    finally:
        job.finish()


MEMBERS = [(".", "radius(", 3.0), (".", "area(", 2.0), (".", "scale(", 1.0)]


def test_completion_candidates_are_the_greedy_names_of_the_best_first_tokens():
    """The best first token is the word 'radius'; 'r' spells a prefix of it (most often
    the same name) and is passed over; then 'a' and 's'."""
    names, job = run(engine(MEMBERS), "complete", "c = Circle()\nc.")
    assert [c.name for c in names] == ["radius", "area", "scale"]
    assert all(c.typed == "" for c in names)
    assert job.generations == 3
    # each generation stopped right after the name ended (one extra character)
    assert job.tokens == len(["radius", "("]) + len("area(") + len("scale(")
    names, _ = run(engine(MEMBERS, candidates=2), "complete", "c.")
    assert [c.name for c in names] == ["radius", "area"]
    # a first token that ends the name at once is no candidate
    names, _ = run(engine([(".", "(", 9.0)] + MEMBERS), "complete", "c.")
    assert [c.name for c in names] == ["radius", "area", "scale"]


def test_the_typed_part_is_healed_and_the_name_completes_it():
    eng = engine([("x.", "whitespace ", 2.0), ("x.", "wheel ", 1.0)])
    eng.load()
    prompt, head = eng._prompt(Request("y = x.wh", 8), "wh")
    assert head == "wh"   # the prompt's last token, taken off
    assert bytes(b"".join(VOCAB.tokens[t] for t in prompt)) == b"y = x."
    names, _ = run(eng, "complete", "y = x.wh")
    assert [c.name for c in names] == ["whitespace", "wheel"]
    assert all(c.typed == "wh" for c in names)
    # a typed part that is not one token is not healed, and still completed
    names, _ = run(engine([("x.whe", "el ", 1.0)]), "complete", "y = x.whe")
    assert [c.name for c in names] == ["wheel"]


def test_stop_guard_is_a_consistent_constraint():
    table = TokenTable(VOCAB)
    job = Job(60.0)
    guard = StopGuard(Unconstrained(VOCAB), table, job, lambda text: "(" in text, required=b"wh")
    assert_consistent(guard, steps=8, seed=1)
    mask = guard.mask()
    assert mask[256] and mask[257] and not mask[ord("w")] and not mask[EOS]   # 'wh', 'white'
    forced = StopGuard(Unconstrained(VOCAB), table, job, lambda text: False, required=b"wh",
                       forced=(256, ord("y")))
    assert_consistent(forced, steps=8, seed=2)
    assert np.flatnonzero(forced.mask()).tolist() == [256]
    job.cancel()
    assert np.flatnonzero(guard.mask()).tolist() == [EOS]
    assert guard.is_complete()


@pytest.mark.parametrize("text, expected, typed", [
    ("def mul(a, b):\n    return a", "a * b", "a"),                 # the rest of the line
    ("def mul(a, b):\n    return ", "a * b", ""),
    ("def mul(a, b):", "\n    return a * b", ""),                   # one line, after the break
    ("def mul(a, b):\n    ", "return a * b\n    # done", ""),        # a line start: lines up
])                                                                  # to an empty one
def test_inline_text_is_the_rest_of_the_line_or_a_few_lines(text, expected, typed):
    rules = [("def mul(a, b):", "\n    return a * b\n    # done\n\n    # not shown\n", 5.0)]
    inline, _ = run(engine(rules, inline_lines=3), "inline", text)
    assert inline.text == expected and inline.typed == typed


def test_inline_text_starts_with_the_typed_part():
    inline, _ = run(engine([("x.", "white = 1\nmore\n", 5.0)]), "inline", "x.wh")
    assert inline.text == "white = 1" and inline.typed == "wh"


def test_cancel_from_another_thread_stops_the_generation():
    eng = engine([("go:", "a" * 200, 5.0)], delay=0.02, max_new_tokens=200)
    job = Job(60.0)
    threading.Timer(0.3, job.cancel).start()
    started = time.perf_counter()
    inline, job = run(eng, "inline", "go:", job=job)
    assert inline is None and job.reason == "cancelled"
    assert 0 < job.tokens < 100
    assert time.perf_counter() - started < 2.0


def test_the_time_budget_returns_what_came_so_far():
    eng = engine([("go:", "b" * 200, 5.0)], delay=0.02, max_new_tokens=200, timeout=0.3)
    started = time.perf_counter()
    inline, job = run(eng, "inline", "go:")
    assert job.reason == "timeout"
    assert inline is not None and inline.text == "b" * job.tokens and 0 < job.tokens < 100
    assert time.perf_counter() - started < 2.0
    # a name cut by the deadline is not offered
    eng = engine([(".", "b" * 200 + "(", 5.0)], delay=0.02, max_new_tokens=200, timeout=0.3)
    names, job = run(eng, "complete", "c.")
    assert names == [] and job.reason == "timeout"


def test_a_job_cancelled_before_it_runs_generates_nothing():
    eng = engine(MEMBERS)
    job = Job(60.0)
    job.cancel("superseded")
    names, job = run(eng, "complete", "c.", job=job)
    assert names == [] and job.tokens == 0 and job.reason == "superseded"


def jedi(request: Request) -> list:
    return [JediMonitor(project=PROJECT, path=request.path)]


def test_the_jedi_monitor_reads_the_whole_document_while_the_model_sees_a_window():
    """The model prefers a member Circle does not have; the import that tells jedi what
    ``wheel`` is lies outside the model's 60-character window."""
    text = ("from shapes import Circle\n\nwheel = Circle(1.0)\n" + "x = 1\n" * 40 + "wheel.")
    rules = [("wheel.", "radius ", 5.0), ("wheel.", "girth_mm ", 1.0)]
    path = PROJECT / "window.py"
    names, job = run(engine(rules, context_chars=60), "complete", text, path=path)
    assert "radius" in [c.name for c in names]   # without the monitor: the hallucination
    names, job = run(engine(rules, context_chars=60, monitors=jedi), "complete", text, path=path)
    labels = [c.name for c in names]
    assert labels and labels[0] == "girth_mm"
    assert set(labels) <= {"girth_mm", "surface_mm2", "enlarge_by", "describe_shape"}
    assert job.monitor_stats.queries >= 1 and job.monitor_stats.failures == 0


def test_the_python_grammar_keeps_ghost_text_valid_and_falls_back_on_invalid_code():
    rules = [("(a, b", ")))):\n", 5.0), ("(a, b", "):\n    pass\n", 1.0)]
    inline, job = run(engine(rules), "inline", "def f(a, b")
    assert inline.text == "b)))):" and inline.typed == "b"
    inline, job = run(engine(rules, grammar="python"), "inline", "def f(a, b")
    assert inline.text.startswith("b):") and job.notes == []
    inline, job = run(engine(rules, grammar="python"), "inline", "def f(:\n\ndef f(a, b")
    assert inline.text == "b)))):"
    assert job.notes and "no grammar for this request" in job.notes[0] and "line 1" in job.notes[0]


def test_a_failed_load_raises_again_on_every_call():
    calls = []

    def loader():
        calls.append(1)
        raise OSError("disk on fire")

    eng = CompletionEngine(ServerOptions(), loader=loader)
    for _ in range(2):
        with pytest.raises(OSError, match="disk on fire"):
            eng.load()
    assert len(calls) == 1


@pytest.mark.parametrize("bad", [dict(grammar="java"), dict(max_new_tokens=0), dict(timeout=0),
                                 dict(candidates=True), dict(threads=0), dict(context_chars=-1)])
def test_bad_options_are_configuration_errors(bad):
    with pytest.raises(ConfigurationError):
        ServerOptions(**bad)


def test_the_command_refuses_bad_options_before_starting(capsys):
    assert cli.main(["lsp", "--timeout", "0"]) == 2
    assert "timeout must be a positive number" in capsys.readouterr().err


def test_a_typed_part_no_member_continues_gives_no_completion():
    text = "from shapes import Circle\nwheel = Circle(1.0)\nwheel.zz"
    rules = [("wheel.", "zztop ", 5.0)]
    names, _ = run(engine(rules), "complete", text, path=PROJECT / "zz.py")
    assert [c.name for c in names] == ["zztop"]
    names, job = run(engine(rules, monitors=jedi), "complete", text, path=PROJECT / "zz.py")
    assert names == [] and job.monitor_stats.fallbacks == 1


def test_jedi_sees_the_file_after_the_cursor_and_is_asked_once_per_trigger(monkeypatch):
    """A method defined below the one being written is a member too; while the user types
    on, the same trigger in the same file is not asked again."""
    before = "class Box:\n    def first(self):\n        return self."
    after = "\n\n    def later_method(self):\n        return 1\n"
    rules = [("self.", "later_method(", 5.0)]
    asked = []
    names_of = JediMonitor.names
    monkeypatch.setattr(JediMonitor, "names",
                        lambda self, trigger: asked.append(1) or names_of(self, trigger))
    only_before = engine(rules, monitors=jedi)
    names, _ = run(only_before, "complete", before + after, offset=len(before), path=PROJECT / "box.py")
    assert "later_method" not in [c.name for c in names]
    whole = engine(rules, monitors=lambda request: jedi_monitors(request))
    for typed in ("", "l", "la"):
        text = before + typed + after
        names, job = run(whole, "complete", text, offset=len(before + typed), path=PROJECT / "box2.py")
        assert [c.name for c in names][:1] == ["later_method"]
    assert len(asked) == 1 + 1   # one for the first engine, one for the three requests
