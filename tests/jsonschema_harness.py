"""Shared helpers for the JSON Schema tests: byte-level walking of instances and the
official test suite's files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gramgen

from conftest import SHARED

SUITE = SHARED / "data" / "json-schema-test-suite"
BYTE_VOCAB = gramgen.Vocabulary([bytes([i]) for i in range(256)] + [b""], eos_token_ids=[256])


def remotes() -> dict[str, Any]:
    """The suite's remote documents under the URIs its tests use."""
    out = {}
    root = SUITE / "remotes"
    for path in root.rglob("*.json"):
        rel = path.relative_to(root).as_posix()
        out[f"http://localhost:1234/{rel}"] = json.loads(path.read_text())
    return out


def suite_files(draft: str) -> list[Path]:
    base = SUITE / "tests" / draft
    files = sorted(base.glob("*.json")) + sorted((base / "optional" / "format").glob("*.json"))
    return files


def accepts(compiled: gramgen.CompiledGrammar, data: bytes) -> bool:
    """Walk ``data`` byte by byte with ``check`` before every ``advance``; then EOS."""
    m = compiled.matcher()
    for b in data:
        if not m.check(b):
            return False
        m.advance(b)
    return m.check(256)


def order_like_schema(value: Any, schema: Any, resolve=None, depth: int = 0) -> Any:
    """Reorder object keys the way the compiled grammar emits them: declared properties
    (searched through $ref / allOf / anyOf / oneOf) in schema order, then the rest."""
    if depth > 20:
        return value
    if isinstance(value, list):
        items = _item_schemas(schema)
        return [order_like_schema(v, items(i), resolve, depth + 1) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    props = _declared(schema, resolve, 0)
    keys = [k for k in props if k in value] + [k for k in value if k not in props]
    return {k: order_like_schema(value[k], props.get(k, True), resolve, depth + 1) for k in keys}


def _declared(schema: Any, resolve, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(schema, dict) or depth > 10:
        return out
    if "$ref" in schema and resolve is not None:
        try:
            out.update(_declared(resolve(schema["$ref"], ""), resolve, depth + 1))
        except Exception:  # noqa: BLE001 - best effort only
            pass
    for k, v in schema.get("properties", {}).items():
        out.setdefault(k, v)
    for r in schema.get("required", []):
        out.setdefault(r, True)
    for kw in ("allOf", "anyOf", "oneOf"):
        for sub in schema.get(kw, []):
            for k, v in _declared(sub, resolve, depth + 1).items():
                out.setdefault(k, v)
    return out


def _item_schemas(schema: Any):
    if not isinstance(schema, dict):
        return lambda i: True
    prefix = schema.get("prefixItems") or (schema.get("items") if isinstance(schema.get("items"), list) else [])
    tail = schema.get("items") if not isinstance(schema.get("items"), list) else True
    return lambda i: prefix[i] if i < len(prefix) else (tail if tail is not None else True)


def compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def pretty(value: Any) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8")
