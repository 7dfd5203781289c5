"""Packed token masks: bit ``i`` of word ``i // 32`` is token ``i``.

This is the layout xgrammar and llguidance use for logits masking, so a packed mask can
be copied straight into a ``[batch, ceil(V/32)]`` int32 tensor.
"""

from __future__ import annotations

import operator
import os
import sys

import numpy as np

from ..errors import ConfigurationError

try:  # the C kernels (setup.py builds them where a compiler is at hand)
    from . import _bits
except ImportError:  # pragma: no cover - exercised where the extension is not built
    _bits = None
if os.environ.get("GRAMGEN_NATIVE", "1") == "0":
    _bits = None

_INT32 = np.dtype(np.int32)


def n_words(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def pack(allowed: np.ndarray) -> np.ndarray:
    """bool[V] -> uint32[ceil(V/32)]."""
    n = allowed.shape[0]
    padded = np.zeros(n_words(n) * 32, dtype=bool)
    padded[:n] = allowed
    return np.packbits(padded, bitorder="little").view("<u4").astype(np.uint32, copy=False)


def unpack(words: np.ndarray, vocab_size: int) -> np.ndarray:
    """uint32[ceil(V/32)] -> bool[V]."""
    bits = np.unpackbits(words.astype("<u4", copy=False).view(np.uint8), bitorder="little")
    return bits[:vocab_size].view(bool)


_SHIFTS = np.arange(32, dtype=np.uint32)


def positions(words: np.ndarray, limit: int) -> np.ndarray:
    """The indices (below ``limit``, ascending, int64) of the set bits of ``words``: only
    the non-zero words are expanded, so a sparse mask of a large vocabulary costs little."""
    if _bits is not None and words.dtype == np.uint32 and words.flags.c_contiguous:
        return np.frombuffer(_bits.positions(words, limit), dtype=np.int64)
    nz = np.flatnonzero(words)
    if not nz.size:
        return nz
    rows, cols = np.nonzero((words[nz].astype(np.uint32, copy=False)[:, None] >> _SHIFTS) & 1)
    out = nz[rows] * 32 + cols
    return out[out < limit] if out[-1] >= limit else out


def take_few(words: np.ndarray, max_count: int) -> np.ndarray | None:
    """The set bits of ``words`` (ascending, int64) with ``words`` zeroed, when at most
    ``max_count`` are set; None, and ``words`` untouched, when more are. Reads a scratch
    mask out as a short list and leaves it clean for its next use."""
    if _bits is not None and words.dtype == np.uint32 and words.flags.c_contiguous:
        found = _bits.take_few(words, max_count)
        return None if found is None else np.frombuffer(found, dtype=np.int64)
    if count(words) > max_count:
        return None
    out = positions(words, 32 * words.shape[0])
    words[:] = 0
    return out


def set_bits(words: np.ndarray, ids, rank_to_id: np.ndarray | None = None) -> None:
    """Set the bits of token ``ids`` in place (of ``rank_to_id[ids]`` when given: ``ids``
    are then ranks of a token table)."""
    ids = np.asarray(ids)
    if ids.dtype != np.int32:
        ids = ids.astype(np.int64, copy=False)
    if not ids.size:
        return
    if _bits is not None and words.dtype == np.uint32 and words.flags.c_contiguous \
            and (rank_to_id is None or rank_to_id.flags.c_contiguous):
        if rank_to_id is None:
            _bits.set_bits(words, np.ascontiguousarray(ids))
        else:
            _bits.set_bits(words, np.ascontiguousarray(ids), rank_to_id)
        return
    if rank_to_id is not None:
        ids = rank_to_id[ids]
    ids = ids.astype(np.int64, copy=False)
    np.bitwise_or.at(words, ids >> 5, (np.uint32(1) << (ids & 31).astype(np.uint32)))


def unknown_positions(words: np.ndarray, limit: int, rank_to_id: np.ndarray, known: np.ndarray) -> np.ndarray:
    """The set bits of ``words`` (a mask over ranks of a token table) below ``limit``
    whose token ``rank_to_id[rank]`` is not set in ``known`` (a mask over token ids)."""
    if _bits is not None and words.dtype == np.uint32 and known.dtype == np.uint32 \
            and words.flags.c_contiguous and known.flags.c_contiguous and rank_to_id.flags.c_contiguous:
        return np.frombuffer(_bits.candidates(words, limit, rank_to_id, known), dtype=np.int64)
    ranks = positions(words, limit)
    ids = rank_to_id[ranks]
    return ranks[((known[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1) == 0]


def count(words: np.ndarray) -> int:
    return int(np.bitwise_count(words).sum())


def allocate_token_bitmask(batch_size: int, vocab_size: int):
    """An int32 ``[batch, ceil(V/32)]`` bitmask (torch if installed, else numpy), all ones;
    ConfigurationError unless ``batch_size`` is an int >= 0 and ``vocab_size`` one >= 1."""
    for name, value, least in (("batch_size", batch_size, 0), ("vocab_size", vocab_size, 1)):
        if isinstance(value, bool) or not hasattr(value, "__index__") or operator.index(value) < least:
            raise ConfigurationError(f"{name} must be an int of at least {least}, not {value!r:.60}")
    batch_size, vocab_size = operator.index(batch_size), operator.index(vocab_size)
    try:
        import torch

        return torch.full((batch_size, n_words(vocab_size)), -1, dtype=torch.int32)
    except ImportError:  # pragma: no cover - torch is optional for the engine
        return np.full((batch_size, n_words(vocab_size)), -1, dtype=np.int32)


def check_target(bitmask, row, min_words: int) -> None:
    """ConfigurationError unless ``bitmask`` is a writable int32 numpy array or torch tensor
    of shape ``[batch, >= min_words]`` and ``row`` an int in ``[0, batch)``: nothing is
    converted silently (a float array would take the bits as numbers). A few comparisons,
    cheap next to a mask."""
    if (bitmask.__class__ is np.ndarray and bitmask.dtype is _INT32 and row.__class__ is int
            and bitmask.ndim == 2 and 0 <= row < bitmask.shape[0] and bitmask.shape[1] >= min_words
            and bitmask.flags.writeable):
        return  # the common case, in one expression
    if isinstance(bitmask, np.ndarray):
        if bitmask.dtype is not _INT32 and bitmask.dtype != _INT32:
            raise ConfigurationError(f"the bitmask must be an int32 array, not {bitmask.dtype} "
                                     "(allocate it with gramgen.allocate_token_bitmask)")
        if not bitmask.flags.writeable:
            raise ConfigurationError("the bitmask array is read-only")
    else:
        torch = sys.modules.get("torch")  # not imported: the argument is no tensor
        if torch is None or not isinstance(bitmask, torch.Tensor):
            raise ConfigurationError(f"the bitmask must be an int32 numpy array or torch tensor, "
                                     f"not {type(bitmask).__name__}")
        if bitmask.dtype != torch.int32:
            raise ConfigurationError(f"the bitmask must be an int32 tensor, not {bitmask.dtype} "
                                     "(allocate it with gramgen.allocate_token_bitmask)")
    shape = tuple(bitmask.shape)
    if len(shape) != 2 or shape[1] < min_words:
        raise ConfigurationError(f"the bitmask must have shape [batch, {min_words}] (ceil(vocab size / 32) "
                                 f"columns or more), not {list(shape)}")
    if row.__class__ is not int or not 0 <= row < shape[0]:
        if isinstance(row, bool):
            raise ConfigurationError(f"row must be an int, not a bool ({row!r})")
        try:
            row = operator.index(row)
        except TypeError:
            raise ConfigurationError(f"row must be an int, not {type(row).__name__} ({row!r:.60})") from None
        if not 0 <= row < shape[0]:
            rows = f"rows 0 to {shape[0] - 1}" if shape[0] else "no rows"
            raise ConfigurationError(f"row {row} is out of range: the bitmask has {rows}")


def write_row(bitmask, row: int, words: np.ndarray) -> None:
    """Copy packed ``words`` into row ``row`` of a numpy or torch int32 bitmask (checked
    by :func:`check_target`)."""
    data = words.view(np.int32)
    if isinstance(bitmask, np.ndarray):
        bitmask[row, : data.shape[0]] = data
        bitmask[row, data.shape[0]:] = 0
        return
    import torch  # a torch tensor, possibly on an accelerator

    src = torch.from_numpy(data)
    target = bitmask[row]
    if target.device.type != "cpu":
        src = src.to(target.device, non_blocking=True)
    target[: data.shape[0]].copy_(src)
    if target.shape[0] > data.shape[0]:
        target[data.shape[0]:] = 0


def apply_bitmask(logits, bitmask):
    """``logits`` (torch ``[batch, width]``) with ``-inf`` wherever the packed int32
    ``bitmask`` (torch ``[batch, words]``, on the logits' device) has a 0 bit; columns
    beyond the bitmask count as 0. Every path that masks logits uses this function."""
    import torch  # torch is optional for the engine

    if not logits.is_floating_point():
        raise ConfigurationError(f"scores must be a floating-point tensor (masked entries become -inf), "
                                 f"not {logits.dtype}")
    width = logits.shape[-1]
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    # (the width spelled out: a batch of no rows has no -1 to infer)
    bits = ((bitmask.unsqueeze(-1) >> shifts) & 1).reshape(bitmask.shape[0], bitmask.shape[1] * 32).bool()
    if bits.shape[1] < width:
        bits = torch.nn.functional.pad(bits, (0, width - bits.shape[1]), value=False)
    return logits.masked_fill(~bits[:, :width], float("-inf"))
