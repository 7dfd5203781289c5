"""``gramgen.__all__`` and the public surface written down in design/api.md agree.

Every ``gramgen.<Name>`` of sections 1-6 of api.md (and the bare error names of section 5)
must be exported; a name of section 7 ("Next surfaces") only once it exists. Everything
exported must be documented there or be one of the few extras listed below.
"""

from __future__ import annotations

import importlib.util
import re
import types

import gramgen
from conftest import require_shared

#: exported on purpose although api.md does not name them as ``gramgen.<Name>``
EXTRA_EXPORTS = {
    "__version__": "the package version, as every package has",
    "CompiledGrammar": "api.md §3 names it as the type compile() returns, for annotations",
    "Matcher": "api.md §3 names it as the type cg.matcher() returns, for annotations",
    "GenerationResult": "the type generate() returns (api.md §4 lists its fields)",
    "GenerationStats": "the type of out.stats (api.md §7: forward passes, drafted, accepted)",
    "allocate_token_bitmask": "the int32 [batch, ceil(V/32)] array Matcher.fill_bitmask writes into",
    "ASAp": "the ASAp sampler's state, kept across generate() calls (design/02-asap.md)",
    "UnknownKeywordWarning": "the warning for a JSON Schema keyword gramgen does not know "
                             "(api.md §7: unknown_keywords='warn'), to filter or escalate it",
    "ConfigurationError": "errors.py: the GramgenError that is also a ValueError, for bad arguments",
    "CompileOptions": "the typed options of compile() (style.md: options documented once)",
    "testing": "gramgen.testing: self-checks for users' grammars and constraints (style.md)",
    "Document": "the matcher state after a text being edited (code completion continues a "
                "half-written file, issue 22: advance only over what changed)",
    "TextRejected": "the error for a document start no word of the grammar continues "
                    "(generate(prefix=...), Document.update), with its line and column",
    "InfillResult": "the type Infiller.check returns (api.md §7: r.feasible, r.witness)",
    "FillResult": "the type fill() returns (text, fillings, value, stats)",
    "generate_diffusion": "masked-diffusion decoding under a grammar (issue 23, the entry point "
                          "of api.md's CFG infilling for diffusion LMs)",
    "DiffusionResult": "the type generate_diffusion() returns (text, tokens, value, stats)",
}

#: mentioned in sections 1-6 but introduced by section 7 as not built yet: section 4 writes
#: ``speculative=gramgen.Speculation(...)`` ahead of the Speculation section 7 defines
PLANNED_IN_EARLIER_SECTIONS = {"Speculation"}

_SECTION = re.compile(r"^## (\d+)\.\s*(.*)$", re.MULTILINE)
_QUALIFIED = re.compile(r"\bgramgen\.([A-Za-z_]\w*)")
_BARE_IN_BACKTICKS = re.compile(r"`([A-Z]\w*)`")


def documented_names(api_md: str) -> tuple[set[str], set[str]]:
    """(names sections 1-6 document, names section 7 plans): every ``gramgen.<Name>``, and
    in the errors section also the bare ``Name`` in backticks (it writes ``GrammarError``
    for ``gramgen.GrammarError``). Names of gramgen's submodules (``gramgen.monitors``)
    are module paths, not exports, and are left out."""
    built: set[str] = set()
    planned: set[str] = set()
    heads = list(_SECTION.finditer(api_md))
    if not heads:
        raise ValueError("no '## N. Title' sections in api.md")
    for head, nxt in zip(heads, heads[1:] + [None]):
        number, title = int(head.group(1)), head.group(2).strip()
        body = api_md[head.end(): nxt.start() if nxt else len(api_md)]
        names = set(_QUALIFIED.findall(body))
        if title.lower().startswith("error"):
            names |= set(_BARE_IN_BACKTICKS.findall(body))
        (built if number <= 6 else planned).update(names)
    submodules = {n for n in built | planned if _is_submodule(n)}
    return built - submodules, planned - submodules


def _is_submodule(name: str) -> bool:
    return importlib.util.find_spec(f"gramgen.{name}") is not None if name.islower() else False


