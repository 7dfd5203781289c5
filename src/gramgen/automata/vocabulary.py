"""The bytes each token id contributes to the output.

Grammars constrain *bytes*, models emit *token ids*; :class:`Vocabulary` is the bridge.
It is built once per tokenizer from what the tokenizer's decoder really does, so that
concatenating ``token_bytes`` over a generated sequence gives exactly the decoded bytes
(before any lossy UTF-8 repair).

Two kinds of Hugging Face tokenizer are mapped, detected from the backend's model and
decoder, never from the tokenizer's name:

* ``byte_level`` (GPT-2, Llama 3, Qwen 2, ...): token strings are spelled in the GPT-2
  byte alphabet, which is inverted here.
* ``sentencepiece`` (Llama 2, Phi-3, ...): ``▁`` is a space and, with byte fallback,
  ``<0xNN>`` is the single raw byte ``NN``.

Anything else (WordPiece, an unfamiliar decoder pipeline) raises :class:`TokenizerError`
instead of guessing: a wrong byte here silently breaks every constraint downstream.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from functools import cached_property, partial
from typing import Any

from gramgen.errors import TokenizerError

__all__ = ["Vocabulary"]

_SPACE_MARK = "\u2581"  # "▁", SentencePiece's visible space
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _gpt2_byte_alphabet() -> dict[int, str]:
    """GPT-2's bytes-to-unicode map: printable Latin-1 bytes stand for themselves,
    the other 68 bytes are moved, in order, to U+0100 onward."""
    kept = [*range(33, 127), *range(161, 173), *range(174, 256)]
    alphabet = {b: chr(b) for b in kept}
    moved = (b for b in range(256) if b not in alphabet)
    alphabet.update({b: chr(256 + n) for n, b in enumerate(moved)})
    return alphabet


_BYTE_ALPHABET = _gpt2_byte_alphabet()
_CHAR_TO_BYTE = {c: b for b, c in _BYTE_ALPHABET.items()}
# str.translate table sending each alphabet character to the code point of its byte, so
# that .encode("latin-1") yields the bytes. Code points 0-255 that are *not* alphabet
# characters go to U+FFFF, which makes latin-1 encoding fail on purpose (see below).
_TO_LATIN1 = {ord(c): b for b, c in _BYTE_ALPHABET.items()}
_TO_LATIN1.update({b: 0xFFFF for b in range(256) if b not in _TO_LATIN1})


def _byte_level_bytes(token: str) -> bytes:
    """Invert the byte alphabet, like the ``ByteLevel`` decoder: a token with any
    character outside the alphabet is emitted as its own UTF-8 instead."""
    try:
        return token.translate(_TO_LATIN1).encode("latin-1")
    except UnicodeEncodeError:
        return token.encode("utf-8")


def _sentencepiece_bytes(token: str, byte_fallback: bool) -> bytes:
    token = token.replace(_SPACE_MARK, " ")
    if byte_fallback and (match := _BYTE_TOKEN.fullmatch(token)):
        return bytes([int(match[1], 16)])
    return token.encode("utf-8")


class Vocabulary:
    """Token id -> bytes, plus which ids are EOS and which are special.

    ``tokens[i]`` is what token ``i`` adds to the output. Special ids (control tokens,
    EOS among them) map to ``b""``: they are never part of grammar-constrained text.
    A non-special token may also have ``b""`` (an unused id); it can never advance a
    grammar, so the engine never allows it.

    SentencePiece decoders drop the space of a leading ``▁`` at the very start of a
    sequence (``Strip`` after ``Fuse``, or ``Metaspace`` on the first token). That rule
    depends on position, not on the token, so it is not applied here: ``"▁Hello"`` is
    always ``b" Hello"``. Callers that need the decoder's exact text for a sequence's
    first token strip that one space themselves.
    """

    def __init__(
        self,
        tokens: Sequence[bytes],
        eos_token_ids: Iterable[int],
        special_ids: Iterable[int] = (),
        *,
        kind: str = "custom",
    ) -> None:
        size = len(tokens)
        eos = tuple(dict.fromkeys(int(i) for i in eos_token_ids))
        special = frozenset(int(i) for i in special_ids) | frozenset(eos)
        bad = [i for i in special if not 0 <= i < size]
        if bad:
            raise ValueError(f"token ids {sorted(bad)[:5]} are outside a vocabulary of {size}")
        for i, token in enumerate(tokens):
            if not isinstance(token, bytes):
                raise TypeError(f"token {i} is {type(token).__name__}, expected bytes")
        self.tokens: tuple[bytes, ...] = tuple(
            b"" if i in special else token for i, token in enumerate(tokens)
        )
        self.eos_token_ids: tuple[int, ...] = eos
        self.special_ids: frozenset[int] = special
        self.kind = kind

    @classmethod
    def from_huggingface(
        cls, tokenizer: Any, eos_token_ids: int | Iterable[int] = ()
    ) -> Vocabulary:
        """Build from a ``transformers`` tokenizer, fast (tokenizer.json) or slow.

        ``eos_token_ids`` adds ids that also end generation (e.g. a chat model's
        ``<|im_end|>``, or ``generation_config.eos_token_id``) to
        ``tokenizer.eos_token_id``. Special ids are the backend's special added tokens
        plus ``tokenizer.all_special_ids``. Raises :class:`TokenizerError` for a
        tokenizer whose bytes cannot be derived exactly.
        """
        if isinstance(eos_token_ids, int):
            eos_token_ids = [eos_token_ids]
        size = len(tokenizer)
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is not None:
            kind, by_id, special = _read_fast(backend)
        else:
            kind, by_id, special = _read_slow(tokenizer, size)
        special |= set(getattr(tokenizer, "all_special_ids", ()))
        outside = [i for i in (*by_id, *special) if not 0 <= i < size]
        if outside:
            raise TokenizerError(
                f"token ids {sorted(outside)[:5]} are not below len(tokenizer) = {size}"
            )
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        tokens = [by_id.get(i, b"") for i in range(size)]
        return cls(tokens, [*eos, *eos_token_ids], special, kind=kind)

    @property
    def size(self) -> int:
        """Number of token ids (``len(tokenizer)``); token masks have this length."""
        return len(self.tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes ``token_id`` contributes to the output (``b""`` if special)."""
        if not 0 <= token_id < len(self.tokens):
            raise IndexError(f"token id {token_id} is outside a vocabulary of {len(self.tokens)}")
        return self.tokens[token_id]

    @cached_property
    def fingerprint(self) -> str:
        """SHA-256 hex of tokens, EOS and special ids: a cache key stable across runs."""
        digest = hashlib.sha256(b"gramgen-vocabulary-v1")
        for ids in (list(map(len, self.tokens)), self.eos_token_ids, sorted(self.special_ids)):
            digest.update(struct.pack(f"<Q{len(ids)}Q", len(ids), *ids))
        digest.update(b"".join(self.tokens))
        return digest.hexdigest()

    def __repr__(self) -> str:
        return (
            f"Vocabulary(kind={self.kind!r}, size={self.size}, "
            f"eos_token_ids={self.eos_token_ids}, special={len(self.special_ids)})"
        )


