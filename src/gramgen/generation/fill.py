"""``fill()``: template filling and fill-in-the-middle with a causal LM.

A template is fixed text with :class:`~gramgen.Hole` s between. Each hole is generated left
to right by the model, one token at a time, and a token is kept only if the whole rest of
the template (fixed text and later holes) can still be completed to a word of the grammar:
an :class:`~gramgen.Infiller` answers that exactly, after a :class:`~gramgen.Matcher`
advanced over the text so far has refused the tokens that break the prefix already (its
answer is exact for the prefix, and cheaper). Candidates are taken in the model's order
and refused lazily: most of the top ones are fine, so no full mask is computed.

A hole ends when the model says so and the rest is still feasible:

* *prefix-only prompting* (any causal LM): the model reads the prompt and the text so far;
  "close the hole" is scored by its probability of the first token of the fixed text that
  follows the hole (EOS when the hole ends the template), against each token that would
  extend the hole. A token that ends the hole's text and begins the fixed text (``",``
  before ``, "age"``) closes the hole too, so the model writes its usual tokens;
* *fill-in-the-middle* (models whose tokenizer has FIM tokens: StarCoder's
  ``<fim_prefix>``, DeepSeek-Coder's ``<｜fim▁begin｜>``, CodeLlama's ``<PRE>``, Qwen-Coder's
  and CodeGemma's ``<|fim_prefix|>``): the model reads prefix and suffix and ends the
  middle with its end-of-middle token (EOS, ``<EOT>``, ...), which closes the hole.

Bounded holes close when ``max_bytes`` (or ``tokens=`` / ``max_tokens=``) is reached and
stay open until ``min_bytes``. Every committed state is feasible, so the final text is a
word of the grammar (checked again with a Matcher before it is returned). When the token
budget runs out, or the model gives no probability to any allowed token, the rest is
completed with the infiller's witness (``finish_reason`` says so): still valid.
"""

from __future__ import annotations

import json
import time
import weakref
from collections.abc import Sequence as SequenceOf
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any, Literal

import numpy as np

from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError, GramgenError
from ..grammar import Grammar
from ..grammar.json_schema.compiler import DEFAULT_WHITESPACE
from ..runtime import CompiledGrammar
from ..runtime.infiller import Hole, Infiller
from .api import Whitespace, target_for
from .lm import LanguageModel, context_length, never_ids, normalised_logprobs

__all__ = ["FillResult", "FillStats", "FimFormat", "fill", "fim_format"]

#: why a fill ended: every hole closed by the model (``"done"``), or the rest completed
#: from the infiller's witness because ``max_new_tokens`` ran out or no allowed token had
#: any probability (``"dead_end"``); the text is a word of the grammar in every case
FillFinish = Literal["done", "max_new_tokens", "dead_end"]

#: refused candidates in one step after which the prefix mask is computed once and used
#: instead of checking tokens one by one
_MASK_AFTER = 32


@dataclass
class FillStats:
    """Where the work of one :func:`fill` went."""

    #: model forward passes (one per generated token and per hole start; contexts the
    #: model had scored before are not counted)
    forward_passes: int = 0
    #: infiller questions asked (a token placed in a hole, a hole closed, the template)
    checks: int = 0
    #: candidate tokens refused (by the prefix matcher or the infiller)
    rejections: int = 0
    #: tokens the model generated (all holes)
    new_tokens: int = 0
    #: wall-clock seconds of the call
    seconds: float = 0.0


@dataclass
class FillResult:
    """One filled template.

    ``text``: the whole text (fixed parts and fillings), a word of the grammar.
    ``fillings``: what each hole holds, in template order. ``value``: the parsed JSON (a
    pydantic instance for a pydantic model) with ``schema=``, else None. ``tokens``: per
    hole, the token ids the model generated there (the first may also spell the end of
    the fixed text before the hole, re-generated so that the model can choose its own
    token boundary; a hole completed from the witness holds more text than its tokens).
    ``fim``: whether fill-in-the-middle prompting was used.
    """

    text: str
    fillings: list[str]
    value: Any
    tokens: list[list[int]]
    stats: FillStats = field(default_factory=FillStats)
    finish_reason: FillFinish = "done"
    fim: bool = False
    #: why ``value`` is None for a schema (the output failed to parse or validate), else None
    error: str | None = None


# -- fill-in-the-middle tokens ---------------------------------------------------------------

