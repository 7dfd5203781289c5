"""JediMonitor on a repository written for it (tests/fixtures/monitor_repo): what jedi names at
each trigger, what it does not, and generation with it (an adversarial model that prefers
misspelled names writes real ones). One warm monitor is shared by the module: jedi's first
query loads its stubs (a second or two)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from test_monitors import PIECES, code_vocab, encode, preferring

import gramgen
from gramgen import ConfigurationError
from gramgen.monitors import JediMonitor, Trigger, Unconstrained

REPO = Path(__file__).resolve().parent / "fixtures" / "monitor_repo"


@pytest.fixture(scope="module")
def jedi_monitor():
    monitor = JediMonitor(project=REPO, path=REPO / "main.py", timeout=60)
    monitor.warm()
    return monitor


def names_at(monitor, text: str):
    """The names the monitor gives at the trigger ``text`` ends with (it must end with one)."""
    scanner = monitor.scanner()
    kinds = [scanner.feed(c) for c in text]
    assert kinds[-1] is not None, f"no trigger at the end of {text!r}"
    return monitor.names(Trigger(kinds[-1], text))


CIRCLE = "from shapes import Circle\nc = Circle(2.0)\n"


def test_member_access_on_an_instance_includes_inherited_members(jedi_monitor):
    names = names_at(jedi_monitor, CIRCLE + "c.")
    assert {"radius", "area", "scale", "describe"} <= names
    assert not {"side", "perimeter", "norm", "known"} & names       # other classes' members
    assert "if" not in names and "radius=" not in names               # no keywords, no params


def test_member_access_on_a_module_a_class_and_a_method_chain(jedi_monitor):
    assert {"Circle", "Square", "UNIT", "make_circle", "math"} <= names_at(jedi_monitor, "import shapes\nshapes.")
    assert {"area", "scale", "describe"} <= names_at(jedi_monitor, CIRCLE + "Circle.")
    chained = names_at(jedi_monitor, CIRCLE + "c.scale(2).scale(3).")  # return annotation "Circle"
    assert {"radius", "area"} <= chained and "side" not in chained
    assert {"x", "y", "norm"} <= names_at(jedi_monitor, "from geometry.vectors import Vector\nVector(1, 2).")
    assert {"upper", "join"} <= names_at(jedi_monitor, "'abc'.")


def test_unknown_types_give_no_names(jedi_monitor):
    assert names_at(jedi_monitor, "from shapes import untyped\nx = untyped(1)\nx.") is None
    assert names_at(jedi_monitor, "import not_a_module_anywhere\nnot_a_module_anywhere.") is None
    assert names_at(jedi_monitor, "y = undefined_name\ny.") is None


def test_imports(jedi_monitor):
    assert {"Circle", "Square", "UNIT", "make_circle"} <= names_at(jedi_monitor, "from shapes import ")
    more = names_at(jedi_monitor, "from shapes import (Circle,")
    assert {"Square", "UNIT"} <= more and "Circle" not in more         # jedi leaves out what is imported
    assert {"vectors", "transforms"} <= names_at(jedi_monitor, "import geometry.")
    assert {"vectors", "transforms"} <= names_at(jedi_monitor, "from geometry.")
    assert {"path"} <= names_at(jedi_monitor, "import os.")


def test_keyword_arguments(jedi_monitor):
    assert names_at(jedi_monitor, "from shapes import make_circle\nmake_circle(1.0,") == {"radius", "label"}
    assert names_at(jedi_monitor, CIRCLE + "Circle(") == {"radius"}
    assert names_at(jedi_monitor, CIRCLE + "c.scale(") == {"k"}
    assert names_at(jedi_monitor, "from shapes import configure\nconfigure(") is None      # **options
    assert names_at(jedi_monitor, "undefined_function(") is None


def test_the_project_root_is_what_finds_the_repository(tmp_path):
    elsewhere = JediMonitor(project=tmp_path, timeout=60)
    assert names_at(elsewhere, "from shapes import ") is None


def test_strict_false_leaves_dynamic_objects_and_self_free(jedi_monitor):
    loose = JediMonitor(project=REPO, path=REPO / "main.py", timeout=60, strict=False)
    dynamic = "from shapes import Dynamic\nd = Dynamic()\nd."
    assert "known" in names_at(jedi_monitor, dynamic)
    assert names_at(loose, dynamic) is None
    method = "class A:\n    def __init__(self):\n        self.size = 1\n\n    def grow(self):\n        self."
    assert "size" in names_at(jedi_monitor, method)
    assert names_at(loose, method) is None
    assert {"radius", "area"} <= names_at(loose, CIRCLE + "c.")


def test_complete_lists_what_an_editor_would_show(jedi_monitor):
    assert jedi_monitor.complete("import shapes\nshapes.Ci") == ["Circle"]
    public = jedi_monitor.complete(CIRCLE + "c.")
    assert {"radius", "area", "scale", "describe"} <= set(public)
    assert not [n for n in public if n.startswith("_")]               # private names only after "_"
    assert "__init__" in jedi_monitor.complete(CIRCLE + "c.__")
    assert jedi_monitor.complete("y = undefined_name\ny.") is None


def test_configuration_errors():
    with pytest.raises(ConfigurationError, match="unknown trigger kind 'attribute'.*member, import, keyword"):
        JediMonitor(triggers=["member", "attribute"])
    with pytest.raises(ConfigurationError, match="timeout"):
        JediMonitor(timeout=0)
    with pytest.raises(ConfigurationError, match="directory"):
        JediMonitor(project=REPO / "shapes.py")
    with pytest.raises(ConfigurationError, match="strict"):
        JediMonitor(strict="yes")


def test_only_the_configured_triggers_fire(jedi_monitor):
    only_members = JediMonitor(project=REPO, timeout=60, triggers=["member"])
    scanner = only_members.scanner()
    fired = [k.name for k in map(scanner.feed, "from shapes import Circle\nCircle(2.0).area") if k]
    assert fired == ["member"]


# -- generation --------------------------------------------------------------------------------

VOCAB_PIECES = PIECES + ["Circel", " Circel", " Circle", "radious=", "radius=", "2", "radius", " ="]


@pytest.fixture(scope="module")
def vocab():
    return code_vocab(list(dict.fromkeys(VOCAB_PIECES)))


def _adversarial(text: str) -> dict[str, float]:
    if text.endswith("."):
        return {"radious": 10.0, "rad": 4.0}
    if text.endswith("import"):
        return {" Circel": 10.0, " ": 3.0}
    if text.endswith("import "):
        return {"Circel": 10.0, "C": 3.0}
    if text.endswith("("):
        return {"radious=": 10.0, "radius=": 2.0}
    return {".radious": 10.0, ".": 5.0}


@pytest.mark.parametrize("document, wrong, right", [
    (CIRCLE + "c", ".radious", ".radius"),                             # member access
    (CIRCLE + 'print(f"{c', ".radious", ".radius"),                    # in an f-string's field
    ("from shapes import", " Circel", " Circle"),                      # from-import names
    (CIRCLE + "Circle(", "radious=", "radius="),                       # keyword argument
])
def test_an_adversarial_model_writes_real_names_with_the_monitor(jedi_monitor, vocab, document, wrong, right):
    lm = preferring(vocab, _adversarial, eos_after=("radius", "radious", "Circle", "Circel", "="))
    prompt = encode(vocab, document)
    plain = gramgen.generate(lm, prompt, constraint=Unconstrained(vocab), max_new_tokens=8)
    assert plain.text == wrong
    out = gramgen.generate(lm, prompt, monitors=[jedi_monitor], max_new_tokens=8)
    assert out.text == right
    assert out.stats.monitor_triggers >= 1 and out.stats.monitor_failures == 0


@pytest.mark.parametrize("space", [" =", "\n", " ", "\t"])
def test_a_spaced_keyword_argument_is_checked(jedi_monitor, vocab, space):
    """``radious = 1`` (whitespace, newlines too, before ``=``) is a keyword argument: the
    monitor refuses ``=`` after the wrong name, and lets it follow the right one."""
    def spaced(text):
        if text.endswith("("):
            return {"radious": 10.0}
        if text.endswith(("radious", "radius")):
            return {space: 10.0}
        if text.endswith(space) and space != " =":
            return {"=": 10.0, " =": 9.0}
        return {"1": 10.0}

    lm = preferring(vocab, spaced, eos_after=("1",))
    prompt = encode(vocab, CIRCLE + "Circle(")
    plain = gramgen.generate(lm, prompt, constraint=Unconstrained(vocab), max_new_tokens=6)
    assert plain.text.replace(" ", "").replace("\n", "").replace("\t", "") == "radious=1"
    out = gramgen.generate(lm, prompt, monitors=[jedi_monitor], max_new_tokens=6)
    assert out.text.startswith("radious") and "=" not in out.text, out.text
    right = gramgen.generate(lm, encode(vocab, CIRCLE + "Circle(radius"), monitors=[jedi_monitor],
                             max_new_tokens=6)
    assert right.text == plain.text[len("radious"):]


def test_one_query_per_trigger(jedi_monitor, vocab):
    """``radius`` written as r-a-d-i-u-s: one trigger, one query, however many tokens."""
    lm = preferring(vocab, lambda text: {"r": 9.0, "a": 8.0, "d": 7.0, "i": 6.0, "u": 5.0, "s": 4.0},
                    eos_after=("radius",))
    monitor = JediMonitor(project=REPO, path=REPO / "main.py", timeout=60)   # a cold cache
    out = gramgen.generate(lm, encode(vocab, CIRCLE + "c = c.scale(2)\nc."), monitors=[monitor],
                           max_new_tokens=10)
    assert out.text == "radius" and len(out.tokens) == 6
    assert out.stats.monitor_queries == 1 and out.stats.monitor_triggers == 1
    assert 0 < out.stats.monitor_query_seconds < 30


def test_unknown_type_equals_plain_decoding(jedi_monitor, vocab):
    prompt = encode(vocab, "from shapes import untyped\nx = untyped(1)\nx")
    for seed in range(3):
        lm = gramgen.generation.SyntheticLM.hashed(vocab, seed=seed, scale=3.0)
        plain = gramgen.generate(lm, prompt, constraint=Unconstrained(vocab), max_new_tokens=10)
        out = gramgen.generate(lm, prompt, monitors=[JediMonitor(project=REPO, timeout=60, lookahead=True)],
                               max_new_tokens=10)
        assert out.tokens == plain.tokens


def test_a_timeout_or_a_jedi_error_restricts_nothing_and_says_so(vocab, monkeypatch):
    lm = preferring(vocab, _adversarial)
    prompt = encode(vocab, CIRCLE + "c")
    slow = JediMonitor(project=REPO, timeout=0.05)
    monkeypatch.setattr(slow, "_names", lambda trigger: time.sleep(0.5))
    out = gramgen.generate(lm, prompt, monitors=[slow], max_new_tokens=8)
    assert out.text == ".radious"
    assert out.stats.monitor_failures == 1 and out.stats.monitor_queries == 1

    broken = JediMonitor(project=REPO, timeout=60)

    def fail(text):
        raise ValueError("jedi could not parse this")

    monkeypatch.setattr(broken, "script", fail)
    out = gramgen.generate(lm, prompt, monitors=[broken], max_new_tokens=8)
    assert out.text == ".radious" and out.stats.monitor_failures == 1


def test_every_sampler_with_jedi(jedi_monitor, vocab):
    lm = preferring(vocab, _adversarial)
    prompt = encode(vocab, CIRCLE + "c")
    for sampler in ("constrained", "awrs", "smc"):
        out = gramgen.generate(lm, prompt, monitors=[jedi_monitor], max_new_tokens=8, sampler=sampler,
                               temperature=1.0 if sampler == "constrained" else 0.0, seed=1)
        assert out.text.startswith(".r") and out.text[1:] in {"radius", "rad"} | {"radius"}, (sampler, out.text)
    assert np.isfinite(out.logprob)
