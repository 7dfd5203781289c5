"""gramgen as a vLLM (V1 engine) logits processor: :class:`GramgenLogitsProcessor`.

Turn it on in either of vLLM's ways (no patch of vLLM)::

    LLM(model=..., logits_processors=[GramgenLogitsProcessor])           # offline
    vllm serve MODEL --logits-processors gramgen.vllm:GramgenLogitsProcessor

or, installed with ``pip install 'gramgen[vllm]'``, through the ``vllm.logits_processors``
entry point, which every engine in that environment loads. Then a request asks for a
constraint in ``SamplingParams(extra_args=...)`` or the OpenAI request's ``vllm_xargs``
(see :mod:`gramgen.vllm.params` for the arguments; :func:`gramgen.vllm.extra_args` builds
them); requests without one run as before.

Refused loudly, because vLLM would otherwise run constrained requests unconstrained:

- speculative decoding: vLLM does not run custom logits processors under it (it raises
  for one passed in ``logits_processors``, and silently skips the entry point's). The
  processor refuses to start in such an engine, and :meth:`validate_params` refuses each
  constrained request sent to one;
- async scheduling with the processor loaded only from the entry point: vLLM then does not
  fill in the last sampled token before the logits processors run. Name it in
  ``logits_processors`` (or turn async scheduling off).

This module imports without vLLM (the class then refuses to be built) so that the rest of
the package and its tests need no vLLM.
"""

from __future__ import annotations

import functools
import logging
import sys
import weakref
from typing import Any

from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError
from .batch import ConstrainedBatch
from .params import check_request, request_of

try:
    from vllm.v1.sample.logits_processor import LogitsProcessor as _VllmLogitsProcessor
except ImportError as _exc:  # gramgen without its vllm extra
    _VllmLogitsProcessor = object
    _VLLM_MISSING: ImportError | None = _exc
else:
    _VLLM_MISSING = None

__all__ = ["GramgenLogitsProcessor", "engine_vocabulary"]

logger = logging.getLogger("gramgen.vllm")

_SPECULATIVE = ("gramgen: this vLLM engine runs speculative decoding ({method}), and vLLM does not "
                "run logits processors under speculative decoding, so gramgen cannot constrain its "
                "requests (they would come out unconstrained). Start the engine without "
                "speculative_config / --speculative-config to use gramgen constraints.")
_ASYNC = ("gramgen: this vLLM engine uses async scheduling and loads GramgenLogitsProcessor only "
          "through its entry point; vLLM then runs logits processors before it knows the token "
          "sampled last, so gramgen cannot constrain the request. Name the processor explicitly "
          "(LLM(logits_processors=[GramgenLogitsProcessor]) or vllm serve --logits-processors "
          "gramgen.vllm:GramgenLogitsProcessor), or turn async scheduling off.")


def _method(speculative_config: Any) -> str:
    return str(getattr(speculative_config, "method", None) or "speculative_config is set")


def _names_us(logits_processors: Any) -> bool:
    """Whether vLLM's ``model_config.logits_processors`` (classes or "module:Class" names)
    names this processor."""
    for entry in logits_processors or ():
        if isinstance(entry, type) and issubclass(entry, GramgenLogitsProcessor):
            return True
        if isinstance(entry, str) and entry.rsplit(":", 1)[-1].rsplit(".", 1)[-1] == GramgenLogitsProcessor.__name__:
            return True
    return False


def _uses_async_scheduling(vllm_config: Any) -> bool:
    return bool(getattr(getattr(vllm_config, "scheduler_config", None), "async_scheduling", False))


def _engine_of_caller(depth: int = 24) -> tuple[bool, Any, Any]:
    """``(found, speculative_config, vllm_config)`` of the engine whose request validation
    called :meth:`GramgenLogitsProcessor.validate_params`.

    ``validate_params`` receives only the request's ``SamplingParams``; vLLM calls it from
    ``SamplingParams.verify(model_config, speculative_config, ...)`` in the engine's input
    processor (which holds the ``vllm_config``), so the engine's configuration is read from
    those callers' frames. ``found`` is False when no caller holds it (an untested vLLM
    version): the request is then let through, and an engine that cannot constrain it
    makes it end at once (see :class:`~gramgen.vllm.batch.Row`)."""
    frame = sys._getframe(2)
    found, speculative, vllm_config = False, None, None
    for _ in range(depth):
        if frame is None:
            break
        local = frame.f_locals
        if not found and "speculative_config" in local and "model_config" in local:
            found, speculative = True, local["speculative_config"]
        for candidate in (local.get("vllm_config"), getattr(local.get("self"), "vllm_config", None)):
            if candidate is not None and hasattr(candidate, "speculative_config") and hasattr(candidate, "model_config"):
                return True, candidate.speculative_config, candidate
        frame = frame.f_back
    return found, speculative, vllm_config