@dataclass(frozen=True)
class FimFormat:
    """A tokenizer's fill-in-the-middle tokens: the model reads
    ``[prefix_id] prefix [suffix_id] suffix [middle_id]`` and writes the middle, ending it
    with one of ``end_ids``. (DeepSeek-Coder's begin / hole / end tokens fill the same
    three places.)"""

    name: str
    prefix_id: int
    suffix_id: int
    middle_id: int
    end_ids: tuple[int, ...]

    @property
    def marker_ids(self) -> tuple[int, int, int]:
        return (self.prefix_id, self.suffix_id, self.middle_id)


#: (name, prefix, suffix, middle, extra end-of-middle tokens); each marker in its spellings
_FIM_STYLES = (
    ("starcoder", ("<fim_prefix>",), ("<fim_suffix>",), ("<fim_middle>",), ("<file_sep>",)),
    ("fim-pipes", ("<|fim_prefix|>",), ("<|fim_suffix|>",), ("<|fim_middle|>",),
     ("<|endoftext|>", "<|file_separator|>", "<|fim_pad|>")),
    ("deepseek-coder", ("<｜fim▁begin｜>",), ("<｜fim▁hole｜>",), ("<｜fim▁end｜>",), ("<|EOT|>",)),
    ("codellama", ("▁<PRE>", "<PRE>"), ("▁<SUF>", "<SUF>"), ("▁<MID>", "<MID>"), ("▁<EOT>", "<EOT>")),
)

_fim_found: "weakref.WeakKeyDictionary[Vocabulary, dict]" = weakref.WeakKeyDictionary()


def fim_format(model: Any) -> FimFormat | None:
    """The FIM tokens of ``model``'s tokenizer (``model.tokenizer``, when it has one) or
    vocabulary, or None when it has none. A marker is found as a tokenizer entry of that
    name (added and special tokens) or as a vocabulary token spelling exactly its text
    (DeepSeek-Coder's are ordinary byte-level tokens)."""
    vocab = model.vocab
    tokenizer = getattr(model, "tokenizer", None)
    try:
        memo = _fim_found.setdefault(vocab, {})
    except TypeError:
        memo = {}
    key = id(tokenizer)
    if key not in memo:
        memo[key] = _find_fim(vocab, tokenizer)
    return memo[key]


def _find_fim(vocab: Vocabulary, tokenizer: Any) -> FimFormat | None:
    names: dict[str, int] = {}
    if tokenizer is not None:
        try:
            names = dict(tokenizer.get_vocab())
        except Exception:   # a tokenizer without get_vocab: the vocabulary's bytes only
            names = {}
    wanted = {s.encode() for style in _FIM_STYLES for group in style[1:] for s in group}
    by_bytes = {b: i for i, b in enumerate(vocab.tokens) if b in wanted}

    def find(spellings) -> int | None:
        for s in spellings:
            if s in names and 0 <= int(names[s]) < vocab.size:
                return int(names[s])
            if s.encode() in by_bytes:
                return by_bytes[s.encode()]
        return None

    for name, pre, suf, mid, ends in _FIM_STYLES:
        ids = [find(pre), find(suf), find(mid)]
        if None in ids:
            continue
        extra = [find((e,)) for e in ends]
        end_ids = tuple(dict.fromkeys([*vocab.eos_token_ids, *(e for e in extra if e is not None)]))
        if not end_ids:
            continue   # nothing could end the middle
        return FimFormat(name, ids[0], ids[1], ids[2], end_ids)
    return None


# -- the template ----------------------------------------------------------------------------

def _parts(template) -> list:
    """The template as bytes and holes; ConfigurationError for anything else."""
    if isinstance(template, (str, bytes, Hole)) or not isinstance(template, (list, tuple)):
        raise ConfigurationError(f"template must be a list of str and gramgen.Hole, not "
                                 f"{type(template).__name__}")
    parts: list = []
    for i, part in enumerate(template):
        if isinstance(part, Hole):
            parts.append(part)
        elif isinstance(part, str):
            if part:
                parts.append(part.encode("utf-8"))
        else:
            raise ConfigurationError(f"template[{i}] is {type(part).__name__}: a template holds str "
                                     "(fixed text) and gramgen.Hole only")
    return parts


def _empty_only(hole: Hole) -> bool:
    return hole.max_bytes == 0 or hole.tokens == 0 or hole.max_tokens == 0


