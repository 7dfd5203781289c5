"""The rows of an extraction dataset: one per document, with :data:`OUTPUT_COLUMNS` as
strings, shared by the transformers actors (:mod:`.extract`) and the Ray Data LLM path
(:mod:`.llm`)."""

from __future__ import annotations

import json

__all__ = ["OUTPUT_COLUMNS", "record_of"]

#: the columns of :func:`extract_dataset`'s output, all strings: ``id``; ``value``, the JSON
#: text of the extracted value (null when the document failed); ``error``, why the document
#: failed (null when it did not); ``text``, the generated text of a failed output, when there
#: was one. JSON text keeps the column's type fixed whatever the schema, for Parquet and JSON.
OUTPUT_COLUMNS = ("id", "value", "error", "text")


def _output_schema():
    import pyarrow as pa

    return pa.schema([(name, pa.string()) for name in OUTPUT_COLUMNS])


def record_of(row: dict) -> dict:
    """The record that ``gramgen extract`` writes for one row of :func:`extract_dataset`'s
    output: ``{"id", "value"}``, or ``{"id", "error"}`` with the generated ``"text"`` when
    there was one."""
    if row.get("error") is None:
        return {"id": row["id"], "value": json.loads(row["value"])}
    record = {"id": row["id"], "error": row["error"]}
    if row.get("text") is not None:
        record["text"] = row["text"]
    return record


def _row_of(record: dict) -> dict:
    return {"id": record["id"],
            "value": json.dumps(record["value"], ensure_ascii=False) if "error" not in record else None,
            "error": record.get("error"), "text": record.get("text")}
