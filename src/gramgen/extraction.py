"""What ``gramgen extract`` does to each document, wherever it runs (the single process of
:mod:`gramgen.cli`, or the Ray workers of :mod:`gramgen.ray`): the schema and its validator,
the prompt, the generation options, one record per document (:func:`run_batch`), and the
output file's writer (:class:`RecordWriter`)."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import GramgenError, SchemaError
from .generation import Speculation, generate
from .grammar import Grammar
from .grammar.sources import read_schema

__all__ = ["DEFAULT_TEMPLATE", "Document", "RecordWriter", "extract_options", "load_schema", "outcome",
           "prompt_template", "run_batch", "schema_validator"]

DEFAULT_TEMPLATE = ("Extract the information in the document below as a JSON object{with_keys}.\n\n"
                    "Document:\n{document}")
"""The prompt when no ``--prompt-template`` is given: names the schema's top-level keys
(small models fill values better when the prompt says which keys to fill)."""


@dataclass
class Document:
    id: str
    text: str | None
    error: str | None = None   # why the document could not be read
    where: str = ""            # the file (and line) it came from, for messages


class RecordWriter:
    """Appends one JSON line per record, written through and fsynced (a regular file), so a
    killed run loses at most the documents still being generated. Unbuffered: a failed
    write leaves nothing behind to fail again on close. GramgenError when the file cannot
    be opened or written (no space, /dev/full)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(path, "ab", buffering=0)
            self._sync = stat.S_ISREG(os.fstat(self._file.fileno()).st_mode)
        except OSError as exc:
            raise GramgenError(f"cannot open the output {path}: {exc.strerror or exc}") from None

    def write(self, record: dict) -> None:
        data = memoryview((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        try:
            while data:
                data = data[self._file.write(data):]
            if self._sync:
                os.fsync(self._file.fileno())
        except OSError as exc:
            raise GramgenError(f"cannot write to the output {self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        self._file.close()


def load_schema(path: str) -> dict | bool:
    """The JSON Schema in the file ``path``, read by the reader of every schema argument
    (:func:`gramgen.grammar.sources.read_schema`)."""
    try:
        return read_schema(Path(path)).value
    except SchemaError as exc:  # its message names the file; no JSON pointer to show
        raise GramgenError(exc.message) from None


def _pointer(parts) -> str:
    """The JSON pointer (``#/properties/a~1b``) of a path of keys and indexes."""
    return "#" + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def schema_validator(schema: Any, path: str):
    """A jsonschema validator of ``schema`` (the file ``path``), after checking it against
    its metaschema: a schema that fails it is a GramgenError with the pointer of the bad
    keyword, before any model is loaded."""
    import jsonschema

    if isinstance(schema, dict) and "$schema" in schema and not isinstance(schema["$schema"], str):
        raise GramgenError(f"the schema {path} is not a valid JSON Schema: #/$schema: "
                           f"{schema['$schema']!r} is not a string (a metaschema URI)")
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        raise GramgenError(f"the schema {path} is not a valid JSON Schema: "
                           f"{_pointer(exc.absolute_path)}: {exc.message}") from None
    return cls(schema)


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def prompt_template(option: str | None, schema: Any = None) -> str:
    """The prompt template: ``{document}`` is the document's text, ``{keys}`` the schema's
    top-level property names (comma-separated)."""
    keys = ", ".join(schema.get("properties", {})) if isinstance(schema, dict) and isinstance(
        schema.get("properties"), dict) else ""
    if option is None:
        return DEFAULT_TEMPLATE.replace("{with_keys}", f" with the keys {keys}" if keys else "")
    text = option
    if _is_file(option):
        try:
            text = Path(option).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise GramgenError(f"cannot read the prompt template {option}: {exc}") from None
    if "{document}" not in text:
        raise GramgenError("the prompt template must contain {document}")
    return text.replace("{keys}", keys)


def outcome(doc: Document, result, validator) -> dict:
    if not result.complete:
        reason = result.error or f"output incomplete ({result.finish_reason})"
        return {"id": doc.id, "error": reason, "text": result.text}
    value = result.value
    if value is None:   # constrained by --grammar: the text still has to be JSON
        try:
            value = json.loads(result.text)
        except json.JSONDecodeError as exc:
            return {"id": doc.id, "error": f"output is not JSON: {exc}", "text": result.text}
    errors = sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    if errors:
        where = "/" + "/".join(map(str, errors[0].path))
        return {"id": doc.id, "error": f"jsonschema: {errors[0].message} at {where}",
                "text": result.text}
    return {"id": doc.id, "value": value}


def extract_options(schema: Any, *, grammar: Grammar | None = None, lenient_formats: bool = False,
                    strict: bool = True, whitespace: str | None = None, max_new_tokens: int = 512,
                    chat: bool = True, speculative: Speculation | None = None) -> dict[str, Any]:
    """The keyword arguments of :func:`gramgen.generate` with which ``extract`` generates
    each document's value: constrained by ``grammar`` when given, else by the JSON Schema
    ``schema`` (with ``lenient_formats``, through its grammar). One place for the single
    process and the Ray workers (:mod:`gramgen.ray`)."""
    layout = {} if whitespace is None else {"whitespace": whitespace}
    if grammar is not None:
        constraint: dict[str, Any] = {"grammar": grammar}
    elif lenient_formats:
        constraint = {"grammar": Grammar.from_json_schema(schema, lenient_formats=True, strict=strict, **layout)}
    else:
        constraint = {"schema": schema, "strict": strict, **layout}
    options = dict(max_new_tokens=max_new_tokens, chat=chat, **constraint)
    if speculative is not None:
        options["speculative"] = speculative
    return options


def run_batch(model, docs: list[Document], template: str, validator, options: dict,
              generate: Callable = generate) -> list[tuple[Document, dict]]:
    """(document, record) for each document of ``docs``: ``generate(model, prompts,
    **options)`` (:func:`gramgen.generate`; the command's tests put a stand-in there), then
    :func:`outcome`. A batch that fails is retried one by one so that one bad document only
    costs its own record."""
    if not docs:
        return []
    prompts = [template.replace("{document}", d.text) for d in docs]
    try:
        results = generate(model, prompts, **options)
        return [(d, outcome(d, r, validator)) for d, r in zip(docs, results)]
    except Exception as exc:  # noqa: BLE001 - every failure becomes an error record
        if len(docs) == 1:
            return [(docs[0], {"id": docs[0].id, "error": f"{type(exc).__name__}: {exc}"})]
    return [pair for d in docs for pair in run_batch(model, [d], template, validator, options, generate)]
