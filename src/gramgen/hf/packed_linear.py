"""Linear layers of a CPU model run on weights packed once for oneDNN.

On a CPU, PyTorch's ``nn.Linear`` hands each call to a BLAS matrix product that re-packs
the weight every time. One new token (a plain decoding step) takes the fast matrix-vector
path, but two to eight tokens (a speculative step verifying drafts, a forced run, a small
batch) take the matrix-matrix path, and the packing then costs about as much as the
product: measured on SmolLM2-135M with 2 threads, a forward over 2 tokens took about 1.8x
one token and over 6 tokens about 2.1x. With the weights packed once in oneDNN's blocked
layout (the packing PyTorch's own compiler uses when it freezes a CPU model), the same
forward over 2-6 new tokens takes 93-102 ms instead of 157-187 ms, against 84-107 ms for
one token (76-88 ms packed), so verifying drafted positions is nearly free, as on a GPU.
With one torch thread a single row (plain decoding of one sequence) keeps PyTorch's own
product: there the packed one was slower (116 ms against 97 ms).

:func:`pack_linears` swaps each float32 CPU ``nn.Linear``'s ``forward`` for the packed
call, on the module itself: parameters, ``state_dict`` and tied weights are untouched,
and the packed copy costs as much memory again as the linear weights. A layer falls back
to ``nn.Linear``'s own forward whenever the packed call does not apply: autograd
recording (a weight, bias or input that requires grad: the packed op has no gradient),
another device or dtype. A weight changed in place since it was packed is re-packed on
the next call. The products are the same up to floating-point summation order.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pack_linears", "packed_linear_available", "unpack_linears"]

#: the batch size oneDNN's packing is tuned for: 1-8 rows all run at the speed of one
_PACK_ROWS = 8


def packed_linear_available() -> bool:
    """Whether this PyTorch has oneDNN's packed linear (x86 and ARM builds with mkldnn)."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return False
    try:
        w = torch.ones(3, 2)
        packed = torch.ops.mkldnn._reorder_linear_weight(w, _PACK_ROWS)
        out = torch.ops.mkldnn._linear_pointwise(torch.ones(1, 2), packed, None, "none", [], "")
        return bool(torch.equal(out, torch.full((1, 3), 2.0)))
    except (AttributeError, RuntimeError, TypeError):
        return False


class _Packed:
    """The replacement ``forward`` of one ``nn.Linear`` (kept on the instance). It packs on
    its first call and again after the weight changes; copies and pickles of the model
    carry no packed tensor (oneDNN's has no storage to copy) and pack anew."""

    def __init__(self, layer):
        self.layer = layer
        self.version = -1
        self.packed = None

    def __getstate__(self):
        return {"layer": self.layer}

    def __setstate__(self, state):
        self.__init__(state["layer"])

    def _pack(self) -> None:
        import torch

        weight = self.layer.weight
        with torch.no_grad():
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), _PACK_ROWS)
        self.version = weight._version

    def __call__(self, x):
        import torch

        layer = self.layer
        weight = layer.weight
        if (x.dtype != torch.float32 or x.device.type != "cpu" or weight.device.type != "cpu"
                or weight.dtype != torch.float32 or x.dim() < 1
                or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                                 or (layer.bias is not None and layer.bias.requires_grad)))):
            return type(layer).forward(layer, x)
        rows = x.numel() // max(x.shape[-1], 1) if x.shape[-1] else 0
        if rows < 2 and torch.get_num_threads() < 2:   # MKL's matrix-vector product wins there
            return type(layer).forward(layer, x)
        if self.packed is None or weight._version != self.version:
            self._pack()
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if not flat.is_contiguous():
            flat = flat.contiguous()
        out = torch.ops.mkldnn._linear_pointwise(flat, self.packed, layer.bias, "none", [], "")
        return out.reshape(*shape[:-1], out.shape[-1])


def pack_linears(hf_model: Any) -> int:
    """Pack the weights of every float32 ``nn.Linear`` of ``hf_model`` that lies on the CPU
    (see the module docstring); returns how many layers now run packed (0 where oneDNN's
    packed linear is unavailable). Calling it again packs only layers not yet packed."""
    import torch

    if not packed_linear_available():
        return 0
    count = 0
    for module in hf_model.modules():
        if (isinstance(module, torch.nn.Linear) and not isinstance(module.__dict__.get("forward"), _Packed)
                and module.weight.device.type == "cpu" and module.weight.dtype == torch.float32):
            module.forward = _Packed(module)
            count += 1
    return count


def unpack_linears(hf_model: Any) -> int:
    """Undo :func:`pack_linears`: every packed layer runs ``nn.Linear``'s own forward again
    and its packed copy is freed. Returns how many layers were unpacked."""
    count = 0
    for module in hf_model.modules():
        if isinstance(module.__dict__.get("forward"), _Packed):
            del module.forward
            count += 1
    return count