def _infeasible(inf: Infiller, parts: list, stats: FillStats) -> GramgenError:
    """The error for a template no filling completes, naming the first part after which
    nothing can follow (found by checking each beginning, closed with an open hole)."""
    for k in range(len(parts)):
        stats.checks += 1
        r = inf.check(parts[:k + 1] + [Hole()])
        if r.exhausted:
            break
        if not r.feasible:
            part = parts[k]
            what = (f"the fixed text {part.decode('utf-8', 'replace')!r}" if isinstance(part, bytes)
                    else f"the hole {part!r}")
            where = "starts the template" if k == 0 else "follows what comes before it"
            before = parts[k - 1] if k else None
            hint = (f" (or the bounds of the hole before it, {before!r}, are too tight)"
                    if isinstance(before, Hole) and before != Hole() else "")
            return ConfigurationError(f"template[{k}]: no word of the grammar has {what} where it "
                                      f"{where}{hint}: check the fixed text against the grammar's layout")
    return ConfigurationError("no filling of the holes completes this template to a word of the "
                              "grammar (the last fixed text cannot end it, or the holes' bounds are "
                              "too tight)")


# -- tokenizing fixed text ---------------------------------------------------------------------

class _Encoder:
    """Token ids that spell given bytes exactly: the model's tokenizer when it has one and
    its ids spell them back, else the longest vocabulary token at each point."""

    def __init__(self, model: Any, compiled: CompiledGrammar):
        self.vocab = model.vocab
        self.tokenizer = getattr(model, "tokenizer", None)
        self.table = compiled.token_table

    def spell(self, ids) -> bytes:
        return b"".join(self.vocab.token_bytes(int(t)) for t in ids)

    def __call__(self, data: bytes) -> list[int]:
        if not data:
            return []
        if self.tokenizer is not None:
            try:
                ids = [int(t) for t in self.tokenizer.encode(data.decode("utf-8"), add_special_tokens=False)]
            except (UnicodeDecodeError, TypeError, ValueError):
                ids = None
            if ids is not None and self.spell(ids) == data:
                return ids
        out, pos = [], 0
        while pos < len(data):
            found = self.table.longest_prefix_token(data[pos:])
            if found is None:
                raise ConfigurationError(f"the vocabulary has no token for the bytes {data[pos:pos + 8]!r}")
            out.append(found[0])
            pos += found[1]
        return out

    def lead(self) -> list[int]:
        """What the tokenizer puts before a text (BOS), or nothing."""
        if self.tokenizer is None:
            return []
        try:
            ids = [int(t) for t in self.tokenizer("", add_special_tokens=True)["input_ids"]]
        except Exception:
            return []
        eos = set(self.vocab.eos_token_ids)
        return [t for t in ids if t not in eos]


# -- the fill ----------------------------------------------------------------------------------