# --- fast tokenizers (a `tokenizers` backend) ----------------------------------------


def _read_fast(backend: Any) -> tuple[str, dict[int, bytes], set[int]]:
    """Map the model vocabulary and the added tokens through the decoder's rule.

    The backend decoder also runs over added tokens (checked with ``tokenizers`` 0.23:
    deepseek-coder's non-special added token ``"õ"`` decodes to the byte 0xF5), so
    non-special added tokens get the same mapping as model tokens.
    """
    kind, to_bytes = _decoder_rule(backend)
    by_id = {i: to_bytes(s) for s, i in backend.get_vocab(with_added_tokens=False).items()}
    special: set[int] = set()
    for i, added in backend.get_added_tokens_decoder().items():
        if added.special:
            special.add(i)
        else:
            by_id[i] = to_bytes(added.content)
    return kind, by_id, special


def _component(component: Any) -> dict[str, Any] | None:
    # A component's pickled state is its tokenizer.json entry; reading components
    # avoids serialising (and parsing) the whole tokenizer with its merges.
    return json.loads(component.__getstate__()) if component is not None else None


def _describe(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "none"
    parts = entry.get("decoders") or entry.get("pretokenizers") or entry.get("normalizers")
    if entry["type"] == "Sequence" and parts is not None:
        return "Sequence[" + ", ".join(_describe(p) for p in parts) + "]"
    return entry["type"]


def _decoder_rule(backend: Any) -> tuple[str, Callable[[str], bytes]]:
    """Identify the tokenizer kind from its model and decoder, or refuse."""
    model = type(backend.model).__name__
    decoder = _component(backend.decoder)
    found = (
        f"model {model}, decoder {_describe(decoder)}, "
        f"pre_tokenizer {_describe(_component(backend.pre_tokenizer))}"
    )
    if model in ("BPE", "Unigram") and decoder is not None:
        steps = decoder["decoders"] if decoder["type"] == "Sequence" else [decoder]
        if [step["type"] for step in steps] == ["ByteLevel"]:
            return "byte_level", _byte_level_bytes
        byte_fallback = _sentencepiece_byte_fallback(steps)
        if byte_fallback is not None:
            return "sentencepiece", partial(_sentencepiece_bytes, byte_fallback=byte_fallback)
    raise TokenizerError(f"cannot map this tokenizer's tokens to bytes exactly ({found})")


def _sentencepiece_byte_fallback(steps: list[dict[str, Any]]) -> bool | None:
    """``None`` unless ``steps`` is a SentencePiece decoder; else whether it has byte fallback.

    Accepted: ``Replace("▁", " ")`` or ``Metaspace("▁")``, then optionally
    ``ByteFallback``, ``Fuse``, and ``Strip(" ", start<=1, stop=0)`` after ``Fuse``
    (after fusing, Strip only touches the start of the whole sequence). Any other
    order could make a token's bytes depend on its neighbours.
    """
    if not steps:
        return None
    first, rest = steps[0], [step["type"] for step in steps[1:]]
    replaces_space = (
        first["type"] == "Replace"
        and first["pattern"] == {"String": _SPACE_MARK}
        and first["content"] == " "
    ) or (first["type"] == "Metaspace" and first["replacement"] == _SPACE_MARK)
    if not replaces_space:
        return None
    if rest and rest[-1] == "Strip":
        strip = steps[-1]
        exact = (strip["content"], strip["stop"]) == (" ", 0) and strip["start"] <= 1
        if "Fuse" not in rest or not exact:
            return None
        rest = rest[:-1]
    if rest not in ([], ["ByteFallback"], ["Fuse"], ["ByteFallback", "Fuse"]):
        return None
    return "ByteFallback" in rest


# --- slow tokenizers (pure Python, no tokenizer.json) ---------------------------------

# Slow classes whose decode is exactly "join, then invert the byte alphabet".
_SLOW_BYTE_LEVEL = frozenset({"GPT2Tokenizer", "Qwen2Tokenizer", "CodeGenTokenizer"})


def _read_slow(tokenizer: Any, size: int) -> tuple[str, dict[int, bytes], set[int]]:
    """Map a slow tokenizer through ``convert_ids_to_tokens``.

    SentencePiece models follow the ``sp_model``'s own piece types (byte, control,
    unknown). Byte-level is accepted only for known classes with the GPT-2 alphabet.
    """
    added = dict(getattr(tokenizer, "added_tokens_decoder", {}))
    ids = [i for i in range(size) if i not in added]
    pieces = dict(zip(ids, tokenizer.convert_ids_to_tokens(ids)))
    special = {i for i, token in added.items() if token.special}
    sp_model = getattr(tokenizer, "sp_model", None)
    byte_decoder = getattr(tokenizer, "byte_decoder", None)

    if sp_model is not None:
        kind = "sentencepiece"
        to_bytes: Callable[[str], bytes] = partial(_sentencepiece_bytes, byte_fallback=False)
        by_id: dict[int, bytes] = {}
        for i, piece in pieces.items():
            if piece is None:
                continue
            sp_id = sp_model.PieceToId(piece)
            if sp_model.IsControl(sp_id) or sp_model.IsUnknown(sp_id):
                special.add(i)
            elif sp_model.IsByte(sp_id):
                by_id[i] = _sentencepiece_bytes(piece, byte_fallback=True)
            else:
                by_id[i] = to_bytes(piece)
    elif type(tokenizer).__name__ in _SLOW_BYTE_LEVEL and byte_decoder == _CHAR_TO_BYTE:
        kind, to_bytes = "byte_level", _byte_level_bytes
        by_id = {i: to_bytes(piece) for i, piece in pieces.items() if piece is not None}
    else:
        raise TokenizerError(
            f"cannot map the slow tokenizer {type(tokenizer).__name__} to bytes exactly "
            "(neither a SentencePiece model nor a known byte-level class)"
        )

    # Transformers versions disagree on whether added tokens pass through the decoder;
    # accept an added token only where both readings give the same bytes.
    for i, token in added.items():
        if token.special:
            continue
        literal = token.content.encode("utf-8")
        if to_bytes(token.content) != literal:
            raise TokenizerError(f"added token {i} ({token.content!r}) has ambiguous bytes")
        by_id[i] = literal
    return kind, by_id, special
