"""One small adapter per library, all exposing the same operations.

    prepare(hf_tokenizer, path) -> vocab       (tokenizer preprocessing; timed separately)
    grammar_for(case, workload) -> GrammarChoice (what this library runs for a case)
    compile(choice)            -> compiled     (grammar/schema text -> ready-to-match object)
    matcher(compiled)          -> Matcher      (fresh state for one text)
    mask(matcher)                              (compute the full-vocabulary next-token mask)
    allowed(matcher, token)    -> bool         (read the bit of the last mask; not timed)
    advance(matcher, token)    -> bool         (False = token rejected)
    accepting(matcher)         -> bool

Every library but transformers-cfg fills an int32 bitmask of shape (1, ceil(V/32)) held by
the Matcher wrapper, so the timed `mask` call does the same job everywhere; transformers-cfg
only produces a boolean torch vector (its own format, timed as is; `after_mask` packs it
into the bitmask afterwards, untimed, for the mask comparisons).  The hot loop calls
`mask_callable(matcher)` (a pre-bound zero-argument callable) to keep Python overhead
identical and small.

`grammar_for` raises NotApplicable when a library has no frontend for a case's kind (e.g.
transformers-cfg and JSON Schema): reported as "n/a", not as a failure.  `compile` raises
CompileFailed when the library rejects a grammar or schema: counted in compile success %.

Threading: xgrammar's GrammarCompiler gets max_threads=1; llguidance's single-matcher
mask call runs on the calling thread (its LLExecutor thread pool is not used);
RAYON_NUM_THREADS / OMP_NUM_THREADS are set to 1 by the worker before importing.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

#: whitespace the JSON Schema compilers allow between tokens (policy: flexible everywhere)
JSON_WS = r"[ \t\n\r]*"


class NotApplicable(Exception):
    """The library has no frontend for this kind of case (reason in the message)."""


class CompileFailed(Exception):
    """The library rejected this grammar or schema (its message)."""



@dataclass
class GrammarChoice:
    """What a library runs for a case."""

    kind: str  # lark | gbnf | jsonschema | xgrammar-builtin-json | llguidance-json | regex
    description: str  # human-readable, goes into RESULTS.md
    source: str = ""  # grammar text or schema JSON text
    start: str = "start"
    extra: dict = field(default_factory=dict)


def _bit(bitmask: np.ndarray, token: int) -> bool:
    return bool((int(bitmask[0, token >> 5]) >> (token & 31)) & 1)


def _first_line(e: BaseException | str, n: int = 300) -> str:
    s = str(e).strip()
    return (s.splitlines()[0] if s else type(e).__name__)[:n]


def _with_start(choice: GrammarChoice) -> str:
    """Peers' Lark frontends need a `start` rule: add `start: <rule>` when the file uses
    another start symbol (e.g. Python's file_input)."""
    if choice.start == "start":
        return choice.source
    return f"start: {choice.start}\n" + choice.source


def _same_or_flattened(choice: GrammarChoice, error_of: Callable[[str], str]) -> GrammarChoice:
    """The same Lark file if the library takes it; else the file with its templates
    expanded by lark (bench.workloads.flatten_lark, untimed), noted in the description;
    else the original, which compile then rejects with the library's error."""
    err = error_of(_with_start(choice))
    if not err:
        return choice
    from .workloads import flatten_lark

    try:
        flat = flatten_lark(choice.source, choice.start)
    except Exception as e:  # noqa: BLE001
        choice.description += f" (rejected: {err}; lark could not expand it: {_first_line(e, 200)})"
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


def gpt2_byte_table() -> dict[int, str]:
    """GPT-2's byte-level BPE alphabet: printable Latin-1 bytes stand for themselves, the
    other bytes are shifted to code points 256 and up, in byte order."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def byte_level_token_bytes(hf_tokenizer: Any) -> tuple[dict[int, bytes], set[int]]:
    """{token id: bytes} of a byte-level BPE tokenizer from its vocabulary strings (GPT-2's
    byte-to-unicode table inverted), independent of gramgen's own decoding; added tokens
    that are not special map to their UTF-8 text.  Also the special token ids (left out)."""
    dec = {c: b for b, c in gpt2_byte_table().items()}
    special = set(hf_tokenizer.all_special_ids)
    added = {tok.content if hasattr(tok, "content") else str(tok): i
             for i, tok in getattr(hf_tokenizer, "added_tokens_decoder", {}).items()}
    added_ids = set(added.values())
    out: dict[int, bytes] = {}
    for s, i in hf_tokenizer.get_vocab().items():
        if i in special:
            continue
        if i in added_ids:
            out[i] = s.encode("utf-8")
        elif all(c in dec for c in s):
            out[i] = bytes(dec[c] for c in s)
        else:  # not byte-level (SentencePiece): best effort
            out[i] = s.replace("\u2581", " ").encode("utf-8")
    return out, special


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
    #: case kinds the library has a frontend for (others are n/a without starting a worker)
    kinds: frozenset[str] = frozenset({"lark", "gbnf", "jsonschema"})
    #: what the library compiles for JSON Schema cases, for the policy table in RESULTS.md
    json_schema_policy = "n/a"

    def __init__(self, options: dict | None = None) -> None:
        self.options = options or {}
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

    def prepare(self, hf_tokenizer: Any, path: str) -> Any:
        raise NotImplementedError

    def grammar_for(self, case: dict, workload: str) -> GrammarChoice:
        raise NotImplementedError

    def cold_start(self) -> None:
        """Put the library in the state its compiles are measured from, before each timed
        compile and untimed: what a fresh process would find (nothing to do for a library
        without process caches, or one told to keep them)."""

    def compile(self, choice: GrammarChoice) -> Any:
        raise NotImplementedError

    def matcher(self, compiled: Any) -> Matcher:
        raise NotImplementedError

    # -- per step ---------------------------------------------------------------------
    def mask(self, matcher: Matcher) -> None:
        raise NotImplementedError

    def mask_callable(self, matcher: Matcher) -> Callable[[], Any]:
        return lambda: self.mask(matcher)

    def after_mask(self, matcher: Matcher) -> None:
        """Untimed: bring matcher.bitmask up to date when mask() produced another format."""

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

    @property
    def json_schema_policy(self) -> str:  # type: ignore[override]
        return ("GrammarCompiler.compile_json_schema(schema, any_whitespace=True, strict_mode=False"
                f", any_order={bool(self.options.get('any_order'))}): flexible whitespace, "
                "additional properties as the schema says")

    def version(self) -> str:
        return _version("xgrammar")

    def prepare(self, hf_tokenizer: Any, path: str) -> Any:
        import xgrammar as xgr

        self.vocab = xgr.TokenizerInfo.from_huggingface(hf_tokenizer)
        self.vocab_size = self.vocab.vocab_size
        # Single-threaded compilation, and no cache so repeated compiles are real compiles.
        self._compiler = xgr.GrammarCompiler(self.vocab, max_threads=1, cache_enabled=False)
        return self.vocab

    def grammar_for(self, case: dict, workload: str) -> GrammarChoice:
        kind = case["kind"]
        if kind == "jsonschema":
            return GrammarChoice("jsonschema", self.json_schema_policy, case["source"])
        if kind == "gbnf":
            return GrammarChoice("gbnf", f"{case['path']} via GrammarCompiler.compile_grammar",
                                 case["source"], case["start"])
        if workload == "json":
            return GrammarChoice(
                "xgrammar-builtin-json",
                "xgrammar builtin JSON grammar (GrammarCompiler.compile_builtin_json_grammar)",
            )
        choice = GrammarChoice("lark", f"{case['path']} via GrammarCompiler.compile_lark",
                               case["source"], case["start"])
        return _same_or_flattened(choice, self._lark_error)

    def _lark_error(self, text: str) -> str:
        """Parse only (Grammar.from_lark, no token-mask precomputation): cheap enough to
        probe whether xgrammar's Lark frontend takes a text before the timed compile."""
        import xgrammar as xgr

        try:
            xgr.Grammar.from_lark(text)
        except Exception as e:  # noqa: BLE001
            return _first_line(e)
        return ""

    def compile(self, choice: GrammarChoice) -> Any:
        try:
            if choice.kind == "xgrammar-builtin-json":
                return self._compiler.compile_builtin_json_grammar()
            if choice.kind == "lark":
                return self._compiler.compile_lark(_with_start(choice))
            if choice.kind == "gbnf":
                return self._compiler.compile_grammar(choice.source, root_rule_name=choice.start)
            if choice.kind == "jsonschema":
                return self._compiler.compile_json_schema(
                    choice.source, any_whitespace=True, strict_mode=False,
                    any_order=bool(self.options.get("any_order")))
        except Exception as e:  # xgrammar raises RuntimeError/ValueError on unsupported input
            raise CompileFailed(f"xgrammar: {_first_line(e)}") from e
        raise NotApplicable(choice.kind)

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
    modules = ("llguidance", "llguidance.hf", "llguidance.numpy", "llguidance.gbnf_to_lark")
    json_schema_policy = ('LLMatcher.grammar_from_json_schema(schema, defaults={"whitespace_flexible": '
                          'true}): flexible whitespace, properties in declaration order')

    def version(self) -> str:
        return _version("llguidance")

    def prepare(self, hf_tokenizer: Any, path: str) -> Any:
        import llguidance.hf

        self.vocab = llguidance.hf.from_tokenizer(hf_tokenizer)
        self.vocab_size = self.vocab.vocab_size
        return self.vocab

    def _lark_error(self, text: str) -> str:
        import llguidance as llg

        m = llg.LLMatcher(self.vocab, llg.LLMatcher.grammar_from_lark(text), log_level=0)
        return _first_line(m.get_error()) if m.is_error() else ""

    def grammar_for(self, case: dict, workload: str) -> GrammarChoice:
        kind = case["kind"]
        if kind == "jsonschema":
            return GrammarChoice("jsonschema", self.json_schema_policy, case["source"])
        if kind == "gbnf":
            return GrammarChoice("gbnf", f"{case['path']} converted by llguidance.gbnf_to_lark "
                                 "(its official GBNF path; conversion counted in compile)",
                                 case["source"], case["start"])
        lark = GrammarChoice(
            "lark", f"{case['path']} (same file as gramgen) in llguidance's Lark dialect",
            case["source"], case["start"])
        mode = self.options.get("llg_json", "auto")
        if workload != "json" or mode == "lark":
            return _same_or_flattened(lark, self._lark_error)
        builtin = GrammarChoice(
            "llguidance-json",
            "llguidance builtin JSON (`%json {}`, whitespace_flexible, "
            "json_allow_general_unicode_escapes)",
            LLG_JSON,
        )
        if mode == "builtin":
            return builtin
        # auto: the same Lark file as gramgen if llguidance's dialect takes it
        if case["source"]:
            err = self._lark_error(_with_start(lark))
            if not err:
                return lark
            builtin.description += f"; {case['path']} was rejected: {err[:200]}"
        return builtin

    def compile(self, choice: GrammarChoice) -> Any:
        import llguidance as llg

        try:
            if choice.kind == "jsonschema":
                grammar = llg.LLMatcher.grammar_from_json_schema(
                    choice.source, defaults={"whitespace_flexible": True})
            elif choice.kind == "gbnf":
                from llguidance.gbnf_to_lark import gbnf_to_lark

                grammar = llg.LLMatcher.grammar_from_lark(gbnf_to_lark(choice.source))
            else:
                grammar = llg.LLMatcher.grammar_from_lark(_with_start(choice))
        except Exception as e:  # noqa: BLE001 - conversion errors
            raise CompileFailed(f"llguidance: {_first_line(e)}") from e
        m = llg.LLMatcher(self.vocab, grammar, log_level=0)
        if m.is_error():
            raise CompileFailed(f"llguidance: {_first_line(m.get_error())}")
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
class OutlinesCoreAdapter(Adapter):
    """outlines-core: JSON Schema -> regex (build_regex_from_schema) -> token-level DFA
    (Index over the whole vocabulary: all the work happens at compile); Guide walks it.
    Regular languages only, so no Lark/GBNF frontend."""

    name = "outlines-core"
    modules = ("outlines_core",)
    kinds = frozenset({"jsonschema"})
    json_schema_policy = (f"json_schema.build_regex_from_schema(schema, whitespace_pattern={JSON_WS!r}) "
                          "+ Index(regex, vocabulary): flexible whitespace, properties in "
                          "declaration order")

    def version(self) -> str:
        return _version("outlines_core")

    def prepare(self, hf_tokenizer: Any, path: str) -> Any:
        import outlines_core as oc

        token_bytes, _special = byte_level_token_bytes(hf_tokenizer)
        by_bytes: dict[bytes, list[int]] = {}
        eos = hf_tokenizer.eos_token_id
        for i, b in token_bytes.items():
            if i != eos and b:
                by_bytes.setdefault(b, []).append(i)
        self.vocab = oc.Vocabulary(eos, by_bytes)
        self.vocab_size = len(hf_tokenizer)
        return self.vocab

    def grammar_for(self, case: dict, workload: str) -> GrammarChoice:
        if case["kind"] != "jsonschema":
            raise NotApplicable("outlines-core compiles regular expressions and JSON Schema only")
        return GrammarChoice("jsonschema", self.json_schema_policy, case["source"])

    def compile(self, choice: GrammarChoice) -> Any:
        import outlines_core as oc

        try:
            regex = oc.json_schema.build_regex_from_schema(choice.source, JSON_WS)
            return oc.Index(regex, self.vocab)
        except Exception as e:  # noqa: BLE001
            raise CompileFailed(f"outlines-core: {_first_line(e)}") from e

    def matcher(self, compiled: Any) -> Matcher:
        import outlines_core as oc

        return Matcher(oc.Guide(compiled), self.vocab_size)

    def mask(self, matcher: Matcher) -> None:
        bm = matcher.bitmask
        matcher.m.write_mask_into(bm.ctypes.data, bm.size, 4)

    def mask_callable(self, matcher: Matcher) -> Callable[[], Any]:
        # what outlines_core.kernels.numpy.fill_next_token_bitmask does, minus its checks
        write, bm = matcher.m.write_mask_into, matcher.bitmask
        ptr, n = bm.ctypes.data, bm.size
        return lambda: write(ptr, n, 4)

    def advance(self, matcher: Matcher, token: int) -> bool:
        try:
            matcher.m.advance(token, return_tokens=False)
        except Exception:  # noqa: BLE001 - outlines raises ValueError on a disallowed token
            return False
        return True

    def accepting(self, matcher: Matcher) -> bool:
        return bool(matcher.m.is_finished())


# --------------------------------------------------------------------------------------
class TransformersCfgAdapter(Adapter):
    """transformers-cfg (EBNF/GBNF, pure Python): IncrementalTokenRecognizer with its byte
    trie and token mapping built once per tokenizer (prepare).  Its mask is a boolean torch
    vector from `filter_vocab` (timed as is).  Version 0.2.7 predates transformers 5: it
    recognizes tokenizers by class, so prepare reloads byte-level BPE tokenizers with a class
    it knows (same ids), and its byte table lookup (`AutoTokenizer.from_pretrained("gpt2")`,
    online) gets GPT-2's byte table offline."""

    name = "transformers-cfg"
    modules = ("transformers_cfg.token_grammar_recognizer",)
    kinds = frozenset({"gbnf"})

    def version(self) -> str:
        return _version("transformers-cfg")

    def prepare(self, hf_tokenizer: Any, path: str) -> Any:
        import torch
        import transformers
        from transformers_cfg.tokenization.byte_trie import ByteTrie
        from transformers_cfg.tokenization.middle import ByteProxyMapping as bpm
        from transformers_cfg.tokenization.middle.TokenizerMiddleMapping import TokenizerMiddleMapping

        if type(hf_tokenizer).__name__.startswith("Qwen2"):
            tok = hf_tokenizer
        else:
            tok = transformers.GPT2TokenizerFast.from_pretrained(path)
        probe = "x = {\"a\": [1, 2]} é 😀"
        if tok.encode(probe, add_special_tokens=False) != hf_tokenizer.encode(probe, add_special_tokens=False):
            raise NotApplicable("transformers-cfg: could not load this tokenizer with a class it supports")

        class _OfflineAuto:
            """ByteProxyMapping asks for the slow tokenizer and for GPT-2's byte table."""

            @staticmethod
            def from_pretrained(name, **kw):
                if name == "gpt2":
                    enc = gpt2_byte_table()
                    return type("GPT2Bytes", (), {"byte_encoder": enc,
                                                  "byte_decoder": {c: b for b, c in enc.items()}})()
                return tok

        bpm.AutoTokenizer = _OfflineAuto
        self._tok = tok
        self._trie = ByteTrie.from_tokenizer(tok)
        self._hom = TokenizerMiddleMapping.from_hf_tokenizer(tok)
        self._cpu = torch.device("cpu")
        self.vocab = self._hom
        self.vocab_size = len(self._hom)
        return self.vocab

    def grammar_for(self, case: dict, workload: str) -> GrammarChoice:
        if case["kind"] != "gbnf":
            raise NotApplicable("transformers-cfg is benchmarked on GBNF/EBNF grammars only")
        return GrammarChoice("gbnf", f"{case['path']} via IncrementalTokenRecognizer",
                             case["source"], case["start"])

    def compile(self, choice: GrammarChoice) -> Any:
        from transformers_cfg.token_grammar_recognizer import IncrementalTokenRecognizer

        try:
            return IncrementalTokenRecognizer(choice.source, choice.start, self._tok,
                                              trie=self._trie, homomorphism=self._hom)
        except Exception as e:  # noqa: BLE001
            raise CompileFailed(f"transformers-cfg: {_first_line(e)}") from e

    def matcher(self, compiled: Any) -> Matcher:
        return Matcher(compiled.string_recognizer.get_initial_parsing_state(), self.vocab_size,
                       extra=[compiled, None])

    def mask_callable(self, matcher: Matcher) -> Callable[[], Any]:
        rec, cpu = matcher.extra[0], self._cpu
        box = matcher.extra

        def mask():
            box[1] = rec.filter_vocab(matcher.m, cpu)

        return mask

    def mask(self, matcher: Matcher) -> None:
        self.mask_callable(matcher)()

    def after_mask(self, matcher: Matcher) -> None:
        acc = matcher.extra[1].numpy().astype(bool)
        packed = np.packbits(acc, bitorder="little")
        words = np.zeros(matcher.bitmask.shape[1] * 4, dtype=np.uint8)
        words[: packed.size] = packed[: words.size]
        matcher.bitmask[0] = words.view(np.int32)

    def allowed(self, matcher: Matcher, token: int) -> bool:
        acc = matcher.extra[1]
        return bool(acc[token]) if acc is not None and token < len(acc) else False

    def advance(self, matcher: Matcher, token: int) -> bool:
        rec = matcher.extra[0]
        try:
            state = rec._update_state_with_token_id(token, matcher.m)
        except Exception:  # noqa: BLE001 - ValueError when no stack survives
            return False
        if not state.stacks:
            return False
        matcher.m = state
        return True

    def accepting(self, matcher: Matcher) -> bool:
        # Whether its mask allows EOS (any parse stack is empty): how a generation with
        # transformers-cfg ends.  AcceptState.can_stop() looks only at the first stack of
        # the set, so it can say no where EOS is allowed.
        rec = matcher.extra[0]
        return bool(rec.filter_vocab(matcher.m, self._cpu)[rec.eos_token_id])


# --------------------------------------------------------------------------------------
class GramgenAdapter(Adapter):
    """gramgen: Vocabulary.from_huggingface, Grammar.from_lark / from_gbnf /
    from_json_schema + compile, and Matcher.fill_bitmask (the packed-bitmask path, same
    output as the peers)."""

    name = "gramgen"
    #: the frontends and the matcher are imported lazily by gramgen; importing them here
    #: keeps their import (and, without .pyc files, their byte-compilation) out of the
    #: timed compile and first mask, as for the peers' native modules
    modules = ("gramgen", "gramgen.grammar.json_schema", "gramgen.grammar.lark", "gramgen.grammar.gbnf",
               "gramgen.grammar.regex", "gramgen.runtime.matcher")
    @property
    def json_schema_policy(self) -> str:  # type: ignore[override]
        caches = ("caches kept from earlier cases (--gramgen-caches warm)" if self.warm_caches
                  else "every compile cold (gramgen._lru.clear_all() before it, untimed; what is per vocabulary stays, "
                       "as xgrammar's TokenizerInfo: the token table and the standard classes of JSON "
                       "Schema value lexemes with those lexemes' automata, made from fixed schemas at the "
                       "first JSON Schema compile for a layout; and what is per process, as the formats' "
                       "regexes: each format's code-point automaton and its JSON spelling, made at its "
                       "first use)")
        return ('gramgen.Grammar.from_json_schema(schema, whitespace="flexible", '
                'lenient_formats=True) + gramgen.compile: flexible (bounded) whitespace, '
                f"properties in declaration order, unknown formats as annotations (as the peers); {caches}")

    @property
    def warm_caches(self) -> bool:
        """--gramgen-caches warm: compiles reuse what earlier ones left in gramgen's process
        caches (automata of equal lexemes, character classes, UTF-8 automata), as in a
        serving process; with repetitions of a case, those reuse its own too."""
        return self.options.get("gramgen_caches") == "warm"

    def version(self) -> str:
        import gramgen

        v = getattr(gramgen, "__version__", None)
        return str(v) if v else _version("gramgen")

    def prepare(self, hf_tokenizer: Any, path: str) -> Any:
        import gramgen

        self.vocab = gramgen.Vocabulary.from_huggingface(hf_tokenizer)
        try:
            # the byte-sorted token table is per vocabulary, shared by every grammar compiled
            # for it (like xgrammar's TokenizerInfo): tokenizer preprocessing, not compile
            from gramgen.automata.token_table import token_table_for

            token_table_for(self.vocab)
        except ImportError:
            pass
        self.vocab_size = self.vocab.size
        self._rejected = getattr(gramgen, "TokenRejected", None) or ValueError
        return self.vocab

    def grammar_for(self, case: dict, workload: str) -> GrammarChoice:
        how = {"lark": "gramgen.Grammar.from_lark", "gbnf": "gramgen.Grammar.from_gbnf",
               "jsonschema": self.json_schema_policy}[case["kind"]]
        if case["kind"] == "jsonschema":
            return GrammarChoice("jsonschema", how, case["source"])
        return GrammarChoice(case["kind"], f"{case['path']} ({how})", case["source"], case["start"])

    def cold_start(self) -> None:
        if self.warm_caches:
            return
        try:
            # every compile is cold, as xgrammar's (cache_enabled=False): equal lexemes share
            # an automaton within one compile but not across repetitions or cases (the
            # per-vocabulary tables stay, as xgrammar's TokenizerInfo does). Emptying the
            # caches frees what the last case left there: a fresh process has nothing to free.
            from gramgen._lru import clear_all

            clear_all()
        except ImportError:
            pass

    def compile(self, choice: GrammarChoice) -> Any:
        import gramgen

        try:
            if choice.kind == "lark":
                g = gramgen.Grammar.from_lark(choice.source, start=choice.start)
            elif choice.kind == "gbnf":
                g = gramgen.Grammar.from_gbnf(choice.source, start=choice.start)
            elif choice.kind == "jsonschema":
                g = gramgen.Grammar.from_json_schema(json.loads(choice.source), whitespace="flexible",
                                                    lenient_formats=True)
            else:
                raise NotApplicable(choice.kind)
            return gramgen.compile(g, self.vocab)
        except NotApplicable:
            raise
        except Exception as e:  # noqa: BLE001 - SchemaError, CompileLimitError, GrammarError, ...
            raise CompileFailed(f"gramgen {type(e).__name__}: {_first_line(e)}") from e

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
    "outlines-core": OutlinesCoreAdapter,
    "transformers-cfg": TransformersCfgAdapter,
}


def make_adapter(name: str, options: dict | None = None) -> Adapter:
    try:
        return ADAPTERS[name](options)
    except KeyError:
        raise SystemExit(f"unknown library {name!r}; known: {', '.join(ADAPTERS)}") from None
