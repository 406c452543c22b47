"""interface.py - flash-attn 2's functions (flash_attn_interface), on numpy arrays here and on
torch tensors through _torch.py: the same argument names, defaults, layouts and semantics.

Beyond flash-attn, keyword-only: `bias` (additive, broadcast to (batch, nheads, seqlen_q,
seqlen_k)), `sinks` (f32 (nheads,)), dropout's `seed` and `offset`, `backend` ("auto", "cpu",
"opencl", "cuda") and `device`. docs/python.md lists what matches and what differs.
"""
import numpy as np

from . import _core, _ops, _rotary
from ._numpy import NumpyAdapter


_TORCH = []  # flashattn._torch once imported: an import statement per call costs 0.5 us


def _torch_module(x):
    """flashattn._torch when x is a torch tensor (torch imported only then), else None."""
    if type(x) is np.ndarray or not type(x).__module__.startswith("torch"):
        return None
    if not _TORCH:
        from . import _torch
        _TORCH.append(_torch)
    return _TORCH[0]


def _returns(out, lse, return_lse, return_attn_probs):
    if return_attn_probs:
        return out, lse, None
    return (out, lse) if return_lse else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=True,
                    return_attn_probs=False, *, return_lse=False, bias=None, sinks=None,
                    seed=None, offset=0, backend="auto", device=0, block_mask=None,
                    block_size=(128, 128)):
    """Attention of q (batch, seqlen_q, nheads, headdim) over k, v (batch, seqlen_k, nheads_k,
    headdim): out like q, and with return_lse=True the f32 LSE (batch, nheads, seqlen_q).

    causal is aligned bottom-right; window_size=(left, right), -1 unbounded; nheads a multiple
    of nheads_k (GQA/MQA); softmax_scale None means 1/sqrt(headdim). The backward is always
    deterministic (`deterministic` is accepted for flash-attn's sake). return_attn_probs=True
    returns (out, lse, None): the probabilities are never materialised. Dropout draws its
    Philox bits from `seed` and `offset` (numpy: seed None is 0; torch: a seed drawn from
    torch's generator): pass the same to flash_attn_backward.

    block_mask (bool or uint8 (batch | 1, nheads | 1, q_blocks, k_blocks), q_blocks =
    ceil(seqlen_q / block_q)) makes it block-sparse: query block i computes only the key blocks
    j where block_mask[b, h, i, j] is set, inside the causal mask and window; block_size =
    (block_q, block_k), powers of two in [16, 256]. The library builds the block lists.
    """
    mod = _torch_module(q)
    if mod is not None:
        return mod.flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size,
                                   softcap, alibi_slopes, deterministic, return_attn_probs,
                                   return_lse=return_lse, bias=bias, sinks=sinks, seed=seed,
                                   offset=offset, backend=backend, device=device,
                                   block_mask=block_mask, block_size=block_size)
    hit = None
    if alibi_slopes is None and bias is None and sinks is None and block_mask is None:
        hit = _ops.cached_forward(NumpyAdapter, q, k, v, causal, softmax_scale, window_size,
                                  softcap, dropout_p, seed, offset, backend, device)
    out, lse = hit or _ops.forward(
        NumpyAdapter, q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
        window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes, bias=bias,
        sinks=sinks, seed=seed, offset=offset, backend=backend, device=device,
        block_mask=block_mask, block_size=block_size)
    return _returns(out, lse, return_lse, return_attn_probs)


