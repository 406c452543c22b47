"""_torch.py - the functions on torch tensors: one torch.library custom op for the forward
(dense, varlen and KV cache problems) and one for the backward, with register_fake (shapes for
torch.compile) and register_autograd (dq, dk, dv and d_sinks), so they train and compile with
fullgraph=True. CUDA tensors on the cuda backend are wrapped in place and run on torch's current
stream (CudaAdapter, _cuda.py); tensors on another device than the CPU are otherwise copied to
it and back (the cpu and OpenCL backends read host memory).
"""
from typing import List, Optional

import torch

from . import _block_mask, _core, _cuda, _ops, _rotary, interface
from ._core import Arr

_DTYPES = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_TORCH = {v: k for k, v in _DTYPES.items()}


def _extent(x):
    if x.numel() == 0:
        return 0
    return (sum((n - 1) * s for n, s in zip(x.shape, x.stride())) + 1) * x.element_size()


def _usable(x):
    return x.device.type == "cpu" and (x.dim() == 0 or x.stride()[-1] == 1 or
                                       x.shape[-1] <= 1) and all(s >= 0 for s in x.stride())


def _in_place(x):
    return x if _usable(x) else x.cpu().contiguous()


class TorchAdapter:
    name = "torch"
    context = staticmethod(_core.context)

    @staticmethod
    def prepare(x, name):
        if not isinstance(x, torch.Tensor):
            raise TypeError("flashattn: %s must be a torch tensor, not %s"
                            % (name, type(x).__name__))
        if x.dtype not in _DTYPES:
            raise TypeError("flashattn: %s must be float32, float16 or bfloat16, not %s"
                            % (name, x.dtype))
        return _in_place(x)

    @staticmethod
    def dtype(x):
        return _DTYPES[x.dtype]

    @staticmethod
    def shape(x):
        return tuple(x.shape)

    @staticmethod
    def strides(x):
        return tuple(s if n > 1 else 0 for n, s in zip(x.shape, x.stride()))

    @staticmethod
    def signature(x):
        """What a cached call depends on: the kind, shape, strides, dtype and whether on the CPU
        (other devices are copied or wrapped, never cached)."""
        return type(x), x.shape, x.stride(), x.dtype, x.is_cpu

    ptr = staticmethod(torch.Tensor.data_ptr)  # the method itself: no Python frame per call

    @staticmethod
    def arr(x):
        return Arr(x.data_ptr(), _extent(x))

    @staticmethod
    def empty(shape, dtype, like):
        return torch.empty(shape, dtype=_TORCH[dtype])

    @staticmethod
    def vector_f32(x, name):
        return torch.as_tensor(x).to("cpu", torch.float32).contiguous()

    @staticmethod
    def int32(x, name):
        x = torch.as_tensor(x)
        if x.dtype.is_floating_point or x.dtype.is_complex:
            raise TypeError("flashattn: %s must be integers, not %s" % (name, x.dtype))
        return x.to("cpu", torch.int32).contiguous()

    @staticmethod
    def host_mask(x):
        return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x

    @staticmethod
    def from_numpy(x):
        return torch.from_numpy(x)

    @staticmethod
    def lse(x, shape):
        x = x.to("cpu", torch.float32).contiguous()
        if tuple(x.shape) != tuple(shape):
            raise ValueError("flashattn: softmax_lse must have shape %s, has %s"
                             % (tuple(shape), tuple(x.shape)))
        return x

    @staticmethod
    def bias(x, shape, dtype):
        if x.dtype not in (torch.float32, _TORCH[dtype]):
            raise TypeError("flashattn: bias must be float32 or q's dtype, not %s" % x.dtype)
        try:
            x = torch.broadcast_to(x, shape)
        except RuntimeError:
            raise ValueError("flashattn: bias of shape %s does not broadcast to (batch, nheads, "
                             "seqlen_q, seqlen_k) = %s" % (tuple(x.shape), tuple(shape))) from None
        return _in_place(x)


