"""Vocabulary: token id -> exact output bytes, checked against real tokenizers.

The tokenizers live in ``shared/tokenizers/<name>/`` beside the repository root.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

pytest.importorskip("transformers")
from tokenizers import (  # noqa: E402
    AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers,
)
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

import gramgen  # noqa: E402
from gramgen.automata.vocabulary import Vocabulary  # noqa: E402
from gramgen.errors import TokenizerError  # noqa: E402

TOKENIZERS = Path(__file__).resolve().parents[2] / "shared" / "tokenizers"
BYTE_LEVEL = ["gpt2", "smollm2", "llama3", "qwen2", "deepseek-coder"]
SENTENCEPIECE = ["llama2", "phi3"]
ALL = BYTE_LEVEL + SENTENCEPIECE

needs_shared = pytest.mark.skipif(
    not TOKENIZERS.is_dir(), reason=f"shared tokenizers not found at {TOKENIZERS}"
)

# deepseek-coder's added tokens "õ÷ÁýÀÿøúþüùöû" decode to single raw bytes (see
# test_deepseek_added_byte_tokens), so these texts avoid those characters.
TEXTS = [
    "Hello, world!",
    " text starting with a space",
    "  two  spaces,\ttabs\tand\n\nnewlines\r\nCRLF",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
    '{"name": "gramgen", "tags": ["a", "b"], "n": -1.5e-3, "ok": true, "x": null}',
    "日本語のテキストと中文字符，한국어도",
    "emoji 😀👍🏽 🇯🇵 and a ZWJ family 👨‍👩‍👧 and 🧑🏿‍🚀",
    "mixé Ünïcâdé — “quotes” … ½ × ∑ ≠ ∞",
    "Привет мир, مرحبا بالعالم, שלום",
    "   ",
    "\n",
    "trailing spaces   ",
    "a\u00a0non-breaking\u200bzero-width\ufeffbom",
    "x" * 50 + " " + "0123456789" * 5,
]


@lru_cache(maxsize=None)
def load(name: str):
    return AutoTokenizer.from_pretrained(str(TOKENIZERS / name))


@lru_cache(maxsize=None)
def vocab(name: str) -> Vocabulary:
    return Vocabulary.from_huggingface(load(name))


def gpt2_alphabet() -> dict[int, str]:
    """GPT-2's bytes_to_unicode, written out independently of the module under test."""
    kept = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    table = {b: chr(b) for b in kept}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def sentencepiece_expected(name: str, text: str) -> bytes:
    """SentencePiece tokenizers prepend one space (``▁``) to the first piece of the text.

    Llama 2's Metaspace pre-tokenizer skips that when the text already starts with a
    space; Phi-3's ``Prepend`` normalizer always adds it. Token bytes keep the space,
    so the expected bytes are the text with that one space in front.
    """
    if name == "llama2" and text.startswith(" "):
        return text.encode()
    return b" " + text.encode()


# --- real tokenizers ----------------------------------------------------------------


@needs_shared
@pytest.mark.parametrize("name", ALL)
def test_size_and_kind(name: str) -> None:
    v = vocab(name)
    assert v.size == len(load(name)) == len(v.tokens)
    assert v.kind == ("byte_level" if name in BYTE_LEVEL else "sentencepiece")


@needs_shared
@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("text", TEXTS)
def test_encoded_text_round_trips_to_exact_bytes(name: str, text: str) -> None:
    ids = load(name).encode(text, add_special_tokens=False)
    got = b"".join(vocab(name).token_bytes(i) for i in ids)
    expected = text.encode() if name in BYTE_LEVEL else sentencepiece_expected(name, text)
    assert got == expected


@needs_shared
@pytest.mark.parametrize("name", ALL)
def test_every_token_agrees_with_the_decoder(name: str) -> None:
    """Decode every non-special id with the tokenizer's own decoder and compare.

    The decoder repairs invalid UTF-8 lossily, so compare against our bytes decoded
    the same way. SentencePiece decoders strip a leading space at the start of a
    sequence only, so each token is decoded after an anchor token "a".
    """
    v, backend = vocab(name), load(name).backend_tokenizer
    ids = [i for i in range(v.size) if i not in v.special_ids]
    if name in BYTE_LEVEL:
        anchor, prefix = [], b""
    else:
        anchor, prefix = [backend.token_to_id("a")], b"a"
    decoded = backend.decode_batch([[*anchor, i] for i in ids], skip_special_tokens=False)
    mismatches = [
        (i, v.token_bytes(i), text)
        for i, text in zip(ids, decoded)
        if (prefix + v.token_bytes(i)).decode("utf-8", "replace") != text
    ]
    assert mismatches == []