@functools.lru_cache(maxsize=4)
def _vocabulary(tokenizer: str, revision: str | None, trust_remote_code: bool,
                extra_eos: tuple[int, ...]) -> Vocabulary:
    from transformers import AutoTokenizer  # the engine's tokenizer, as transformers loads it

    hf = AutoTokenizer.from_pretrained(tokenizer, revision=revision, trust_remote_code=trust_remote_code)
    return Vocabulary.from_huggingface(hf, eos_token_ids=extra_eos)


def engine_vocabulary(model_config: Any) -> Vocabulary:
    """The :class:`~gramgen.Vocabulary` of a vLLM engine's tokenizer (``model_config.tokenizer``,
    loaded with transformers and read by ``Vocabulary.from_huggingface``), its EOS ids
    joined by the generation config's ``eos_token_id`` (vLLM stops on those too). Cached
    per tokenizer in the process."""
    extra: list[int] = []
    try:
        generation = model_config.try_get_generation_config() or {}
    except Exception:  # noqa: BLE001 - no generation config is fine: the tokenizer's EOS stays
        generation = {}
    eos = generation.get("eos_token_id") if isinstance(generation, dict) else None
    if isinstance(eos, int):
        extra.append(eos)
    elif isinstance(eos, (list, tuple)):
        extra.extend(int(i) for i in eos)
    return _vocabulary(str(model_config.tokenizer), getattr(model_config, "tokenizer_revision", None),
                       bool(getattr(model_config, "trust_remote_code", False)), tuple(extra))


#: id(vllm_config) -> the processor built last for that engine (see GramgenLogitsProcessor)
_LATEST: dict[int, weakref.ref] = {}


class GramgenLogitsProcessor(_VllmLogitsProcessor):
    """Constrains each vLLM request that asks for it to a JSON Schema, Lark or GBNF grammar,
    or regular expression; see the module's documentation for turning it on.

    One :class:`~gramgen.Matcher` per constrained row of vLLM's persistent batch
    (:class:`~gramgen.vllm.batch.ConstrainedBatch`), moved with its row, reset when the
    request is preempted and comes back, advanced with the row's new output tokens before
    each mask. EOS is allowed only where the output is complete, so a request ends with a
    complete word of its grammar unless ``max_tokens`` cuts it first. Compiled grammars are
    cached per (constraint, tokenizer).

    Named in ``logits_processors`` while the entry point is installed, vLLM builds it twice
    for one engine: only the one built last for an engine's configuration works, the other
    passes the logits through (masking twice would be right, but twice the work).
    """

    def __init__(self, vllm_config: Any, device: Any, is_pin_memory: bool):
        if _VLLM_MISSING is not None:
            raise ConfigurationError(f"GramgenLogitsProcessor runs inside vLLM, which is not importable "
                                     f"here ({_VLLM_MISSING}): pip install 'gramgen[vllm]'")
        speculative = getattr(vllm_config, "speculative_config", None)
        if speculative is not None:
            raise ConfigurationError(_SPECULATIVE.format(method=_method(speculative)))
        model_config = vllm_config.model_config
        self.unrepaired_outputs = (_uses_async_scheduling(vllm_config)
                                   and not _names_us(getattr(model_config, "logits_processors", None)))
        if self.unrepaired_outputs:   # its constrained requests are refused in validate_params
            logger.info(_ASYNC)
        self.device = device
        self.batch = ConstrainedBatch(functools.partial(engine_vocabulary, model_config))
        self._config = vllm_config   # held, so that its id names this engine while we live
        for key in [key for key, ref in _LATEST.items() if ref() is None]:
            del _LATEST[key]
        _LATEST[id(vllm_config)] = weakref.ref(self)

    @property
    def active(self) -> bool:
        """Whether this is the processor built last for its engine (the one that works)."""
        latest = _LATEST.get(id(self._config))
        return latest is not None and latest() is self

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Turn away a request whose gramgen arguments are malformed (two constraints, an
        unknown ``gramgen_*`` key, a schema or grammar that does not parse: the message
        names the argument and the place) or that this engine cannot constrain
        (speculative decoding; async scheduling with the processor loaded only from its
        entry point). Raises :class:`~gramgen.ConfigurationError`, a ValueError, which
        fails that request alone (the OpenAI server answers 400). Requests without gramgen
        arguments pass at no cost."""
        request = request_of(getattr(sampling_params, "extra_args", None))
        if request is None:
            return
        found, speculative, vllm_config = _engine_of_caller()
        if speculative is not None:
            raise ConfigurationError(_SPECULATIVE.format(method=_method(speculative)))
        if vllm_config is not None and _uses_async_scheduling(vllm_config) and not _names_us(
                getattr(vllm_config.model_config, "logits_processors", None)):
            raise ConfigurationError(_ASYNC)
        if not found:
            logger.debug("gramgen: validate_params could not see the engine's configuration")
        check_request(request)

    def is_argmax_invariant(self) -> bool:
        """False: masking changes which token is most likely, so greedy requests need it too."""
        return False

    def update_state(self, batch_update: Any) -> None:
        if self.active:
            self.batch.update(batch_update)

    def apply(self, logits):
        return self.batch.apply(logits) if self.active else logits