class CudaAdapter(TorchAdapter):
    """Tensors on CUDA device `ordinal` used where they are: outputs made there, the run on an
    interop context of torch's current stream (_cuda.py), every tensor wrapped in place."""
    name = "torch-cuda"

    def __init__(self, ordinal):
        self.ordinal = ordinal
        self.device = torch.device("cuda", ordinal)

    def prepare(self, x, name):
        if not isinstance(x, torch.Tensor):
            raise TypeError("flashattn: %s must be a torch tensor, not %s"
                            % (name, type(x).__name__))
        if x.dtype not in _DTYPES:
            raise TypeError("flashattn: %s must be float32, float16 or bfloat16, not %s"
                            % (name, x.dtype))
        usable = x.stride()[-1] == 1 and all(st >= 0 for st in x.stride())
        return x if usable else x.contiguous()

    def signature(self, x):
        raise TypeError("not cached: the context follows torch's current stream")

    def empty(self, shape, dtype, like):
        return torch.empty(shape, dtype=_TORCH[dtype], device=self.device)

    def vector_f32(self, x, name):
        return torch.as_tensor(x).to(self.device, torch.float32).contiguous()

    def int32(self, x, name):
        return TorchAdapter.int32(x, name).to(self.device)

    def lse(self, x, shape):
        return TorchAdapter.lse(x, shape).to(self.device)

    def bias(self, x, shape, dtype):
        if x.dtype not in (torch.float32, _TORCH[dtype]):
            raise TypeError("flashattn: bias must be float32 or q's dtype, not %s" % x.dtype)
        return torch.broadcast_to(x.to(self.device), shape)

    def from_numpy(self, x):
        return torch.from_numpy(x).to(self.device)

    def context(self, backend, device):
        return _interop().context(self.ordinal, torch.cuda.current_stream(self.device)
                                  .cuda_stream)


_EMPTY = {}  # 16 bytes of each CUDA device's memory, bound for a tensor of no bytes


def _empty_on(ordinal):
    if ordinal not in _EMPTY:
        _EMPTY[ordinal] = torch.empty(16, dtype=torch.uint8, device=torch.device("cuda",
                                                                                 ordinal))
    return _EMPTY[ordinal].data_ptr()


def _interop():
    if _cuda.INTEROP is None:
        _cuda.INTEROP = _cuda.Interop(empty=_empty_on)
    return _cuda.INTEROP


def adapter(tensors, backend, device):
    """The adapter of a call's tensors: CudaAdapter where _cuda.placement wraps them, else
    TorchAdapter (host tensors, or others copied through the host)."""
    devices = {(x.device.type, x.device.index) for x in tensors if isinstance(x, torch.Tensor)}
    if all(t == "cpu" for t, _ in devices):
        return TorchAdapter
    resolved = _core.context(backend, device).backend
    if _cuda.placement(devices, resolved, device) == _cuda.WRAP:
        return CudaAdapter(device)
    return TorchAdapter


def _seq(ad, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqlens_k,
         block_table):
    if cu_seqlens_q is not None:
        return _ops.varlen_seq(ad, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                               max_seqlen_k)
    if seqlens_k is not None or block_table is not None:
        lengths = None if seqlens_k is None else ad.int32(seqlens_k, "cache_seqlens")
        return _ops.kvcache_seq(ad, q, k, v, lengths, block_table)
    return None


def _options(dropout_p, softmax_scale, causal, window_left, window_right, softcap, seed,
             offset, backend, device):
    return dict(dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                window_size=(window_left, window_right), softcap=softcap, seed=seed,
                offset=offset, backend=backend, device=device)


