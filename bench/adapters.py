"""One small adapter per library, all exposing the same operations.

    prepare(hf_tokenizer)      -> vocab      (tokenizer preprocessing; timed separately)
    grammar_for(workload)      -> GrammarChoice (what this library runs for a workload)
    compile(choice)            -> compiled   (grammar text -> ready-to-match object)
    matcher(compiled)          -> matcher    (fresh state for one text)
    mask(matcher)                            (compute the full-vocabulary next-token bitmask)
    allowed(matcher, token)    -> bool       (read the bit of the last mask; not timed)
    advance(matcher, token)    -> bool       (False = token rejected)
    accepting(matcher)         -> bool

Every library fills an int32 bitmask of shape (1, ceil(V/32)) held by the matcher
wrapper, so the timed `mask` call does the same job everywhere.  The hot loop calls
`mask_callable(matcher)` (a pre-bound zero-argument callable) to keep Python overhead
identical and small.

Threading: xgrammar's GrammarCompiler gets max_threads=1; llguidance's single-matcher
mask call runs on the calling thread (its LLExecutor thread pool is not used);
RAYON_NUM_THREADS / OMP_NUM_THREADS are set to 1 by the worker before importing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


class Unsupported(Exception):
    """The library cannot run this workload (reason in the message)."""


@dataclass
class GrammarChoice:
    """What a library runs for a workload."""

    kind: str  # "lark" | "xgrammar-builtin-json" | "llguidance-json"
    description: str  # human-readable, goes into RESULTS.md
    source: str = ""  # grammar text (for "lark")
    start: str = "start"
    extra: dict = field(default_factory=dict)


def _bit(bitmask: np.ndarray, token: int) -> bool:
    return bool((int(bitmask[0, token >> 5]) >> (token & 31)) & 1)


def _with_start(choice: GrammarChoice) -> str:
    """Peers' Lark frontends need a `start` rule: add `start: <rule>` when the file uses
    another start symbol (e.g. Python's file_input)."""
    if choice.start == "start":
        return choice.source
    return f"start: {choice.start}\n" + choice.source


def _same_or_flattened(choice: GrammarChoice, error_of: Callable[[str], str]) -> GrammarChoice:
    """The same Lark file if the library takes it; else the file with its templates
    expanded by lark (bench.workloads.flatten_lark, untimed), noted in the description;
    else Unsupported is raised by compile with the original error."""
    err = error_of(_with_start(choice))
    if not err:
        return choice
    from .workloads import flatten_lark

    try:
        flat = flatten_lark(choice.source, choice.start)
    except Exception as e:  # noqa: BLE001
        choice.description += f" (rejected: {err}; lark could not expand it: {e})"
        return choice
    err2 = error_of(flat)
    if err2:
        choice.description += f" (rejected: {err}; template-expanded version rejected too: {err2})"
        return choice
    return GrammarChoice(
        "lark",
        choice.description.replace(" (same file as gramgen)", "")
        + f", templates expanded by bench with lark (same language; {flat.count(chr(10))} "
        f"rules/terminals; expansion time not counted) because the original was rejected: {err}",
        flat,
        "start",
    )


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class Matcher:
    """Per-text state: the library's matcher plus the bitmask buffer it fills."""

    __slots__ = ("m", "bitmask", "extra")

    def __init__(self, m: Any, vocab_size: int, extra: Any = None):
        self.m = m
        # -1 everywhere = "all allowed": a library that forgets a word shows up as accepting
        # too much, never as a stale rejection.
        self.bitmask = np.full((1, (vocab_size + 31) // 32), -1, dtype=np.int32)
        self.extra = extra


class Adapter:
    name = "?"

    def __init__(self) -> None:
        self.vocab: Any = None
        self.vocab_size = 0

    # -- lifecycle --------------------------------------------------------------------
    modules: tuple[str, ...] = ()

    def load(self) -> None:
        """Import the library (timed apart from tokenizer preprocessing and compile)."""
        for mod in self.modules:
            importlib.import_module(mod)

    def version(self) -> str:
        raise NotImplementedError

    def prepare(self, hf_tokenizer: Any) -> Any:
        raise NotImplementedError

    def grammar_for(self, workload: Any) -> GrammarChoice:
        raise NotImplementedError

    def compile(self, choice: GrammarChoice) -> Any:
        raise NotImplementedError

    def matcher(self, compiled: Any) -> Matcher:
        raise NotImplementedError

    # -- per step ---------------------------------------------------------------------
    def mask(self, matcher: Matcher) -> None:
        raise NotImplementedError

    def mask_callable(self, matcher: Matcher) -> Callable[[], Any]:
        return lambda: self.mask(matcher)

    def allowed(self, matcher: Matcher, token: int) -> bool:
        return _bit(matcher.bitmask, token)

    def advance(self, matcher: Matcher, token: int) -> bool:
        raise NotImplementedError

    def accepting(self, matcher: Matcher) -> bool:
        raise NotImplementedError

    def compiled_size_bytes(self, compiled: Any) -> int | None:
        return None


# --------------------------------------------------------------------------------------
class XGrammarAdapter(Adapter):
    name = "xgrammar"
    modules = ("xgrammar",)

    def version(self) -> str:
        return _version("xgrammar")

    def prepare(self, hf_tokenizer: Any) -> Any:
        import xgrammar as xgr

        self.vocab = xgr.TokenizerInfo.from_huggingface(hf_tokenizer)
        self.vocab_size = self.vocab.vocab_size
        # Single-threaded compilation, and no cache so repeated compiles are real compiles.
        self._compiler = xgr.GrammarCompiler(self.vocab, max_threads=1, cache_enabled=False)
        return self.vocab

    def grammar_for(self, workload: Any) -> GrammarChoice:
        if workload.name == "json":
            return GrammarChoice(
                "xgrammar-builtin-json",
                "xgrammar builtin JSON grammar (GrammarCompiler.compile_builtin_json_grammar)",
            )
        # Other workloads: the same Lark file, if xgrammar's Lark frontend accepts it.
        choice = GrammarChoice(
            "lark",
            f"{workload.grammar_path} via GrammarCompiler.compile_lark",
            workload.grammar_text,
            workload.start,
        )
        return _same_or_flattened(choice, self._lark_error)

    def _lark_error(self, text: str) -> str:
        try:
            self._compiler.compile_lark(text)
        except Exception as e:  # noqa: BLE001
            return str(e).splitlines()[0][:300]
        return ""

    def compile(self, choice: GrammarChoice) -> Any:
        if choice.kind == "xgrammar-builtin-json":
            return self._compiler.compile_builtin_json_grammar()
        if choice.kind == "lark":
            try:
                return self._compiler.compile_lark(_with_start(choice))
            except Exception as e:  # xgrammar raises RuntimeError/ValueError on unsupported syntax
                raise Unsupported(f"xgrammar compile_lark: {str(e).splitlines()[0][:300]}") from e
        raise Unsupported(choice.kind)

    def matcher(self, compiled: Any) -> Matcher:
        import xgrammar as xgr

        return Matcher(xgr.GrammarMatcher(compiled), self.vocab_size)

    def mask(self, matcher: Matcher) -> None:
        matcher.m.fill_next_token_bitmask(matcher.bitmask)

    def mask_callable(self, matcher: Matcher) -> Callable[[], Any]:
        fill, bm = matcher.m.fill_next_token_bitmask, matcher.bitmask
        return lambda: fill(bm)

    def advance(self, matcher: Matcher, token: int) -> bool:
        return bool(matcher.m.accept_token(token))

    def accepting(self, matcher: Matcher) -> bool:
        # is_completed: the root rule is fully matched (is_terminated would need EOS).
        return bool(matcher.m.is_completed())

    def compiled_size_bytes(self, compiled: Any) -> int | None:
        return int(compiled.memory_size_bytes)  # a property in 0.2.x, not a method


# --------------------------------------------------------------------------------------
LLG_JSON = (
    'start: %json { "x-guidance": {"whitespace_flexible": true, '
    '"json_allow_general_unicode_escapes": true} }'
)


class LLGuidanceAdapter(Adapter):
    """llguidance has no separate compiled-grammar object: constructing an LLMatcher
    parses and compiles the grammar (its lexer automaton is then built lazily while
    masks are computed).  `compile` builds a pristine LLMatcher; `matcher` deep-copies
    it (the official cheap way to start another sequence on the same grammar)."""

    name = "llguidance"
    modules = ("llguidance", "llguidance.hf", "llguidance.numpy")

    def __init__(self, json_mode: str = "auto") -> None:
        super().__init__()
        self.json_mode = json_mode  # "auto" | "lark" | "builtin"

    def version(self) -> str:
        return _version("llguidance")

    def prepare(self, hf_tokenizer: Any) -> Any:
        import llguidance.hf

        self.vocab = llguidance.hf.from_tokenizer(hf_tokenizer)
        self.vocab_size = self.vocab.vocab_size
        return self.vocab

    def _lark_error(self, text: str) -> str:
        import llguidance as llg

        m = llg.LLMatcher(self.vocab, llg.LLMatcher.grammar_from_lark(text), log_level=0)
        return m.get_error().splitlines()[0][:300] if m.is_error() else ""

    def grammar_for(self, workload: Any) -> GrammarChoice:
        lark = GrammarChoice(
            "lark",
            f"{workload.grammar_path} (same file as gramgen) in llguidance's Lark dialect",
            workload.grammar_text,
            workload.start,
        )
        if workload.name != "json" or self.json_mode == "lark":
            return _same_or_flattened(lark, self._lark_error)
        builtin = GrammarChoice(
            "llguidance-json",
            "llguidance builtin JSON (`%json {}`, whitespace_flexible, "
            "json_allow_general_unicode_escapes)",
            LLG_JSON,
        )
        if self.json_mode == "builtin":
            return builtin
        # auto: the same Lark file as gramgen if llguidance's dialect takes it
        if workload.grammar_text:
            err = self._lark_error(_with_start(lark))
            if not err:
                return lark
            builtin.description += (
                f"; {workload.grammar_path} was rejected: {err.splitlines()[0][:200]}"
            )
        return builtin

    def compile(self, choice: GrammarChoice) -> Any:
        import llguidance as llg

        m = llg.LLMatcher(self.vocab, llg.LLMatcher.grammar_from_lark(_with_start(choice)), log_level=0)
        if m.is_error():
            raise Unsupported(f"llguidance: {m.get_error().splitlines()[0][:300]}")
        return m

    def matcher(self, compiled: Any) -> Matcher:
        return Matcher(compiled.deep_copy(), self.vocab_size)

    def mask(self, matcher: Matcher) -> None:
        import llguidance.numpy

        llguidance.numpy.fill_next_token_bitmask(matcher.m, matcher.bitmask, 0)

    def mask_callable(self, matcher: Matcher) -> Callable[[], Any]:
        from llguidance.numpy import fill_next_token_bitmask

        m, bm = matcher.m, matcher.bitmask
        return lambda: fill_next_token_bitmask(m, bm, 0)

    def advance(self, matcher: Matcher, token: int) -> bool:
        return bool(matcher.m.consume_token(token))

    def accepting(self, matcher: Matcher) -> bool:
        return bool(matcher.m.is_accepting()) and not matcher.m.is_error()


# --------------------------------------------------------------------------------------
class GramgenAdapter(Adapter):
    """gramgen: Vocabulary.from_huggingface, Grammar.from_lark + compile, and
    Matcher.fill_bitmask (the packed-bitmask path, same output as the peers)."""

    name = "gramgen"
    modules = ("gramgen",)

    def version(self) -> str:
        import gramgen

        v = getattr(gramgen, "__version__", None)
        return str(v) if v else _version("gramgen")

    def prepare(self, hf_tokenizer: Any) -> Any:
        import gramgen

        from gramgen.automata.token_table import token_table_for

        self.vocab = gramgen.Vocabulary.from_huggingface(hf_tokenizer)
        # the byte-sorted token table is per vocabulary, shared by every grammar compiled
        # for it (like xgrammar's TokenizerInfo): tokenizer preprocessing, not compile
        token_table_for(self.vocab)
        self.vocab_size = self.vocab.size
        self._rejected = getattr(gramgen, "TokenRejected", None) or ValueError
        return self.vocab

    def grammar_for(self, workload: Any) -> GrammarChoice:
        return GrammarChoice(
            "lark",
            f"{workload.grammar_path} (gramgen.Grammar.from_lark)",
            workload.grammar_text,
            workload.start,
        )

    def compile(self, choice: GrammarChoice) -> Any:
        import gramgen

        if choice.kind != "lark":
            raise Unsupported(choice.kind)
        g = gramgen.Grammar.from_lark(choice.source, start=choice.start)
        return gramgen.compile(g, self.vocab)

    def matcher(self, compiled: Any) -> Matcher:
        return Matcher(compiled.matcher(), self.vocab_size)

    def mask(self, matcher: Matcher) -> None:
        matcher.m.fill_bitmask(matcher.bitmask, row=0)

    def mask_callable(self, matcher: Matcher) -> Callable[[], Any]:
        fill, bm = matcher.m.fill_bitmask, matcher.bitmask
        return lambda: fill(bm, row=0)

    def advance(self, matcher: Matcher, token: int) -> bool:
        try:
            matcher.m.advance(token)
        except self._rejected:
            return False
        return True

    def accepting(self, matcher: Matcher) -> bool:
        return bool(matcher.m.is_accepting())


ADAPTERS: dict[str, Callable[..., Adapter]] = {
    "gramgen": GramgenAdapter,
    "xgrammar": XGrammarAdapter,
    "llguidance": LLGuidanceAdapter,
}


def make_adapter(name: str, options: dict | None = None) -> Adapter:
    options = options or {}
    if name == "llguidance":
        return LLGuidanceAdapter(json_mode=options.get("llg_json", "auto"))
    try:
        return ADAPTERS[name]()
    except KeyError:
        raise SystemExit(f"unknown library {name!r}; known: {', '.join(ADAPTERS)}")
