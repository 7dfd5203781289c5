"""The per-request arguments of the vLLM integration: which constraint a request asks for.

A request names its constraint in ``SamplingParams.extra_args`` (the OpenAI-compatible
server fills ``extra_args`` from the request's ``vllm_xargs``, which holds flat values
only, so every argument is one string)::

    gramgen_schema      a JSON Schema, as JSON text (offline, a dict also works)
    gramgen_lark        a grammar in Lark's EBNF (start rule ``start``)
    gramgen_gbnf        a grammar in llama.cpp's GBNF (start rule ``root``)
    gramgen_regex       a regular expression (Python syntax) the whole output matches
    gramgen_whitespace  with gramgen_schema only: "compact", "standard" (the default) or
                        "flexible", as in ``Grammar.from_json_schema``

Exactly one of the first four; a request with none of them is not constrained. Any other
``gramgen_*`` key is an error (a misspelt argument must not silently leave a request
unconstrained). :func:`extra_args` builds the dict, from a pydantic model class too.

Nothing here imports vLLM: the same checks run in the engine and in the tests.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._lru import LRU
from ..errors import ConfigurationError, GramgenError
from ..grammar import Grammar
from ..grammar.sources import read_schema

__all__ = ["ARG_GBNF", "ARG_LARK", "ARG_REGEX", "ARG_SCHEMA", "ARG_WHITESPACE", "KINDS", "Request",
           "check_request", "extra_args", "request_of"]

ARG_SCHEMA = "gramgen_schema"
ARG_LARK = "gramgen_lark"
ARG_GBNF = "gramgen_gbnf"
ARG_REGEX = "gramgen_regex"
ARG_WHITESPACE = "gramgen_whitespace"

#: argument name -> the constraint kind (the keyword of ``gramgen.generate``)
KINDS = {ARG_SCHEMA: "schema", ARG_LARK: "lark", ARG_GBNF: "gbnf", ARG_REGEX: "regex"}
_PREFIX = "gramgen_"
_WHITESPACES = ("compact", "standard", "flexible")


@dataclass(frozen=True)
class Request:
    """The constraint one request asks for: ``kind`` ("schema", "lark", "gbnf" or
    "regex"), its ``text`` (for a schema, canonical JSON text) and, for a schema, the
    ``whitespace`` layout (None: gramgen's default)."""

    kind: str
    text: str
    whitespace: str | None = None

    @property
    def argument(self) -> str:
        """The ``extra_args`` key the constraint came in."""
        return next(name for name, kind in KINDS.items() if kind == self.kind)

    def schema(self) -> dict | bool:
        """The JSON Schema of a ``schema`` request."""
        return json.loads(self.text)

    def grammar(self) -> Grammar:
        """The constraint as a :class:`~gramgen.Grammar` (parsed, not compiled).

        The schema is read the way ``gramgen.generate(schema=...)`` reads it (``strict=True``:
        no undeclared object keys)."""
        if self.kind == "schema":
            layout = {"whitespace": self.whitespace} if self.whitespace else {}
            return Grammar.from_json_schema(self.schema(), strict=True, **layout)
        if self.kind == "lark":
            return Grammar.from_lark(self.text)
        if self.kind == "gbnf":
            return Grammar.from_gbnf(self.text)
        return Grammar.from_regex(self.text)


def request_of(args: Mapping[str, Any] | None) -> Request | None:
    """The constraint that ``extra_args`` (``SamplingParams.extra_args``) asks for, or None
    when it names none. Raises :class:`~gramgen.ConfigurationError` (a ValueError) naming
    the argument for: two constraints, a ``gramgen_*`` key that is not one of ours, a value
    that is not a string (a dict, for a schema), schema text that is not JSON, a
    ``gramgen_whitespace`` that is not one of the layouts or comes without a schema."""
    if not args:
        return None
    if not isinstance(args, Mapping):
        raise ConfigurationError(f"extra_args must be a mapping, not {type(args).__name__}")
    ours = {key: value for key, value in args.items() if isinstance(key, str) and key.startswith(_PREFIX)}
    if not ours:
        return None
    unknown = sorted(set(ours) - set(KINDS) - {ARG_WHITESPACE})
    if unknown:
        raise ConfigurationError(f"unknown gramgen argument(s) {', '.join(unknown)}: the arguments are "
                                 f"{', '.join(KINDS)} (exactly one) and {ARG_WHITESPACE}")
    given = [key for key in KINDS if key in ours]
    if len(given) != 1:
        raise ConfigurationError(f"give exactly one of {', '.join(KINDS)} in extra_args / vllm_xargs "
                                 f"(got {', '.join(given) if given else 'only ' + ARG_WHITESPACE})")
    key, = given
    value = ours[key]
    whitespace = ours.get(ARG_WHITESPACE)
    if whitespace is not None:
        if key != ARG_SCHEMA:
            raise ConfigurationError(f"{ARG_WHITESPACE} lays out the JSON of a {ARG_SCHEMA}, not a {key}")
        if whitespace not in _WHITESPACES:
            raise ConfigurationError(f"{ARG_WHITESPACE} must be one of {', '.join(_WHITESPACES)}, "
                                     f"not {whitespace!r}")
    if key == ARG_SCHEMA:
        return Request("schema", _schema_text(value), whitespace)
    if not isinstance(value, str):
        raise ConfigurationError(f"{key} takes the grammar as a string, not {type(value).__name__}")
    return Request(KINDS[key], value)


def schema_value(value: Any, label: str) -> dict | bool:
    """A schema given as JSON text or as a dict / bool, as a dict / bool; a
    :class:`~gramgen.ConfigurationError` naming ``label`` (where the request gave it) for
    anything else. Shared by the logits processor's arguments and the structured-output
    backend."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{label} is not JSON text: {exc.msg} at line {exc.lineno}, "
                                     f"column {exc.colno}") from None
        if not isinstance(value, (dict, bool)):
            raise ConfigurationError(f"{label} must be a JSON object (or true / false), "
                                     f"not a JSON {type(value).__name__}")
    elif not isinstance(value, (dict, bool)):
        raise ConfigurationError(f"{label} takes the schema as JSON text (or a dict), "
                                 f"not {type(value).__name__}")
    return value


def _schema_text(value: Any) -> str:
    """Canonical JSON text of a schema given as JSON text or as a dict / bool."""
    value = schema_value(value, ARG_SCHEMA)
    try:
        return json.dumps(value)  # key order kept: it is the order the properties come out in
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{ARG_SCHEMA} is not JSON data: {exc}") from None


_checked: LRU[Request, bool] = LRU(256)
_check_lock = threading.Lock()


def check_request(request: Request) -> None:
    """Parse the request's grammar (the vocabulary-independent part of compiling it), so a
    malformed schema or grammar fails its request before it reaches the engine. Raises
    :class:`~gramgen.ConfigurationError` (a ValueError, which vLLM reports as a bad
    request) whose message names the argument and carries gramgen's own error (line and
    column, or the JSON pointer); the original error is its ``__cause__``. Requests that
    passed are remembered (a bounded LRU), so a repeated constraint is parsed once."""
    if _checked.get(request):
        return
    try:
        request.grammar()
    except GramgenError as exc:
        raise ConfigurationError(f"{request.argument}: {type(exc).__name__}: {exc}") from exc
    with _check_lock:
        _checked.put(request, True)


def extra_args(*, schema: Any = None, lark: str | None = None, gbnf: str | None = None,
               regex: str | None = None, whitespace: str | None = None) -> dict[str, str]:
    """The ``SamplingParams(extra_args=...)`` (or ``vllm_xargs``) for one constraint: exactly
    one of ``schema`` (a dict, JSON text or a pydantic model class), ``lark``, ``gbnf``,
    ``regex``; ``whitespace`` with a schema. Every value is a string, as the OpenAI server
    requires. Raises :class:`~gramgen.ConfigurationError` as :func:`request_of` does, and
    :class:`~gramgen.SchemaError` for a schema that cannot be read."""
    given = {name: value for name, value in (("schema", schema), ("lark", lark), ("gbnf", gbnf),
                                             ("regex", regex)) if value is not None}
    if len(given) != 1:
        raise ConfigurationError(f"give exactly one of schema=, lark=, gbnf=, regex= "
                                 f"(got {', '.join(given) if given else 'none'})")
    (kind, value), = given.items()
    if kind == "schema":
        if isinstance(value, str) and not value.lstrip().startswith(("{", "true", "false")):
            raise ConfigurationError("schema= takes JSON text, a dict or a pydantic model class "
                                     "(not a file name: read the file first)")
        source = read_schema(value)
        source.key  # noqa: B018 - SchemaError for a value that is not JSON data
        value = json.dumps(source.value)
    out = {f"{_PREFIX}{kind}": value}
    if whitespace is not None:
        out[ARG_WHITESPACE] = whitespace
    request_of(out)  # the same checks as the engine's
    return out