def flash_attn_backward(dout, q, k, v, out, softmax_lse, dropout_p=0.0, softmax_scale=None,
                        causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                        deterministic=True, *, bias=None, sinks=None, seed=None, offset=0,
                        backend="auto", device=0, return_dsinks=False, block_mask=None,
                        block_size=(128, 128)):
    """(dq, dk, dv) of flash_attn_func's inputs given dout, from its out and LSE (the same
    options as the forward). With sinks and return_dsinks=True, (dq, dk, dv, dsinks)."""
    mod = _torch_module(q)
    ad = mod.TorchAdapter if mod is not None else NumpyAdapter
    dq, dk, dv, d_sinks = _ops.backward(
        ad, dout, q, k, v, out, softmax_lse, dropout_p=dropout_p, softmax_scale=softmax_scale,
        causal=causal, window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
        bias=bias, sinks=sinks, seed=seed, offset=offset, backend=backend, device=device,
        block_mask=block_mask, block_size=block_size)
    return (dq, dk, dv, d_sinks) if return_dsinks else (dq, dk, dv)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=True, return_attn_probs=False, *, return_lse=False,
                           bias=None, sinks=None, seed=None, offset=0, backend="auto",
                           device=0):
    """Attention over a packed batch: q (total_q, nheads, headdim), k, v (total_k, nheads_k,
    headdim), sequence b's rows cu_seqlens_q[b]:cu_seqlens_q[b+1] (int32, (batch + 1,)). The
    LSE is (nheads, total_q). Otherwise as flash_attn_func."""
    mod = _torch_module(q)
    if mod is not None:
        return mod.flash_attn_varlen_func(
            q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
            softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
            return_attn_probs, return_lse=return_lse, bias=bias, sinks=sinks, seed=seed,
            offset=offset, backend=backend, device=device)
    seq = _ops.varlen_seq(NumpyAdapter, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                          max_seqlen_k)
    out, lse = _ops.forward(NumpyAdapter, q, k, v, dropout_p=dropout_p,
                            softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                            softcap=softcap, alibi_slopes=alibi_slopes, bias=bias, sinks=sinks,
                            seed=seed, offset=offset, backend=backend, device=device, seq=seq)
    return _returns(out, lse, return_lse, return_attn_probs)


def append_kv(xp_index, k_cache, v_cache, k, v, cache_seqlens, block_table):
    """Writes new keys k, v (batch, seqlen_new, nheads_k, headdim) into the caches at
    cache_seqlens[b] (through block_table when paged), as flash-attn does, in place."""
    batch, new = k.shape[0], k.shape[1]
    b, pos = xp_index(batch, new, cache_seqlens)
    if block_table is None:
        k_cache[b, pos], v_cache[b, pos] = k, v
    else:
        page = k_cache.shape[1]
        blocks = block_table[b, pos // page]
        k_cache[blocks, pos % page], v_cache[blocks, pos % page] = k, v


def _np_index(batch, new, cache_seqlens):
    b = np.arange(batch)[:, None]
    return b, cache_seqlens.astype(np.int64)[:, None] + np.arange(new)[None, :]


def batch_index_table(cache_batch_idx, block_table, int32, cache_rows):
    """cache_batch_idx (batch,) as a block table of one page per sequence: row b of a
    contiguous cache (cache_rows, seqlen_cache, ...) is page cache_batch_idx[b] of a pool whose
    pages are seqlen_cache keys long, so the library reads it in place. Checked here: the GPU
    backends clamp a block table's pages rather than read it back."""
    if cache_batch_idx is None:
        return block_table
    if block_table is not None:
        raise ValueError("flashattn: cache_batch_idx is for a contiguous cache, not with "
                         "block_table")
    idx = int32(cache_batch_idx, "cache_batch_idx")
    if len(idx.shape) != 1:
        raise ValueError("flashattn: cache_batch_idx must be (batch,) int32")
    if len(idx) and not (0 <= int(idx.min()) and int(idx.max()) < cache_rows):
        raise ValueError("flashattn: cache_batch_idx must be in [0, %d) (the cache's rows); "
                         "got %s" % (cache_rows, idx.tolist()))
    return idx[:, None]


def kvcache_lengths(cache_seqlens, batch, new):
    """cache_seqlens as an int32 (batch,) array (an int is every sequence's length)."""
    if np.ndim(cache_seqlens) == 0:
        return np.full(batch, int(cache_seqlens), np.int32)
    return NumpyAdapter.int32(cache_seqlens, "cache_seqlens")


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None,
                            block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False, *, rotary_cos=None, rotary_sin=None,
                            rotary_interleaved=True, cache_batch_idx=None, bias=None,
                            sinks=None, backend="auto", device=0):
    """A decode step: q (batch, seqlen_q, nheads, headdim) over a cache, contiguous (batch,
    seqlen_cache, nheads_k, headdim) or paged (num_blocks, page_block_size, nheads_k, headdim)
    with block_table (batch, max_num_blocks_per_seq) int32. k, v (batch, seqlen_new, nheads_k,
    headdim), when given, are written into the caches in place at cache_seqlens first, and
    sequence b then attends to its cache_seqlens[b] + seqlen_new keys (causal aligned to that
    length). num_splits=0 lets the planner split the keys (split-KV), n > 1 asks for n.

    As flash-attn (keyword-only here): rotary_cos, rotary_sin (seqlen_ro, rotary_dim / 2) rotate
    the new k at positions cache_seqlens[b] + i before they are appended, and q at
    cache_seqlens[b] + i when causal or windowed, else all at cache_seqlens[b]; applied in
    Python (float32) before the call. cache_batch_idx (batch,) int32: sequence b uses cache
    row cache_batch_idx[b] of a contiguous cache (read in place as one page per sequence)."""
    mod = _torch_module(q)
    if mod is not None:
        return mod.flash_attn_with_kvcache(
            q, k_cache, v_cache, k, v, cache_seqlens, block_table, softmax_scale, causal,
            window_size, softcap, alibi_slopes, num_splits, return_softmax_lse,
            rotary_cos=rotary_cos, rotary_sin=rotary_sin,
            rotary_interleaved=rotary_interleaved, cache_batch_idx=cache_batch_idx, bias=bias,
            sinks=sinks, backend=backend, device=device)
    lengths = None
    if cache_seqlens is not None:
        lengths = kvcache_lengths(cache_seqlens, q.shape[0], 0)
    if (k is None) != (v is None):
        raise ValueError("flashattn: give both k and v, or neither")
    block_table = batch_index_table(cache_batch_idx, block_table, NumpyAdapter.int32,
                                    k_cache.shape[0])
    if rotary_cos is not None or rotary_sin is not None:
        _rotary.check(rotary_cos, rotary_sin, q.shape[-1])
        start = np.zeros(q.shape[0], np.int64) if lengths is None else lengths.astype(np.int64)
        at = lambda n, step=1: start[:, None] + np.arange(n)[None, :] * step
        if k is not None:
            k = _rotary.apply(k, rotary_cos, rotary_sin, at(k.shape[1]), rotary_interleaved)
        moving = causal or tuple(window_size) != (-1, -1)
        q = _rotary.apply(q, rotary_cos, rotary_sin, at(q.shape[1], int(moving)),
                          rotary_interleaved)
    if k is not None:
        if lengths is None:
            raise ValueError("flashattn: new k and v need cache_seqlens (where to write them)")
        table = None if block_table is None else NumpyAdapter.int32(block_table, "block_table")
        append_kv(_np_index, k_cache, v_cache, k, v, lengths, table)
        lengths = lengths + np.int32(k.shape[1])
    seq = _ops.kvcache_seq(NumpyAdapter, q, k_cache, v_cache, lengths, block_table)
    out, lse = _ops.forward(NumpyAdapter, q, k_cache, v_cache, softmax_scale=softmax_scale,
                            causal=causal, window_size=window_size, softcap=softcap,
                            alibi_slopes=alibi_slopes, bias=bias, sinks=sinks, backend=backend,
                            device=device, kv_splits=num_splits, seq=seq)
    return (out, lse) if return_softmax_lse else out


