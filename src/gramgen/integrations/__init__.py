"""Using gramgen with Hugging Face ``transformers`` models: loading, generation, logits processing."""

from .generation import GenerationResult, GenerationStats, generate
from .logits_processor import LogitsProcessor
from .model import Model, cache_dir, load_model

__all__ = ["GenerationResult", "GenerationStats", "LogitsProcessor", "Model", "cache_dir",
           "generate", "load_model"]