@torch.library.custom_op("flashattn::fwd", mutates_args=(), device_types=None)
def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, alibi_slopes: Optional[torch.Tensor],
         bias: Optional[torch.Tensor], sinks: Optional[torch.Tensor],
         cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
         max_seqlen_q: int, max_seqlen_k: int, seqlens_k: Optional[torch.Tensor],
         block_table: Optional[torch.Tensor], dropout_p: float, softmax_scale: Optional[float],
         causal: bool, window_left: int, window_right: int, softcap: float,
         seed: torch.Tensor, offset: int, kv_splits: int, backend: str, device: int,
         block_mask: Optional[torch.Tensor], block_q: int, block_k: int) -> List[torch.Tensor]:
    ad = adapter((q, k, v, alibi_slopes, bias, sinks), backend, device)
    seq = _seq(ad, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqlens_k,
               block_table)
    out, lse = _ops.forward(ad, q, k, v, alibi_slopes=alibi_slopes, bias=bias,
                            sinks=sinks, kv_splits=kv_splits, seq=seq, block_mask=block_mask,
                            block_size=(block_q, block_k),
                            **_options(dropout_p, softmax_scale, causal, window_left,
                                       window_right, softcap, int(seed), offset, backend,
                                       device))
    return [out.to(q.device), lse.to(q.device)]


def _lse_shape(q, cu_seqlens_q):
    if cu_seqlens_q is not None:
        return (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[2], q.shape[1])


@_fwd.register_fake
def _fwd_fake(q, k, v, alibi_slopes, bias, sinks, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
              max_seqlen_k, seqlens_k, block_table, dropout_p, softmax_scale, causal,
              window_left, window_right, softcap, seed, offset, kv_splits, backend, device,
              block_mask, block_q, block_k):
    return [q.new_empty(q.shape), q.new_empty(_lse_shape(q, cu_seqlens_q), dtype=torch.float32)]


@torch.library.custom_op("flashattn::bwd", mutates_args=(), device_types=None)
def _bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
         out: torch.Tensor, lse: torch.Tensor, alibi_slopes: Optional[torch.Tensor],
         bias: Optional[torch.Tensor], sinks: Optional[torch.Tensor],
         cu_seqlens_q: Optional[torch.Tensor], cu_seqlens_k: Optional[torch.Tensor],
         max_seqlen_q: int, max_seqlen_k: int, dropout_p: float,
         softmax_scale: Optional[float], causal: bool, window_left: int, window_right: int,
         softcap: float, seed: torch.Tensor, offset: int, backend: str, device: int,
         block_mask: Optional[torch.Tensor], block_q: int,
         block_k: int) -> List[torch.Tensor]:
    ad = adapter((dout, q, k, v, out, lse, alibi_slopes, bias, sinks), backend, device)
    seq = _seq(ad, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, None, None)
    dq, dk, dv, d_sinks = _ops.backward(
        ad, dout, q, k, v, out, lse, alibi_slopes=alibi_slopes, bias=bias, sinks=sinks,
        seq=seq, block_mask=block_mask, block_size=(block_q, block_k),
        **_options(dropout_p, softmax_scale, causal, window_left, window_right, softcap,
                   int(seed), offset, backend, device))
    if d_sinks is None:
        d_sinks = torch.zeros(0)
    return [dq.to(q.device), dk.to(q.device), dv.to(q.device), d_sinks.to(q.device)]


@_bwd.register_fake
def _bwd_fake(dout, q, k, v, out, lse, alibi_slopes, bias, sinks, cu_seqlens_q, cu_seqlens_k,
              max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, window_left,
              window_right, softcap, seed, offset, backend, device, block_mask, block_q,
              block_k):
    heads = 0 if sinks is None else sinks.shape[0]
    return [q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape),
            q.new_empty((heads,), dtype=torch.float32)]


_FWD_ARGS = ("q", "k", "v", "alibi_slopes", "bias", "sinks", "cu_seqlens_q", "cu_seqlens_k",
             "max_seqlen_q", "max_seqlen_k", "seqlens_k", "block_table", "dropout_p",
             "softmax_scale", "causal", "window_left", "window_right", "softcap", "seed",
             "offset", "kv_splits", "backend", "device", "block_mask", "block_q", "block_k")