def devices():
    """Every backend the library knows: a list of {"backend", "devices": [properties], "why"}
    ("why": the reason a backend has no device)."""
    return _core.devices()


def plan(q_shape, k_shape=None, *, dtype="f32", causal=False, window_size=(-1, -1),
         softcap=0.0, backward=False, backend="auto", device=0):
    """The library's explanation of the plan for q (batch, seqlen_q, nheads, headdim) and k
    (batch, seqlen_k, nheads_k, headdim) shapes (k_shape None: q's), contiguous, as a string:
    the backend and device, the tile rule and each fitting step."""
    k_shape = tuple(k_shape or q_shape)
    b, sq, h, d = q_shape
    sk, hk = k_shape[1], k_shape[2]
    contiguous = {"q": (sq * h * d, h * d, d), "k": (sk * hk * d, hk * d, d)}
    layouts = [(n, ("bshd", contiguous["q" if n in ("q", "o", "d_o", "dq") else "k"]))
               for n in ("q", "k", "v", "o") + (("d_o", "dq", "dk", "dv") if backward else ())]
    spec = _core.make_spec(dtype=dtype, batch=b, heads_q=h, heads_kv=hk, seqlen_q=sq,
                           seqlen_k=sk, head_dim=d, layouts=tuple(sorted(layouts)),
                           causal=bool(causal), window=tuple(window_size),
                           softcap=float(softcap))
    ctx = _core.context(backend, device)
    with ctx.lock:
        explanation = ctx.plan("backward" if backward else "forward", spec).explain()
    name = ctx.props().name.decode(errors="replace")
    return "backend %s, device %d (%s)\n%s" % (ctx.backend, ctx.device, name, explanation)
