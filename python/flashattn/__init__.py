"""flashattn - portable FlashAttention (cpu, OpenCL, CUDA) with flash-attn 2's Python API.

    from flashattn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)   # numpy arrays or torch tensors

On torch tensors every function is a torch.library custom op with autograd and a fake
(meta) implementation, so it trains and runs under torch.compile(fullgraph=True).
docs/python.md has the API side by side with flash-attn's.
"""
import sys

from ._lib import LIBRARY_PATH, FlashAttnError, lib
from .interface import (devices, flash_attn_backward, flash_attn_func, flash_attn_varlen_func,
                        flash_attn_with_kvcache, plan)

__version__ = lib.fa_version().decode()

# The custom ops (torch.ops.flashattn.fwd, .bwd) exist once torch is there; torch itself is
# imported only by a caller who has it already, or on the first torch tensor seen.
if "torch" in sys.modules:
    from . import _torch  # noqa: F401

__all__ = ["flash_attn_func", "flash_attn_backward", "flash_attn_varlen_func",
           "flash_attn_with_kvcache", "devices", "plan", "FlashAttnError", "LIBRARY_PATH",
           "__version__"]