_SAVED = ("q", "k", "v", "alibi_slopes", "bias", "sinks", "cu_seqlens_q", "cu_seqlens_k",
          "seed", "block_mask")


def _setup_context(ctx, inputs, output):
    args = dict(zip(_FWD_ARGS, inputs))
    ctx.args = {n: a for n, a in args.items() if n not in _SAVED}
    ctx.tensor_names = [n for n in _SAVED if args[n] is not None]
    ctx.save_for_backward(*[args[n] for n in ctx.tensor_names], output[0], output[1])


def _backward(ctx, grads):
    saved = ctx.saved_tensors
    t = dict(zip(ctx.tensor_names, saved[:-2]))
    out, lse = saved[-2:]
    a = ctx.args
    if a["seqlens_k"] is not None or a["block_table"] is not None:
        raise NotImplementedError("flashattn: a KV cache forward has no backward")
    dout = grads[0] if grads[0] is not None else torch.zeros_like(out)
    dq, dk, dv, d_sinks = _bwd(
        dout, t["q"], t["k"], t["v"], out, lse, t.get("alibi_slopes"), t.get("bias"),
        t.get("sinks"), t.get("cu_seqlens_q"), t.get("cu_seqlens_k"), a["max_seqlen_q"],
        a["max_seqlen_k"], a["dropout_p"], a["softmax_scale"], a["causal"], a["window_left"],
        a["window_right"], a["softcap"], t["seed"], a["offset"], a["backend"], a["device"],
        t.get("block_mask"), a["block_q"], a["block_k"])
    grads_in = dict(q=dq, k=dk, v=dv, sinks=d_sinks if "sinks" in t else None)
    return tuple(grads_in.get(n) for n in _FWD_ARGS)


_fwd.register_autograd(_backward, setup_context=_setup_context)


def _seed_tensor(dropout_p, seed):
    """The dropout seed as an int64 scalar tensor; None draws one from torch's generator."""
    if seed is None:
        if dropout_p > 0:
            return torch.randint(0, 2**62, (), dtype=torch.int64)
        seed = 0
    return torch.tensor(seed, dtype=torch.int64)


def _call(q, k, v, alibi_slopes, bias, sinks, dropout_p, softmax_scale, causal, window_size,
          softcap, seed, offset, backend, device, cu_seqlens_q=None, cu_seqlens_k=None,
          max_seqlen_q=0, max_seqlen_k=0, seqlens_k=None, block_table=None, kv_splits=0,
          block_mask=None, block_size=(128, 128)):
    wl, wr = window_size
    bq, bk = _block_mask.block_size_of(block_size)
    if block_mask is not None:
        block_mask = torch.as_tensor(block_mask)
    return _fwd(q, k, v, alibi_slopes, bias, sinks, cu_seqlens_q, cu_seqlens_k,
                int(max_seqlen_q), int(max_seqlen_k), seqlens_k, block_table, float(dropout_p),
                None if softmax_scale is None else float(softmax_scale), bool(causal), int(wl),
                int(wr), float(softcap), _seed_tensor(dropout_p, seed), int(offset),
                int(kv_splits), backend, int(device), block_mask, bq, bk)


def _direct(tensors):
    """Whether a call may skip the custom op's dispatch (about 80 us): plain CPU tensors, no
    gradient wanted, not traced by torch.compile and no dispatch mode (a profiler's, a fake
    tensor mode's) watching. The op runs the same _ops.forward, so the result is the same."""
    if _compiling() or _dispatch_modes():
        return False
    grad = torch.is_grad_enabled()
    for x in tensors:
        if x is not None and (type(x) is not torch.Tensor or not x.is_cpu or
                              (grad and x.requires_grad)):
            return False
    return True