@needs_shared
@pytest.mark.parametrize("name", ALL)
def test_special_and_eos_tokens(name: str) -> None:
    tok, v = load(name), vocab(name)
    assert tok.eos_token_id in v.eos_token_ids
    named = [tok.bos_token_id, tok.eos_token_id, tok.pad_token_id, tok.unk_token_id]
    for i in [*named, *tok.all_special_ids]:
        if i is not None:
            assert i in v.special_ids and v.token_bytes(i) == b""
    for i, added in tok.backend_tokenizer.get_added_tokens_decoder().items():
        assert (i in v.special_ids) == added.special


@needs_shared
def test_extra_eos_ids_are_kept_and_special() -> None:
    tok = load("qwen2")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    v = Vocabulary.from_huggingface(tok, eos_token_ids=[im_end, tok.eos_token_id])
    assert v.eos_token_ids == (tok.eos_token_id, im_end)
    assert im_end in v.special_ids
    assert Vocabulary.from_huggingface(tok, eos_token_ids=im_end).eos_token_ids == v.eos_token_ids


@needs_shared
@pytest.mark.parametrize(
    ("name", "token", "expected"),
    [
        ("gpt2", "Ġthe", b" the"),
        ("gpt2", "Ċ", b"\n"),
        ("gpt2", "ĉ", b"\t"),
        ("llama3", "ĠĠĠ", b"   "),
        ("qwen2", "ä½ł", "你".encode()),
        ("llama2", "▁Hello", b" Hello"),
        ("llama2", "<0x0A>", b"\n"),
        ("phi3", "▁▁", b"  "),
        ("phi3", "<0xFF>", b"\xff"),
    ],
)
def test_known_tokens(name: str, token: str, expected: bytes) -> None:
    token_id = load(name).convert_tokens_to_ids(token)
    assert vocab(name).token_bytes(token_id) == expected


@needs_shared
@pytest.mark.parametrize("name", SENTENCEPIECE)
def test_byte_fallback_tokens_are_single_bytes(name: str) -> None:
    tok, v = load(name), vocab(name)
    for byte in range(256):
        token_id = tok.convert_tokens_to_ids(f"<0x{byte:02X}>")
        assert token_id != tok.unk_token_id
        assert v.token_bytes(token_id) == bytes([byte])


@needs_shared
@pytest.mark.parametrize("name", BYTE_LEVEL)
def test_partial_utf8_tokens_keep_exact_bytes(name: str) -> None:
    """Single-byte tokens above 0x7F are not UTF-8 on their own; their byte must survive."""
    tok, v = load(name), vocab(name)
    token_vocab = tok.backend_tokenizer.get_vocab(with_added_tokens=True)
    checked = 0
    for byte, char in gpt2_alphabet().items():
        if byte >= 0x80 and char in token_vocab:
            assert v.token_bytes(token_vocab[char]) == bytes([byte])
            checked += 1
    assert checked >= 64
    invalid = 0
    for token in v.tokens:
        try:
            token.decode("utf-8")
        except UnicodeDecodeError:
            invalid += 1
    assert invalid > 0


@needs_shared
def test_deepseek_added_byte_tokens() -> None:
    """deepseek-coder registers the byte-alphabet characters for 0xF5 etc. as
    non-special added tokens. Its decoder byte-maps them, so e.g. "ü" (added token
    32009) yields the raw byte 0xFC, not UTF-8 "ü": the vocabulary follows the
    decoder, which is what the model's output really becomes."""
    tok, v = load("deepseek-coder"), vocab("deepseek-coder")
    ids = tok.encode("über", add_special_tokens=False)
    assert tok.convert_ids_to_tokens(ids[0]) == "ü" and ids[0] not in v.special_ids
    assert v.token_bytes(ids[0]) == b"\xfc"
    assert v.token_bytes(tok.convert_tokens_to_ids("<|User|>")) == b"<|User|>"


@needs_shared
def test_non_special_added_tokens_contribute_text() -> None:
    qwen2 = load("qwen2")
    assert vocab("phi3").token_bytes(2) == b"</s>" and 2 not in vocab("phi3").special_ids
    pad = qwen2.convert_tokens_to_ids("[PAD151646]")
    assert vocab("qwen2").token_bytes(pad) == b"[PAD151646]"