def fill(model: LanguageModel, template: SequenceOf[str | Hole], *, schema: Any = None,
         grammar: Grammar | CompiledGrammar | None = None, lark: str | None = None,
         gbnf: str | None = None, regex: str | None = None, prompt: str | SequenceOf[int] | None = None,
         max_new_tokens: int = 256, temperature: float = 0.0, seed: int | None = None,
         fim: bool | Literal["auto"] = "auto", chat: bool = True,
         whitespace: Whitespace = DEFAULT_WHITESPACE, strict: bool = True) -> FillResult:
    """Fill the holes of ``template`` with ``model`` so that the whole text is a word of the
    constraint.

    ``template``: a list of ``str`` (fixed text, kept verbatim) and :class:`~gramgen.Hole`
    (``Hole()`` any text; ``Hole(min_bytes=, max_bytes=)``; ``Hole(tokens=n)`` exactly n
    tokens; ``Hole(max_tokens=n)`` at most n). Give one constraint: ``schema`` (with
    ``whitespace`` and ``strict`` as in :func:`~gramgen.generate`: the fixed text must
    follow that layout), ``grammar``, ``lark``, ``gbnf`` or ``regex``. A template whose
    fixed text no filling can complete raises :class:`~gramgen.ConfigurationError` naming
    the part, before any model work; a template without holes is only checked.

    ``prompt``: what the model reads first (an instruction, the document to extract from):
    a string, wrapped in the chat template when the tokenizer has one and ``chat`` is
    true, or token ids. ``fim``: ``"auto"`` uses fill-in-the-middle prompting when the
    tokenizer has FIM tokens (see :func:`fim_format`), ``True`` requires it
    (ConfigurationError without), ``False`` prompts with the prefix only. With FIM the
    prompt string is put before the text verbatim (no chat template: FIM models are base
    models), and the suffix the model reads is the fixed text after the hole up to the
    next hole (later holes and the text after them are left out, so the model never
    reads a placeholder as text).

    ``max_new_tokens``: generated tokens for all holes together; when it runs out the rest
    is completed from the infiller's witness. ``temperature`` 0 is greedy; above it,
    tokens are sampled (``seed`` makes that reproducible).
    """
    t0 = time.perf_counter()
    if not isinstance(model, LanguageModel):
        raise ConfigurationError(f"model must be a gramgen.Model (see gramgen.load_model) or another "
                                 f"gramgen LanguageModel, not {type(model).__name__}")
    parts = _parts(template)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, Integral) or max_new_tokens < 1:
        raise ConfigurationError(f"max_new_tokens must be a positive int, not {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, Real) or not temperature >= 0 \
            or not np.isfinite(temperature):
        raise ConfigurationError(f"temperature must be a number >= 0, not {temperature!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, Integral) or not 0 <= seed < 2**63):
        raise ConfigurationError(f"seed must be an int from 0 to 2**63 - 1, or None, not {seed!r}")
    if fim not in ("auto", True, False) or (fim != "auto" and not isinstance(fim, bool)):
        raise ConfigurationError(f"fim must be 'auto', True or False, not {fim!r}")
    if not isinstance(chat, bool):
        raise ConfigurationError(f"chat must be True or False, not {chat!r}")
    if prompt is not None and not isinstance(prompt, str) and not (
            isinstance(prompt, (list, tuple)) and prompt
            and all(isinstance(t, (int, np.integer)) and not isinstance(t, bool)
                    and 0 <= int(t) < model.vocab.size for t in prompt)):
        raise ConfigurationError("prompt must be a string, a non-empty list of token ids of the "
                                 f"model's vocabulary, or None, not {prompt!r:.60}")
    found = fim_format(model)
    fmt = found if fim is not False else None
    if fim is True and fmt is None:
        raise ConfigurationError("fim=True, but the model's tokenizer has no fill-in-the-middle tokens "
                                 "(<fim_prefix>, <｜fim▁begin｜>, <PRE>, ...): use fim='auto' or False")
    if fmt is not None and prompt is not None and not isinstance(prompt, str):
        raise ConfigurationError("with FIM prompting the prompt is text put before the prefix: give a "
                                 "string (or fim=False to prompt with token ids)")
    target = target_for(model.vocab, schema=schema, grammar=grammar, lark=lark, gbnf=gbnf, regex=regex,
                        whitespace=whitespace, strict=strict)
    filler = _Filler(model, target.compiled, parts, fmt, prompt, chat, int(max_new_tokens),
                     float(temperature), seed, banned=found.marker_ids if found is not None else ())
    result = filler.run()
    result.value, result.error = _value(result.text, target)
    result.stats.seconds = time.perf_counter() - t0
    return result


def _value(text: str, target) -> tuple[Any, str | None]:
    if not target.is_json:
        return None, None
    try:
        value = json.loads(text)
        if target.model is not None:
            value = target.model.model_validate(value)
        return value, None
    except Exception as exc:   # the grammar and the parser disagree: report, never hide
        return None, f"{type(exc).__name__}: {exc}"


#: what one step decided: extend the hole with a token, close it, or both (a token that
#: ends the hole's text and begins the fixed text after it)
_TOKEN, _CLOSE, _BRIDGE = "token", "close", "bridge"


class _Filler:
    """The state of one :func:`fill` call: the text so far, the model context, the stats."""

    def __init__(self, model, cg: CompiledGrammar, parts: list, fmt: FimFormat | None, prompt,
                 chat: bool, max_new_tokens: int, temperature: float, seed: int | None,
                 banned=()):
        self.model, self.cg, self.vocab = model, cg, model.vocab
        self.parts, self.fmt = parts, fmt
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.rng = np.random.default_rng(seed)
        self.inf = Infiller(cg)
        self.stats = FillStats()
        self.encode = _Encoder(model, cg)
        self.eos = frozenset(self.vocab.eos_token_ids)
        #: FIM markers: control tokens, never text (even when not prompting with them)
        self.banned = frozenset(int(t) for t in banned)
        self.prompt_text = prompt if isinstance(prompt, str) else None
        if fmt is not None:
            self.prompt_ids: list[int] = []
        elif isinstance(prompt, str):
            if getattr(model, "prompt_ids", None) is not None:
                self.prompt_ids = [int(t) for t in model.prompt_ids(prompt, chat=chat)]
            else:
                self.prompt_ids = self.encode.lead() + self.encode(prompt.encode("utf-8"))
        elif prompt is not None:
            self.prompt_ids = [int(t) for t in prompt]
        else:
            self.prompt_ids = self.encode.lead()

    # -- the whole template ----------------------------------------------------------------

    def run(self) -> FillResult:
        parts, inf, stats = self.parts, self.inf, self.stats
        stats.checks += 1
        first = inf.check(parts or [b""])
        if not first.feasible:
            if first.exhausted:
                raise ConfigurationError("the infiller's work budget ran out deciding whether this template "
                                         "can be completed: shorten the template or use fewer holes")
            raise _infeasible(inf, parts, stats)
        self._check_room()
        done = bytearray()
        fillings: list[bytes] = []
        tokens: list[list[int]] = []
        finish: FillFinish = "done"
        self.session = self.model.session()
        try:
            for k, part in enumerate(parts):
                if isinstance(part, bytes):
                    done += part
                    continue
                if finish != "done":
                    break
                content, ids, finish = self._hole(k, bytes(done))
                done += content
                fillings.append(content)
                tokens.append(ids)
        finally:
            close = getattr(self.session, "close", None)
            if close is not None:
                close()
        if finish != "done":   # the holes from the one that stopped on: from the witness
            done, fillings = self._complete(fillings, tokens)
        text = bytes(done)
        if not self.cg.matcher_after(text).is_accepting():   # every state was feasible: never
            raise GramgenError(f"internal error: fill produced {text[:200]!r}, which the grammar "
                               "does not accept; please report it")
        return FillResult(text.decode("utf-8", "replace"),
                          [f.decode("utf-8", "replace") for f in fillings], None, tokens, stats,
                          finish, self.fmt is not None)

    def _check_room(self) -> None:
        room = context_length(self.model)
        if room is None:
            return
        fixed = b"".join(p for p in self.parts if isinstance(p, bytes))
        need = len(self.prompt_ids) + len(self.encode(fixed)) + self.max_new_tokens + 1
        if self.fmt is not None:
            need += 3 + len(self.encode((self.prompt_text or "").encode("utf-8"))) + max(
                (len(self.encode(self._suffix(k))) for k, p in enumerate(self.parts) if isinstance(p, Hole)),
                default=0)
        if need > room:
            raise ConfigurationError(f"the prompt, the template's fixed text and max_new_tokens={self.max_new_tokens} "
                                     f"come to about {need} tokens, more than the model's context of {room}: "
                                     "use a smaller max_new_tokens or a shorter prompt")

    def _suffix(self, k: int) -> bytes:
        """The fixed text after hole ``k`` up to the next hole."""
        out = bytearray()
        for part in self.parts[k + 1:]:
            if isinstance(part, Hole):
                break
            out += part
        return bytes(out)

    def _complete(self, fillings: list[bytes], tokens: list[list[int]]) -> tuple[bytes, list[bytes]]:
        """The text with the last hole started (its filling so far) and every later one
        completed from the infiller's witness."""
        k_holes = [k for k, p in enumerate(self.parts) if isinstance(p, Hole)]
        started = len(fillings)
        segments: list = []
        for i, k in enumerate(k_holes):
            if i < started:
                segments.append(fillings[i])
                if i == started - 1:
                    hole = self.parts[k]
                    segments.append(self._shrunk(hole, len(fillings[i]), len(tokens[i])))
            else:
                segments.append(self.parts[k])
            nxt = k_holes[i + 1] if i + 1 < len(k_holes) else len(self.parts)
            segments.extend(self.parts[k + 1:nxt])
        segments = list(self.parts[:k_holes[0]]) + segments
        self.stats.checks += 1
        r = self.inf.check(segments)
        if not r.feasible:   # every committed state was feasible, so only the budget can say no
            raise GramgenError("the infiller's work budget ran out completing the template from "
                               "its witness; raise max_new_tokens so the model fills every hole")
        got = list(r.fillings)   # the started hole's rest, then every later hole
        out = fillings[:-1] + [fillings[-1] + got[0]] + got[1:]
        tokens += [[] for _ in got[1:]]
        return r.witness, out

    # -- one hole --------------------------------------------------------------------------

    @staticmethod
    def _shrunk(hole: Hole, filled: int, used: int, heal: int = 0) -> Hole:
        """What is left of ``hole`` after ``filled`` bytes in ``used`` tokens; ``heal``
        bytes of known text just before it are given back to it (see :meth:`_hole`)."""
        if hole.tokens is not None:
            return Hole(tokens=hole.tokens - used)
        if hole.max_tokens is not None:
            return Hole(max_tokens=hole.max_tokens - used)
        return Hole(max(0, hole.min_bytes - filled) + heal,
                    None if hole.max_bytes is None else hole.max_bytes - filled + heal)

    def _hole(self, k: int, done: bytes) -> tuple[bytes, list[int], FillFinish]:
        """Generate hole ``k`` after the text ``done``: (its bytes, its tokens, how it ended).

        Token healing: with prefix-only prompting, the last token of the text before a byte
        hole is taken back (its bytes ``heal`` stay in the text) and the first generated
        token must start with them, so the model picks the token boundary (``": "`` then
        ``"Mar`` rather than a lone space). The infiller sees the hole grown by those bytes,
        which is exact because the matcher-checked token starts with them."""
        hole, rest = self.parts[k], self.parts[k + 1:]
        suffix = self._suffix(k)
        fmt = self.fmt
        heal = b""
        if fmt is not None:
            prefix = (self.prompt_text or "").encode("utf-8") + done
            context = ([*self.encode.lead(), fmt.prefix_id, *self.encode(prefix), fmt.suffix_id,
                        *self.encode(suffix), fmt.middle_id])
            close_ids = frozenset(fmt.end_ids)
        else:
            context = self.prompt_ids + self.encode(done)
            if not hole.counts_tokens and done and len(context) > len(self.prompt_ids):
                heal = self.vocab.token_bytes(context[-1])
                if heal and done.endswith(heal):
                    context = context[:-1]
                else:
                    heal = b""
            if suffix:
                close_ids = frozenset(self.encode(suffix)[:1])
            elif not rest:
                close_ids = self.eos
            else:
                close_ids = frozenset()   # another hole follows at once: close only when forced
        if not context:
            context = [self.vocab.eos_token_ids[0]] if self.vocab.eos_token_ids else [0]
        never = np.array(sorted(({int(t) for t in never_ids(self.vocab)} - close_ids) | self.banned),
                         dtype=np.int64)
        state = _HoleState(hole, rest, suffix, done, heal, close_ids,
                           self.cg.matcher_after(done[:len(done) - len(heal)]))
        while True:
            if state.full():
                return bytes(state.content), state.tokens, "done"
            if self.stats.new_tokens >= self.max_new_tokens:
                return bytes(state.content), state.tokens, "max_new_tokens"
            logp = self._logprobs(context + state.tokens, never)
            action, token, extra = self._pick(logp, state)
            if action is None:
                if state.heal == b"" and state.close_ok(self):
                    return bytes(state.content), state.tokens, "done"
                return bytes(state.content), state.tokens, "dead_end"
            if action == _CLOSE:
                return bytes(state.content), state.tokens, "done"
            self.stats.new_tokens += 1
            state.push(token, extra)
            if action == _BRIDGE:
                return bytes(state.content), state.tokens, "done"

    def _logprobs(self, context: list[int], never: np.ndarray) -> np.ndarray:
        logits = self.session.logits([context], last=1)[:, -1]
        if getattr(self.session, "forwarded", True):
            self.stats.forward_passes += 1
        return normalised_logprobs(logits, self.vocab, never)[0]

    def _pick(self, logp: np.ndarray, state: "_HoleState"):
        """The first candidate, in the model's order (greedy) or drawn (sampled), that the
        hole accepts: (action, token, the hole's bytes it adds), or (None, None, None)."""
        refused = 0
        prefix_mask = None
        if self.temperature == 0:
            order = np.argsort(-logp, kind="stable")
            finite = int(np.isfinite(logp).sum())
            i = 0
            while i < finite:
                token = int(order[i])
                i += 1
                if prefix_mask is not None and not prefix_mask[token] and token not in state.close_ids:
                    continue
                found = state.judge(self, token, prefix_mask)
                if found is not None:
                    return found[0], token, found[1]
                refused += 1
                if refused == _MASK_AFTER and prefix_mask is None:
                    prefix_mask = state.matcher.mask()
            return None, None, None
        weights = np.exp((logp - np.max(logp)) / self.temperature)
        weights[~np.isfinite(logp)] = 0.0
        while True:
            total = weights.sum()
            if not total > 0:
                return None, None, None
            token = int(self.rng.choice(len(weights), p=weights / total))
            found = state.judge(self, token, prefix_mask)
            if found is not None:
                return found[0], token, found[1]
            weights[token] = 0.0
            refused += 1
            if refused == _MASK_AFTER and prefix_mask is None:
                prefix_mask = state.matcher.mask()
                keep = prefix_mask.copy()
                keep[list(state.close_ids)] = True
                weights[~keep] = 0.0


class _HoleState:
    """One hole being generated: its bytes and tokens so far, the bytes its first token
    must start with (``heal``), and a matcher over the text so far."""

    def __init__(self, hole: Hole, rest: list, suffix: bytes, done: bytes, heal: bytes,
                 close_ids: frozenset, matcher):
        self.hole, self.rest, self.suffix = hole, list(rest), suffix
        self.done, self.heal, self.close_ids = done, heal, close_ids
        self.matcher = matcher
        self.content = bytearray()
        self.tokens: list[int] = []
        self._close: bool | None = None   # close_ok(), cached until the hole grows

    def full(self) -> bool:
        """The hole has all it may hold."""
        h = self.hole
        if h.tokens is not None:
            return len(self.tokens) >= h.tokens
        if h.max_tokens is not None:
            return len(self.tokens) >= h.max_tokens
        return h.max_bytes is not None and len(self.content) >= h.max_bytes and not self.heal

    def segments(self) -> tuple[list, int]:
        """(segments with the hole as it is now, the hole's slot in them)."""
        before = self.done[:len(self.done) - len(self.heal)] + bytes(self.content)
        hole = _Filler._shrunk(self.hole, len(self.content), len(self.tokens), len(self.heal))
        return [before, hole, *self.rest], 1

    def close_ok(self, filler: _Filler) -> bool:
        """Whether the hole may end here: enough bytes, no healing pending, the rest feasible."""
        if self._close is None:
            h = self.hole
            if self.heal or len(self.content) < h.min_bytes or (h.tokens is not None and len(self.tokens) < h.tokens):
                self._close = False
            else:
                filler.stats.checks += 1
                self._close = filler.inf.feasible([self.done + bytes(self.content), *self.rest])
        return self._close

    def judge(self, filler: _Filler, token: int, prefix_mask) -> tuple[str, bytes] | None:
        """What ``token`` would do here: (_CLOSE, b""), (_TOKEN, its bytes in the hole),
        (_BRIDGE, its bytes in the hole before the fixed text it begins), or None."""
        if token in self.close_ids and self.close_ok(filler):
            return _CLOSE, b""
        data = filler.vocab.token_bytes(token)
        if not data or token in filler.banned or not data.startswith(self.heal):
            return None
        content = data[len(self.heal):]
        ok = prefix_mask[token] if prefix_mask is not None else self.matcher.check(token)
        if not ok:
            filler.stats.rejections += 1
            return None
        h = self.hole
        segments, slot = self.segments()
        if h.counts_tokens or h.max_bytes is None or len(self.content) + len(content) <= h.max_bytes:
            filler.stats.checks += 1
            if filler.inf.allows(segments, slot, token, 0):
                return _TOKEN, content
        if not h.counts_tokens and self.suffix:
            for j in range(1, min(len(content), len(self.suffix)) + 1):
                if not content.endswith(self.suffix[:j]):
                    continue
                inside = content[:-j]
                size = len(self.content) + len(inside)
                if size < h.min_bytes or (h.max_bytes is not None and size > h.max_bytes):
                    continue
                filler.stats.checks += 1
                if filler.inf.feasible([self.done + bytes(self.content) + inside, *self.rest]):
                    return _BRIDGE, inside
        filler.stats.rejections += 1
        return None

    def push(self, token: int, content: bytes) -> None:
        self.matcher.advance(token)
        self.tokens.append(token)
        self.content += content
        self.heal = b""
        self._close = None