def export_problems(api_md: str, exported: list[str], module: types.ModuleType,
                    extras: dict[str, str] = EXTRA_EXPORTS,
                    planned_early: set[str] = PLANNED_IN_EARLIER_SECTIONS) -> list[str]:
    """Every disagreement between api.md, ``exported`` (an ``__all__``) and ``module``."""
    problems: list[str] = []
    built, planned = documented_names(api_md)
    for name in sorted(planned_early - planned):
        problems.append(f"{name} is listed as planned but section 7 does not name it")
    required = built - planned_early
    planned |= built & planned_early
    seen: set[str] = set()
    for name in exported:
        if name in seen:
            problems.append(f"{name} is in __all__ twice")
        seen.add(name)
        if not hasattr(module, name):
            problems.append(f"{name} is in __all__ but is not an attribute of the package")
        if name not in built | planned and name not in extras:
            problems.append(f"{name} is exported but neither api.md nor the allow-list names it")
    for name in sorted(required):
        if name not in seen:
            problems.append(f"api.md documents gramgen.{name} but __all__ lacks it")
        if not hasattr(module, name):
            problems.append(f"api.md documents gramgen.{name} but the package has no such attribute")
    for name in sorted(planned - required):
        if hasattr(module, name) and not isinstance(getattr(module, name), types.ModuleType) and name not in seen:
            problems.append(f"gramgen.{name} (api.md §7) exists now but __all__ lacks it")
    return problems


def api_text() -> str:
    return (require_shared() / "design" / "api.md").read_text(encoding="utf-8")


def test_all_matches_api_md():
    problems = export_problems(api_text(), list(gramgen.__all__), gramgen)
    assert not problems, "\n".join(problems)


def test_api_md_is_parsed():
    """The parser finds what api.md plainly documents (a parser that finds nothing passes
    the test above vacuously)."""
    built, planned = documented_names(api_text())
    assert {"Vocabulary", "Grammar", "compile", "load_model", "Model", "generate",
            "LogitsProcessor", "GramgenError", "GrammarError", "SchemaError", "TokenizerError",
            "TokenRejected", "CompileLimitError"} <= built
    assert {"Speculation", "Infiller", "Hole", "fill"} <= planned
    assert "monitors" not in planned  # `from gramgen.monitors import ...` is a module path


def test_all_has_no_duplicates_and_every_entry_exists():
    assert len(gramgen.__all__) == len(set(gramgen.__all__))
    assert [n for n in gramgen.__all__ if not hasattr(gramgen, n)] == []


FAKE_API = """\
# The public surface
## 1. Vocabulary
```python
v = gramgen.Vocabulary(tokens)
```
## 3. Compile
```python
cg = gramgen.compile(g, v)
```
## 5. Errors
All errors derive from `gramgen.GramgenError`: `GrammarError` (with line), `TokenRejected`.
## 7. Next surfaces
```python
gramgen.Hole(); gramgen.Later()
from gramgen.monitors import JediMonitor
```
"""


def fake_module(**attrs) -> types.ModuleType:
    module = types.ModuleType("fake")
    module.__dict__.update(attrs)
    return module


def test_export_problems_on_a_made_up_api():
    names = ["Vocabulary", "compile", "GramgenError", "GrammarError", "TokenRejected"]
    module = fake_module(**{n: object() for n in names}, Hole=object())
    assert export_problems(FAKE_API, names + ["Hole"], module, extras={}, planned_early=set()) == []
    assert export_problems(FAKE_API, names + ["Hole"], module, extras={}, planned_early={"Nowhere"}) == [
        "Nowhere is listed as planned but section 7 does not name it"]

    # a documented name (a bare error of section 5) missing from __all__
    assert export_problems(FAKE_API, [n for n in names if n != "GrammarError"] + ["Hole"], module,
                           extras={}, planned_early=set()) == [
        "api.md documents gramgen.GrammarError but __all__ lacks it"]
    # documented and exported, but no such attribute
    lacking = fake_module(**{n: object() for n in names if n != "compile"})
    assert export_problems(FAKE_API, names, lacking, extras={}, planned_early=set()) == [
        "compile is in __all__ but is not an attribute of the package",
        "api.md documents gramgen.compile but the package has no such attribute"]
    # a planned name that exists must be exported; one that does not exist need not be
    assert export_problems(FAKE_API, names, module, extras={}, planned_early=set()) == [
        "gramgen.Hole (api.md §7) exists now but __all__ lacks it"]
    # an undocumented export needs the allow-list; a duplicate is reported
    module.Secret = object()
    assert export_problems(FAKE_API, names + ["Hole", "Secret", "compile"], module,
                           extras={}, planned_early=set()) == [
        "Secret is exported but neither api.md nor the allow-list names it",
        "compile is in __all__ twice"]
    assert export_problems(FAKE_API, names + ["Hole", "Secret"], module,
                           extras={"Secret": "why"}, planned_early=set()) == []
