"""JSON Schema (and pydantic models) -> the grammar IR; see :mod:`.compiler`."""

from .compiler import SchemaCompiler, json_schema_to_ir

__all__ = ["SchemaCompiler", "json_schema_to_ir"]