_compiling = torch.compiler.is_compiling
_dispatch_modes = torch._C._len_torch_dispatch_stack  # modes on the stack (what
# _get_current_dispatch_mode reads first), without its Python frame


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=True,
                    return_attn_probs=False, *, return_lse=False, bias=None, sinks=None,
                    seed=None, offset=0, backend="auto", device=0, block_mask=None,
                    block_size=(128, 128)):
    if _direct((q, k, v, alibi_slopes, bias, sinks, block_mask)):
        seed = int(_seed_tensor(dropout_p, seed)) if dropout_p else 0
        hit = None
        if alibi_slopes is None and bias is None and sinks is None and block_mask is None:
            hit = _ops.cached_forward(TorchAdapter, q, k, v, causal, softmax_scale, window_size,
                                      softcap, dropout_p, seed, offset, backend, device)
        out, lse = hit or _ops.forward(
            TorchAdapter, q, k, v, alibi_slopes=alibi_slopes, bias=bias, sinks=sinks,
            dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
            window_size=window_size, softcap=softcap, seed=seed, offset=offset,
            backend=backend, device=device, block_mask=block_mask, block_size=block_size)
        return interface._returns(out, lse, return_lse, return_attn_probs)
    out, lse = _call(q, k, v, alibi_slopes, bias, sinks, dropout_p, softmax_scale, causal,
                     window_size, softcap, seed, offset, backend, device, block_mask=block_mask,
                     block_size=block_size)
    return interface._returns(out, lse, return_lse, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=True, return_attn_probs=False, *, return_lse=False,
                           bias=None, sinks=None, seed=None, offset=0, backend="auto",
                           device=0):
    out, lse = _call(q, k, v, alibi_slopes, bias, sinks, dropout_p, softmax_scale, causal,
                     window_size, softcap, seed, offset, backend, device,
                     cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                     max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    return interface._returns(out, lse, return_lse, return_attn_probs)


def _torch_index(batch, new, cache_seqlens):
    b = torch.arange(batch, device=cache_seqlens.device)[:, None]
    return b, cache_seqlens.long()[:, None] + torch.arange(new, device=cache_seqlens.device)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False, *, rotary_cos=None, rotary_sin=None,
                            rotary_interleaved=True, cache_batch_idx=None, bias=None,
                            sinks=None, backend="auto", device=0):
    if (k is None) != (v is None):
        raise ValueError("flashattn: give both k and v, or neither")
    lengths = cache_seqlens
    if isinstance(lengths, int):
        lengths = torch.full((q.shape[0],), lengths, dtype=torch.int32, device=q.device)
    block_table = interface.batch_index_table(
        cache_batch_idx, block_table,
        lambda x, name: TorchAdapter.int32(x, name).to(k_cache.device), k_cache.shape[0])
    if rotary_cos is not None or rotary_sin is not None:
        _rotary.check(rotary_cos, rotary_sin, q.shape[-1])
        start = (torch.zeros(q.shape[0], dtype=torch.long, device=q.device) if lengths is None
                 else lengths.long())
        at = lambda n, step=1: start[:, None] + torch.arange(n, device=start.device) * step
        if k is not None:
            k = _rotary.apply(k, rotary_cos, rotary_sin, at(k.shape[1]), rotary_interleaved)
        moving = causal or tuple(window_size) != (-1, -1)
        q = _rotary.apply(q, rotary_cos, rotary_sin, at(q.shape[1], int(moving)),
                          rotary_interleaved)
    if k is not None:
        if lengths is None:
            raise ValueError("flashattn: new k and v need cache_seqlens (where to write them)")
        interface.append_kv(_torch_index, k_cache, v_cache, k, v, lengths, block_table)
        lengths = lengths + k.shape[1]
    out, lse = _call(q, k_cache, v_cache, alibi_slopes, bias, sinks, 0.0, softmax_scale,
                     causal, window_size, softcap, 0, 0, backend, device, seqlens_k=lengths,
                     block_table=block_table, kv_splits=num_splits)
    return (out, lse) if return_softmax_lse else out
