"""Extraction on Ray Data: documents in a ``ray.data.Dataset``, one record per document out.

:func:`extract_dataset` maps the dataset with ``map_batches`` over a fixed pool of Ray actors
(:class:`_Extractor`). Each actor loads its model once and compiles the constraint once, in
its ``__init__``; each batch then goes through the very function the single-process command
runs (:func:`gramgen.extraction.run_batch`: generate, validate, an error record for a document that
fails), so a record is the same whichever path made it.

Actors ask Ray for a fraction of a CPU (``cpus_per_worker=0.5``): actors that each hold a
whole CPU leave none to the tasks that read and move blocks, and on a small machine the
pipeline then waits forever. Each actor sets torch's threads itself (``threads=``).

``gramgen extract --ray`` (:func:`extract_with_ray`) reads the documents as the single
process does, streams the finished records back to the driver and appends each to the output
file as it arrives (written through and fsynced by the same
:class:`gramgen.extraction.RecordWriter`). A killed run has lost only the records not yet written;
the next run skips the ids already in the file, exactly as the single-process command does.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, GramgenError
from ..extraction import Document, RecordWriter, extract_options, load_schema, run_batch, schema_validator
from ..extraction import prompt_template as template_of
from ..generation import generate
from ..grammar import Grammar
from ..hf import load_model
from .llm import vllm_dataset
from .rows import OUTPUT_COLUMNS, _output_schema, _row_of, record_of

__all__ = ["OUTPUT_COLUMNS", "extract_dataset", "extract_with_ray", "record_of"]


#: the most blocks ``extract --ray`` splits its documents into (a block is the unit a worker
#: takes and the unit a killed run may lose)
MAX_BLOCKS = 10_000


def _require_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError as exc:
        raise GramgenError(f"extraction on Ray needs Ray Data ({exc}): pip install 'gramgen[ray]' "
                           "(ray[data] and pyarrow)") from None
    return ray


class _Extractor:
    """One Ray actor of the pool: a model and its compiled constraint, made once; called
    with a batch (a ``pyarrow.Table``) of documents, returns their records (a table with
    :data:`OUTPUT_COLUMNS`)."""

    def __init__(self, *, model: str, device: str | None, options: dict, template: str,
                 schema: Any, field: str, id_field: str, threads: int | None):
        if threads:
            import torch

            torch.set_num_threads(threads)
        self.field, self.id_field = field, id_field
        self.template, self.options = template, options
        self.validator = schema_validator(schema, "the schema")
        self.model = load_model(model, device=device)
        generate(self.model, [], **options)   # compile (or fail) once, before the first batch

    def __call__(self, batch):
        import pyarrow as pa

        for column in (self.id_field, self.field):
            if column not in batch.column_names:
                raise ConfigurationError(
                    f"the dataset has no column {column!r} (columns: {', '.join(batch.column_names)}): "
                    "name the documents' text and id columns with field= and id_field=")
        ids, texts = batch.column(self.id_field).to_pylist(), batch.column(self.field).to_pylist()
        records: dict[str, dict] = {}
        docs = []
        for doc_id, text in zip(ids, texts):
            if doc_id is None:
                raise ConfigurationError(f"a row has a null {self.id_field!r}: every document needs "
                                         "an id (the output and a resumed run know documents by id)")
            doc = Document(str(doc_id), text if isinstance(text, str) else None)
            if doc.text is None:
                records[doc.id] = {"id": doc.id, "error": f"no string field {self.field!r}"}
            else:
                docs.append(doc)
        for doc, record in run_batch(self.model, docs, self.template, self.validator, self.options):
            records[doc.id] = record
        rows = [_row_of(records[str(doc_id)]) for doc_id in ids]
        return pa.Table.from_pylist(rows, schema=_output_schema())


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a positive int, not {value!r}")
    return value


def _map(ds, *, model: str, device: str | None, options: dict, template: str, schema: Any,
         field: str, id_field: str, batch_size: int, workers: int, cpus_per_worker: float,
         gpus_per_worker: float, threads: int | None):
    ray = _require_ray()
    _positive_int("batch_size", batch_size)
    _positive_int("workers", workers)
    if threads is not None:
        _positive_int("threads", threads)
    if not (isinstance(cpus_per_worker, (int, float)) and cpus_per_worker > 0):
        raise ConfigurationError(f"cpus_per_worker must be a number above 0 (a fraction of a CPU "
                                 f"leaves room for Ray's own tasks), not {cpus_per_worker!r}")
    if not (isinstance(gpus_per_worker, (int, float)) and gpus_per_worker >= 0):
        raise ConfigurationError(f"gpus_per_worker must be a number, 0 or more, not {gpus_per_worker!r}")
    if not isinstance(ds, ray.data.Dataset):
        raise ConfigurationError(f"extract_dataset takes a ray.data.Dataset, not {type(ds).__name__}")
    resources: dict[str, Any] = {"num_cpus": cpus_per_worker}
    if gpus_per_worker:
        resources["num_gpus"] = gpus_per_worker
    return ds.map_batches(
        _Extractor, batch_size=batch_size, batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=workers),
        fn_constructor_kwargs=dict(model=model, device=device, options=options, template=template,
                                   schema=schema, field=field, id_field=id_field, threads=threads),
        **resources)


def extract_dataset(ds, *, schema: Any, model: str = "smollm2", grammar: Any = None,
                    prompt_template: str | None = None, field: str = "text", id_field: str = "id",
                    batch_size: int = 1, max_new_tokens: int = 512, chat: bool = True,
                    whitespace: str | None = None, strict: bool = True, lenient_formats: bool = False,
                    speculative: Any = None, device: str | None = None, workers: int = 1,
                    cpus_per_worker: float = 0.5, gpus_per_worker: float = 0,
                    threads: int | None = 1, engine: str = "transformers",
                    engine_kwargs: dict | None = None):
    """One record per document of the ``ray.data.Dataset`` ``ds``, extracted as
    ``gramgen extract`` does, as a lazy ``ray.data.Dataset`` with the string columns
    :data:`OUTPUT_COLUMNS` (``id``, ``value`` as JSON text, ``error``, ``text``); write it
    with ``write_parquet`` / ``write_json``, or stream it with ``iter_rows`` and
    :func:`record_of`.

    Parameters
    ----------
    ds:
        The documents: a column ``field`` (the text) and a column ``id_field`` (an id,
        taken as text, that every row has). A row whose text is not a string is an error
        record.
    schema:
        The JSON Schema (a dict, or the path of its file) every value is validated against,
        and which constrains generation unless ``grammar`` is given.
    model, device:
        What each worker loads (:func:`gramgen.load_model`): ``"smollm2"`` or a Hugging Face
        model folder that every node of the cluster can read.
    grammar:
        A :class:`gramgen.Grammar` (or the path of a ``.lark`` / ``.gbnf`` file) to constrain
        generation with instead of the schema.
    prompt_template:
        Text or a file with ``{document}`` (and optionally ``{keys}``); default: the
        command's instruction naming the schema's top-level keys.
    batch_size:
        Documents per generate() call, and per batch a worker takes.
    max_new_tokens, chat, whitespace, strict, lenient_formats, speculative:
        As ``gramgen extract``'s options of the same names (``speculative``: a
        :class:`gramgen.Speculation`).
    workers:
        The size of the actor pool: this many models run at once.
    cpus_per_worker, gpus_per_worker:
        What each actor asks Ray for. Keep CPUs fractional on small nodes: actors that hold
        every CPU starve Ray Data's other tasks and the pipeline stalls.
    threads:
        torch's threads in each worker (None: torch's default).
    engine, engine_kwargs:
        ``"transformers"`` (the default): each worker runs gramgen with transformers.
        ``"vllm"``: Ray Data LLM runs ``workers`` vLLM engines (``ray.data.llm``'s
        processor with a ``vLLMEngineProcessorConfig``; needs vLLM and ``ray[data]``
        installed, not ``ray[llm]``), each request constrained by gramgen's logits
        processor through ``sampling_params.extra_args``; ``model`` is a Hugging Face id
        or a folder every node can read, ``engine_kwargs`` go to vLLM as they are
        (``dtype``, ``max_model_len``, ...), ``batch_size`` is the rows per engine batch.
        Only a JSON Schema constraint (``whitespace`` too); ``grammar``,
        ``lenient_formats``, ``speculative``, ``strict=False``, ``device`` and ``threads``
        other than 1 are transformers options and raise ConfigurationError. The prompt and
        the record are the transformers path's.

    Errors in the arguments, the schema, the grammar or the template are raised here, before
    any worker starts; a model that cannot load fails the dataset's execution.
    """
    if isinstance(schema, (str, Path)):
        name = str(schema)
        schema = load_schema(name)
    else:
        name = "the schema"
    schema_validator(schema, name)   # a schema failing its metaschema fails here, with its pointer
    if isinstance(grammar, (str, Path)):
        grammar = Grammar.from_file(str(grammar))
    elif grammar is not None and not isinstance(grammar, Grammar):
        raise ConfigurationError(f"grammar= takes a gramgen.Grammar or a file path, not {type(grammar).__name__}")
    if engine == "vllm":
        return _vllm(ds, schema=schema, model=model, grammar=grammar, prompt_template=prompt_template,
                     field=field, id_field=id_field, batch_size=batch_size, max_new_tokens=max_new_tokens,
                     chat=chat, whitespace=whitespace, strict=strict, lenient_formats=lenient_formats,
                     speculative=speculative, device=device, workers=workers,
                     cpus_per_worker=cpus_per_worker, gpus_per_worker=gpus_per_worker,
                     threads=threads, engine_kwargs=engine_kwargs)
    if engine != "transformers":
        raise ConfigurationError(f"engine must be 'transformers' or 'vllm', not {engine!r}")
    if engine_kwargs is not None:
        raise ConfigurationError("engine_kwargs go with engine='vllm' (vLLM's engine arguments)")
    options = extract_options(schema, grammar=grammar, lenient_formats=lenient_formats, strict=strict,
                              whitespace=whitespace, max_new_tokens=max_new_tokens, chat=chat,
                              speculative=speculative)
    return _map(ds, model=model, device=device, options=options,
                template=template_of(prompt_template, schema), schema=schema, field=field,
                id_field=id_field, batch_size=batch_size, workers=workers,
                cpus_per_worker=cpus_per_worker, gpus_per_worker=gpus_per_worker, threads=threads)


def _vllm(ds, *, schema, grammar, lenient_formats, speculative, strict, device, threads,
          prompt_template, batch_size, workers, cpus_per_worker, gpus_per_worker, **rest):
    """``extract_dataset(engine="vllm")``: the options vLLM's path cannot honour refused by
    name, the rest checked as the transformers path checks them (:mod:`gramgen.ray.llm`)."""
    refused = [name for name, given in (("grammar", grammar is not None), ("lenient_formats", lenient_formats),
                                        ("speculative", speculative is not None), ("strict=False", not strict),
                                        ("device", device is not None),
                                        ("threads", threads not in (None, 1))) if given]
    if refused:
        raise ConfigurationError(f"extract_dataset(engine='vllm') does not take {', '.join(refused)}: "
                                 "the vLLM engine is constrained by the JSON Schema (strict, with "
                                 "whitespace=) through gramgen's logits processor; the others are "
                                 "options of engine='transformers' (vLLM's own settings go in engine_kwargs)")
    _positive_int("batch_size", batch_size)
    _positive_int("workers", workers)
    if not (isinstance(cpus_per_worker, (int, float)) and cpus_per_worker > 0):
        raise ConfigurationError(f"cpus_per_worker must be a number above 0 (a fraction of a CPU "
                                 f"leaves room for Ray's own tasks), not {cpus_per_worker!r}")
    if not (isinstance(gpus_per_worker, (int, float)) and gpus_per_worker >= 0):
        raise ConfigurationError(f"gpus_per_worker must be a number, 0 or more, not {gpus_per_worker!r}")
    return vllm_dataset(ds, schema=schema, template=template_of(prompt_template, schema), batch_size=batch_size,
                        workers=workers, cpus_per_worker=cpus_per_worker, gpus_per_worker=gpus_per_worker,
                        **rest)


# -- the command (gramgen extract --ray) ---------------------------------------------------

def _connect(ray, address: str, num_cpus: int | None) -> bool:
    """Start a local Ray instance (``address == "local"``) or connect to a cluster; True
    when this call started or connected Ray (and so shuts it down), False when the process
    was connected already."""
    if ray.is_initialized():
        return False
    import logging

    options: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING)
    try:
        if address == "local":
            ray.init(address="local", num_cpus=num_cpus, **options)
        else:
            ray.init(address=address, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise GramgenError(f"--ray {address}: cannot start or reach Ray: {_first_line(exc)}") from None
    return True


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _gramgen_cause(exc: BaseException) -> GramgenError | None:
    """The gramgen error a Ray error wraps (a bad model or grammar in a worker), if any."""
    seen = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, GramgenError):
            return e
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    return None


def _ray_failure(exc: BaseException) -> GramgenError:
    cause = _gramgen_cause(exc)
    if cause is not None:
        return cause
    lines = [line for line in str(exc).splitlines() if line.strip()]
    # a gramgen error raised in a worker and reported as text (an actor that died in __init__)
    for line in reversed(lines):
        found = re.search(r"gramgen\.errors\.\w+: (.*)", line)
        if found:
            return GramgenError(found.group(1).strip())
    # a worker's exception is reported with its traceback: its last line names the error
    detail = next((line.strip() for line in reversed(lines) if "Error" in line or "Exception" in line),
                  lines[0] if lines else type(exc).__name__)
    return GramgenError(f"the Ray job failed ({type(exc).__name__}): {detail}")


def extract_with_ray(args: argparse.Namespace, *, todo: list, out: Path, schema: Any, template: str,
                     options: dict) -> int:
    """``gramgen extract --ray``: the documents ``todo`` (not yet in ``out``) extracted on
    Ray, each record appended to ``out`` as it arrives. Exit status as the single-process
    command's: 0, or 1 when error records were written."""
    from tqdm import tqdm

    ray = _require_ray()
    readable = [d for d in todo if not d.error]
    unreadable = [{"id": d.id, "error": d.error} for d in todo if d.error]
    started = _connect(ray, args.ray, args.ray_cpus) if readable else False
    writer: RecordWriter | None = None
    ok = failed = 0
    written: set[str] = set()
    bar = tqdm(total=len(todo), unit="doc", file=sys.stderr, dynamic_ncols=True)

    def emit(record: dict) -> None:
        nonlocal writer, ok, failed
        if record["id"] in written:   # a batch Ray ran twice (a retried task): once is enough
            return
        if writer is None:
            writer = RecordWriter(out)
        writer.write(record)
        written.add(record["id"])
        ok, failed = ok + ("error" not in record), failed + ("error" in record)
        bar.update(1)
        bar.set_postfix(ok=ok, errors=failed)

    try:
        if readable:
            cpus = float(ray.cluster_resources().get("CPU", 1))
            blocks = min(MAX_BLOCKS, math.ceil(len(readable) / args.batch_size))
            vllm = getattr(args, "engine", "transformers") == "vllm"
            workers = min(args.workers or (1 if vllm else max(1, int(cpus))), blocks)
            threads = max(1, int(cpus // workers))
            gpus = 1 if (args.device or "").startswith("cuda") else 0
            where = "a local Ray instance" if args.ray == "local" else f"the Ray cluster at {args.ray}"
            each = "vLLM engine(s) (Ray Data LLM)" if vllm else "worker(s)"
            bar.write(f"gramgen extract: {workers} {each} on {where} ({cpus:g} CPUs)"
                      + ("" if vllm else f", {threads} torch thread(s) each"), file=sys.stderr)
            ray.data.DataContext.get_current().enable_progress_bars = False   # the bar above is ours
            ds = ray.data.from_items([{"id": d.id, "text": d.text} for d in readable],
                                     override_num_blocks=blocks)
            try:
                if vllm:
                    mapped = vllm_dataset(ds, schema=schema, model=args.model, template=template, field="text",
                                          id_field="id", batch_size=args.batch_size,
                                          max_new_tokens=options["max_new_tokens"], chat=options["chat"],
                                          whitespace=options.get("whitespace"), workers=workers,
                                          cpus_per_worker=0.5,   # a GPU per engine where the cluster has GPUs
                                          gpus_per_worker=1 if ray.cluster_resources().get("GPU") else 0,
                                          engine_kwargs=getattr(args, "engine_kwargs", None))
                else:
                    mapped = _map(ds, model=args.model, device=args.device, options=options, template=template,
                                  schema=schema, field="text", id_field="id", batch_size=args.batch_size,
                                  workers=workers, cpus_per_worker=0.5, gpus_per_worker=gpus, threads=threads)
                for batch in mapped.iter_batches(batch_size=None, batch_format="pyarrow"):
                    for row in batch.to_pylist():
                        emit(record_of(row))
                        while unreadable:   # the workers are up: nothing fails before the model
                            emit(unreadable.pop())
            except GramgenError:
                raise
            except Exception as exc:  # noqa: BLE001 - Ray's errors become one gramgen line
                raise _ray_failure(exc) from None
        for record in unreadable:
            emit(record)
    finally:
        bar.close()
        if writer is not None:
            writer.close()
        if started:
            ray.shutdown()
    missing = len(todo) - ok - failed
    if missing:
        raise GramgenError(f"the Ray job returned no record for {missing} document(s): run the same "
                           "command again to extract them")
    print(f"gramgen extract: {ok} extracted, {failed} error records, written to {out}", file=sys.stderr)
    return 0 if failed == 0 else 1
