"""Hugging Face ``transformers`` at the edge: loading models (:func:`load_model`) and a
logits processor for transformers' own ``generate`` (:class:`LogitsProcessor`).

This package imports the layers above it; nothing in them imports it.
"""

from .logits_processor import LogitsProcessor
from .model import Model, cache_dir, clear_cache, converted_folder, load_model
from .packed_linear import pack_linears, unpack_linears

__all__ = ["LogitsProcessor", "Model", "cache_dir", "clear_cache", "converted_folder", "load_model",
           "pack_linears", "unpack_linears"]