@needs_shared
def test_fingerprint_is_stable_and_distinguishes() -> None:
    a, b = vocab("gpt2"), Vocabulary.from_huggingface(load("gpt2"))
    assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 64
    assert a.fingerprint != vocab("smollm2").fingerprint
    extra = Vocabulary.from_huggingface(load("gpt2"), eos_token_ids=[198])
    assert extra.fingerprint != a.fingerprint


@needs_shared
def test_package_exports_vocabulary() -> None:
    assert gramgen.Vocabulary is Vocabulary
    assert "byte_level" in repr(vocab("gpt2")) and "50257" in repr(vocab("gpt2"))


# --- in-memory tokenizers (no files) --------------------------------------------------


def wrap(backend: Tokenizer, **kwargs) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(tokenizer_object=backend, **kwargs)


def test_wordpiece_is_refused() -> None:
    wordpiece = models.WordPiece(
        {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "##lo": 4}, unk_token="[UNK]"
    )
    backend = Tokenizer(wordpiece)
    backend.normalizer = normalizers.BertNormalizer()
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece()
    tok = wrap(backend, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")
    with pytest.raises(TokenizerError, match="WordPiece"):
        Vocabulary.from_huggingface(tok)


def tiny_bpe(decoder, byte_fallback: bool = False) -> Tokenizer:
    pieces = ["a", "b", "▁", "▁a", "<0x0A>", "Ġ", "Ġa", "é"]
    bpe = models.BPE({p: i for i, p in enumerate(pieces)}, [], byte_fallback=byte_fallback)
    backend = Tokenizer(bpe)
    backend.decoder = decoder
    return backend


@pytest.mark.parametrize(
    "decoder",
    [
        decoders.BPEDecoder(),
        None,
        decoders.Sequence([decoders.ByteLevel(), decoders.Fuse()]),
        # Strip before Fuse strips every token, not just the start of the sequence.
        decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.Strip(" ", 1, 0), decoders.Fuse()]
        ),
        decoders.Sequence([decoders.Replace("▁", "_"), decoders.Fuse()]),
        decoders.Sequence([decoders.ByteFallback(), decoders.Replace("▁", " ")]),
    ],
)
def test_unmappable_decoders_are_refused(decoder) -> None:
    with pytest.raises(TokenizerError, match="model BPE"):
        Vocabulary.from_huggingface(wrap(tiny_bpe(decoder)))


def test_in_memory_byte_level_with_added_tokens() -> None:
    backend = tiny_bpe(decoders.ByteLevel())
    backend.add_tokens([AddedToken("Ġzz", normalized=False), AddedToken("x y", normalized=False)])
    backend.add_special_tokens(["<eos>"])
    tok = wrap(backend, eos_token="<eos>")
    v = Vocabulary.from_huggingface(tok)
    assert v.size == len(tok) == 11
    assert v.token_bytes(6) == b" a" and v.token_bytes(7) == b"\xe9"
    # "▁" is not in the byte alphabet, so the decoder emits it as UTF-8.
    assert v.token_bytes(3) == "▁a".encode()
    assert v.token_bytes(8) == b" zz" and v.token_bytes(9) == b"x y"
    assert v.eos_token_ids == (10,) and v.token_bytes(10) == b""
    for i in range(10):
        assert v.token_bytes(i).decode("utf-8", "replace") == backend.decode([i])


def test_in_memory_metaspace_unigram() -> None:
    pieces = [
        ("<unk>", 0.0), ("▁hi", -1.0), ("▁", -2.0), ("h", -3.0), ("i", -3.0), ("<0x0A>", -4.0),
    ]
    backend = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.Metaspace()
    backend.decoder = decoders.Metaspace()
    backend.add_special_tokens(["</s>"])
    v = Vocabulary.from_huggingface(wrap(backend, eos_token="</s>", unk_token="<unk>"))
    assert v.kind == "sentencepiece"
    assert v.tokens[1:5] == (b" hi", b" ", b"h", b"i")
    # Without a ByteFallback decoder step "<0x0A>" is ordinary text.
    assert v.token_bytes(5) == b"<0x0A>"
    assert v.special_ids == {0, 6} and v.eos_token_ids == (6,)


# --- slow tokenizers (duck-typed stand-ins; sentencepiece is not installed) ------------


