"""gramgen inside vLLM's V1 engine (``pip install 'gramgen[vllm]'``).

:class:`GramgenLogitsProcessor` is a vLLM logits-processor plugin: loaded from the
``vllm.logits_processors`` entry point, ``LLM(logits_processors=[GramgenLogitsProcessor])``
or ``vllm serve --logits-processors gramgen.vllm:GramgenLogitsProcessor``, it constrains
each request whose ``extra_args`` (``vllm_xargs`` on the OpenAI server) carry one of
``gramgen_schema``, ``gramgen_lark``, ``gramgen_gbnf``, ``gramgen_regex``;
:func:`extra_args` builds those from a schema (a pydantic model too) or grammar text.

:mod:`gramgen.vllm.structured_output` is the other way in: vLLM's structured-output
backend (``response_format``, ``SamplingParams(structured_outputs=...)``, speculative
decoding included), turned on with ``GRAMGEN_VLLM_STRUCTURED_OUTPUT=1`` through its
``vllm.general_plugins`` entry point (vLLM 0.32.x). It is not imported here.

This package is an adapter at the edge: it uses gramgen's core and the core never imports
it. It imports without vLLM; only building the processor needs vLLM.
"""

from .logits_processor import GramgenLogitsProcessor, engine_vocabulary
from .params import ARG_GBNF, ARG_LARK, ARG_REGEX, ARG_SCHEMA, ARG_WHITESPACE, extra_args

__all__ = ["ARG_GBNF", "ARG_LARK", "ARG_REGEX", "ARG_SCHEMA", "ARG_WHITESPACE", "GramgenLogitsProcessor",
           "engine_vocabulary", "extra_args"]
