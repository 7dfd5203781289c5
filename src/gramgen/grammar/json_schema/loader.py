"""The draft of a schema and ``$ref`` resolution without network (the input forms are
read by :func:`gramgen.grammar.sources.read_schema`).

Every ``$ref`` is rewritten to an absolute URI once, up front, so that schemas can later be
merged (``allOf``) and compiled without remembering which base URI each piece came from.
Remote documents come only from the caller's ``refs`` mapping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urldefrag, urljoin

from ...errors import SchemaError

ROOT_URI = "https://gramgen.invalid/root.json"

DRAFTS = {"draft-04": 4, "draft-06": 6, "draft-07": 7, "2019-09": 2019, "2020-12": 2020}

# keywords whose values are data, not subschemas: never searched for $id / $ref
_DATA_KEYWORDS = {"enum", "const", "examples", "default"}


def draft_of(schema: Any, default: int = 2020) -> int:
    if isinstance(schema, dict) and isinstance(schema.get("$schema"), str):
        for key, draft in DRAFTS.items():
            if key in schema["$schema"]:
                return draft
        raise SchemaError(f"unknown $schema {schema['$schema']!r}", "/$schema")
    return default


def join(base: str, ref: str) -> str:
    """RFC 3986 reference resolution that also works for ``urn:`` bases."""
    if ref.startswith("#"):
        return urldefrag(base)[0] + ref
    if ":" in ref.split("/", 1)[0]:
        return ref
    return urljoin(base, ref)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


class Resolver:
    """Index of every schema resource (by absolute URI, anchors included) in the root
    document and the caller-supplied remote documents."""

    def __init__(self, root: Any, draft: int, refs: dict[str, Any] | None):
        self.draft = draft
        self.documents: dict[str, Any] = {}    # absolute URI without fragment -> schema
        self.anchors: dict[str, Any] = {}      # absolute URI with #anchor -> schema
        #: id(node) -> (node, its JSON pointer in its document); holding the node keeps the
        #: id from being reused by another object while the entry exists
        self.pointers: dict[int, tuple[Any, str]] = {}
        self.root = self._absolutize(root, ROOT_URI, "", top=True)
        #: resources of the root document (checked up front by the compiler); the caller's
        #: documents are handed to ``on_document`` when a reference first reaches them
        self._root_bases = set(self.documents)
        self._reached: set[str] = set()
        self.on_document: Callable[[str, Any], None] | None = None
        for uri, doc in (refs or {}).items():
            base, _ = urldefrag(uri)
            if base not in self.documents:
                self._absolutize(doc, base, "", top=True)

    def _id_of(self, node: dict) -> str | None:
        key = "id" if self.draft == 4 else "$id"
        value = node.get(key)
        return value if isinstance(value, str) else None

    def _absolutize(self, node: Any, base: str, pointer: str, top: bool = False) -> Any:
        """A copy of ``node`` with absolute ``$ref``s; registers resources and anchors."""
        if isinstance(node, list):
            return [self._absolutize(x, base, f"{pointer}/{i}") for i, x in enumerate(node)]
        if not isinstance(node, dict):
            return node
        ident = self._id_of(node)
        if "$ref" in node and self.draft <= 7:
            ident = None  # up to draft 7, $ref makes its siblings (incl. $id) ignored
        anchor_uri = None
        new_resource = False
        if ident is not None:
            if ident.startswith("#"):  # draft 6/7 plain-name fragment: an anchor
                anchor_uri = join(base, ident)
            else:
                base = join(base, ident)
                new_resource = True
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str):   # (not JSON: inside an unknown keyword's value, say)
                raise SchemaError(f"an object's keys must be strings, not {key!r}", pointer)
            if key in ("$ref", "$dynamicRef", "$recursiveRef") and isinstance(value, str):
                out[key] = join(base, value)
            elif key in _DATA_KEYWORDS:
                out[key] = value
            elif key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
                         "dependencies") and isinstance(value, dict):
                out[key] = {k: self._absolutize(v, base, f"{pointer}/{key}/{_escape(k)}") for k, v in value.items()}
            else:
                out[key] = self._absolutize(value, base, f"{pointer}/{_escape(key)}")
        self.pointers[id(out)] = (out, pointer)
        if top or new_resource:
            self.documents.setdefault(urldefrag(base)[0], out)
        if anchor_uri is not None:
            self.anchors.setdefault(anchor_uri, out)
        for key in ("$anchor", "$dynamicAnchor"):
            if isinstance(node.get(key), str):
                self.anchors.setdefault(join(base, "#" + node[key]), out)
        return out

    def pointer(self, node: Any) -> str:
        found = self.pointers.get(id(node))
        return "" if found is None else found[1]

    def resolve(self, uri: str, where: str) -> Any:
        base, fragment = urldefrag(uri)
        doc = self.documents.get(base)
        if doc is None:
            raise SchemaError(f"$ref {uri!r} points outside the schema and no document for it was given "
                              "(remote references are never fetched: pass refs={uri: schema})", where)
        if base not in self._root_bases and base not in self._reached:
            self._reached.add(base)
            if self.on_document is not None:
                self.on_document(base, doc)
        if not fragment:
            return doc
        if not fragment.startswith("/"):
            target = self.anchors.get(f"{base}#{fragment}")
            if target is None:
                raise SchemaError(f"$ref {uri!r}: no anchor {fragment!r}", where)
            return target
        node = doc
        for raw in fragment.split("/")[1:]:
            token = unquote(raw).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                node = node[int(token)]
            else:
                raise SchemaError(f"$ref {uri!r} does not resolve", where)
        if not isinstance(node, (dict, bool)):
            raise SchemaError(f"$ref {uri!r} points at a {type(node).__name__} value, not at a schema "
                              "(an object or a boolean)", where)
        return node