class FakeSentencePieceModel:
    def __init__(self, pieces: list[tuple[str, str]]):
        self.pieces = pieces  # (piece, type)

    def PieceToId(self, piece: str) -> int:  # noqa: N802 - sentencepiece's API
        return next((i for i, (p, _) in enumerate(self.pieces) if p == piece), 0)

    def IsControl(self, i: int) -> bool:  # noqa: N802
        return self.pieces[i][1] == "control"

    def IsUnknown(self, i: int) -> bool:  # noqa: N802
        return self.pieces[i][1] == "unknown"

    def IsByte(self, i: int) -> bool:  # noqa: N802
        return self.pieces[i][1] == "byte"


class FakeSlow:
    def __init__(self, pieces: list[str], added: dict[int, AddedToken], eos: int):
        self.pieces, self.added_tokens_decoder, self.eos_token_id = pieces, added, eos
        self.all_special_ids = [eos]

    def __len__(self) -> int:
        return max([len(self.pieces), *(i + 1 for i in self.added_tokens_decoder)])

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str | None]:
        return [self.pieces[i] if i < len(self.pieces) else None for i in ids]


def test_slow_sentencepiece() -> None:
    sp = [("<unk>", "unknown"), ("<s>", "control"), ("</s>", "control"),
          ("<0x0A>", "byte"), ("<0xE6>", "byte"), ("▁Hello", "normal"), ("<0x41>", "normal")]
    tok = FakeSlow([p for p, _ in sp], {7: AddedToken("<tool>", special=False)}, eos=2)
    tok.sp_model = FakeSentencePieceModel(sp)
    v = Vocabulary.from_huggingface(tok)
    assert v.kind == "sentencepiece" and v.size == 8
    assert v.special_ids == {0, 1, 2}
    # A piece that only looks like a byte is text unless the model says it is a byte.
    assert v.tokens[3:] == (b"\n", b"\xe6", b" Hello", b"<0x41>", b"<tool>")


def test_slow_byte_level_by_known_class() -> None:
    alphabet = gpt2_alphabet()
    GPT2Tokenizer = type("GPT2Tokenizer", (FakeSlow,), {})  # noqa: N806
    pieces = ["Ġthe", alphabet[0xE6], "<|endoftext|>"]
    tok = GPT2Tokenizer(pieces, {2: AddedToken("<|endoftext|>", special=True)}, eos=2)
    tok.byte_decoder = {c: b for b, c in alphabet.items()}
    v = Vocabulary.from_huggingface(tok)
    assert v.kind == "byte_level" and v.tokens == (b" the", b"\xe6", b"")

    other = type("ClvpTokenizer", (FakeSlow,), {})(pieces, {}, eos=2)
    other.byte_decoder = tok.byte_decoder
    with pytest.raises(TokenizerError, match="ClvpTokenizer"):
        Vocabulary.from_huggingface(other)


def test_slow_ambiguous_added_token_is_refused() -> None:
    GPT2Tokenizer = type("GPT2Tokenizer", (FakeSlow,), {})  # noqa: N806
    tok = GPT2Tokenizer(["a"], {1: AddedToken("é", special=False)}, eos=0)
    tok.byte_decoder = {c: b for b, c in gpt2_alphabet().items()}
    with pytest.raises(TokenizerError, match="added token 1"):
        Vocabulary.from_huggingface(tok)


def test_unknown_slow_tokenizer_is_refused() -> None:
    with pytest.raises(TokenizerError, match="FakeSlow"):
        Vocabulary.from_huggingface(FakeSlow(["a", "b"], {}, eos=1))


# --- direct construction --------------------------------------------------------------


def test_direct_construction() -> None:
    v = Vocabulary([b"a", b"<eos>", b"", b"\xff"], eos_token_ids=[1], special_ids=[])
    assert v.size == 4 and v.kind == "custom"
    assert v.tokens == (b"a", b"", b"", b"\xff")  # EOS is special, so it has no bytes
    assert v.special_ids == {1} and v.eos_token_ids == (1,)
    assert 2 not in v.special_ids  # an empty non-special token stays an ordinary id
    with pytest.raises(IndexError):
        v.token_bytes(4)
    with pytest.raises(IndexError):
        v.token_bytes(-1)
    with pytest.raises(ValueError):
        Vocabulary([b"a"], eos_token_ids=[1])
    with pytest.raises(TypeError):
        Vocabulary(["a"], eos_token_ids=[])  # type: ignore[list-item]
    same = Vocabulary([b"a", b"", b"", b"\xff"], eos_token_ids=[1])
    assert same.fingerprint == v.fingerprint
    assert Vocabulary([b"a", b"", b"", b"\xfe"], eos_token_ids=[1]).fingerprint != v.fingerprint

