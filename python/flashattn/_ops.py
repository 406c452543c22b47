"""_ops.py - the operations on host tensors of either kind (numpy arrays, CPU torch tensors),
through an adapter that knows the kind: shapes and options checked and turned into a Spec,
outputs allocated, the core run. interface.py and _torch.py call these.

Shapes, as flash-attn's: q (batch, seqlen_q, nheads, headdim), k and v (batch, seqlen_k,
nheads_k, headdim); varlen q (total_q, nheads, headdim); LSE f32 (batch, nheads, seqlen_q), or
(nheads, total_q) for varlen.
"""
from . import _block_mask, _core


def _need(cond, message):
    if not cond:
        raise ValueError("flashattn: " + message)


def _dims(ad, x, name, ndim):
    shape = ad.shape(x)
    _need(len(shape) == ndim, "%s must have %d dimensions, has shape %s" % (name, ndim,
                                                                            tuple(shape)))
    return shape


def _same_dtype(ad, tensors):
    dtypes = {name: ad.dtype(x) for name, x in tensors.items()}
    if len(set(dtypes.values())) > 1:
        raise TypeError("flashattn: q, k and v (and their gradients) must share one dtype; got "
                        + ", ".join("%s %s" % kv for kv in dtypes.items()))
    return next(iter(dtypes.values()))


def _modifiers(ad, heads_q, batch, seqlen_q, seqlen_k, dtype, alibi_slopes, bias, sinks):
    """The modifier tensors (prepared) and their Spec fields."""
    inputs, fields, layouts = {}, {}, []
    for name, x in (("alibi_slopes", alibi_slopes), ("sinks", sinks)):
        if x is None:
            continue
        x = ad.vector_f32(x, name)
        shape = tuple(ad.shape(x))
        if name == "alibi_slopes" and shape == (batch, heads_q):  # a slope per (b, h)
            inputs[name], fields["alibi"] = x, 2
            continue
        _need(shape == (heads_q,), "%s must have shape (nheads,) = (%d,)%s, has %s"
              % (name, heads_q, " or (batch, nheads) = (%d, %d)" % (batch, heads_q)
                 if name == "alibi_slopes" else "", shape))
        inputs[name] = x
        fields["alibi" if name == "alibi_slopes" else "sinks"] = 1
    if bias is not None:
        bias = ad.bias(bias, (batch, heads_q, seqlen_q, seqlen_k), dtype)
        inputs["bias"] = bias
        fields["bias_dtype"] = ad.dtype(bias)
        layouts.append(("bias", ("bhs", ad.strides(bias)[:3])))
    return inputs, fields, layouts


def _sparse(ad, seq, block_mask, block_size, backward, inputs, fields):
    """Block-sparse attention's lists (made by the library from the dense block mask) into
    inputs, and its Spec field into fields; nothing without a block mask."""
    if block_mask is None:
        return
    lists, fields["block_sparse"] = _block_mask.lists(
        ad.host_mask(block_mask), seq["batch"], seq["heads_q"], seq["seqlen_q"], seq["seqlen_k"],
        block_size, backward)
    inputs.update({name: ad.from_numpy(x) for name, x in lists.items()})


def _scalars(causal, softmax_scale, window_size, softcap, dropout_p, seed, offset):
    window = tuple(int(w) for w in window_size)
    _need(len(window) == 2, "window_size must be (left, right), got %r" % (window_size,))
    return dict(causal=bool(causal), scale=None if softmax_scale is None else
                float(softmax_scale), window=window, softcap=float(softcap),
                dropout=(float(dropout_p), *_seed_offset(seed, offset)))


# Forward calls of plain q, k, v (no modifier tensors, no sequences) by their signature: the
# tensors' kinds, shapes, strides and dtypes and every option but dropout's seed and offset
# (the plan takes those per call). A hit skips the checks (its tensors passed them when it was
# made) and the Spec: only the outputs, the pointers and the seed are new.
_PREPARED = {}
_PREPARED_MAX = 256


def _prepared_key(ad, q, k, v, causal, softmax_scale, window_size, softcap, dropout_p,
                  backend, device, kv_splits):
    """The signature of a plain forward, or None for arguments that are not tensors. The
    device's type counts: True is 1 to a dict, but context() refuses a bool."""
    try:
        return (ad.signature(q), ad.signature(k), ad.signature(v), causal, softmax_scale,
                tuple(window_size), softcap, dropout_p, backend, device, type(device),
                kv_splits)
    except (TypeError, AttributeError):
        return None


def _lookup(key):
    """(key, its prepared entry or None); key None where it does not hash (options the checks
    will refuse). A key is hashed once, here: nested tuples are hashed anew each time."""
    try:
        return key, _PREPARED.get(key)
    except TypeError:
        return None, None


def _seed_offset(seed, offset):
    """Dropout's seed and offset as the library takes them (u64, u32; None is 0)."""
    return int(seed or 0) & (2**64 - 1), int(offset or 0) & (2**32 - 1)


def cached_forward(ad, q, k, v, causal, softmax_scale, window_size, softcap, dropout_p, seed,
                   offset, backend, device):
    """(out, lse) of a plain forward (no modifier tensors, no sequences) whose signature has a
    prepared call, else None: the front ends try this before forward's keyword arguments."""
    entry = _lookup(_prepared_key(ad, q, k, v, causal, softmax_scale, window_size, softcap,
                                  dropout_p, backend, device, 0))[1]
    if entry is None:
        return None
    dropout = (dropout_p, *_seed_offset(seed, offset)) if dropout_p else None
    return _run_prepared(ad, entry, q, k, v, dropout)


def _run_prepared(ad, entry, q, k, v, dropout):
    call, out_shape, lse_shape, dtype, ctx = entry
    out = ad.empty(out_shape, dtype, like=q)
    lse = ad.empty(lse_shape, "f32", like=q)
    ctx.run_prepared(call, (q, k, v, out, lse), ad.ptr, dropout)
    return out, lse


def forward(ad, q, k, v, *, dropout_p=0.0, softmax_scale=None, causal=False,
            window_size=(-1, -1), softcap=0.0, alibi_slopes=None, bias=None, sinks=None,
            seed=0, offset=0, backend="auto", device=0, kv_splits=0, seq=None,
            block_mask=None, block_size=(128, 128)):
    """(out, lse) of attention; `seq` carries varlen's or the KV cache's extras (below)."""
    key = None
    if (seq is None and alibi_slopes is None and bias is None and sinks is None and
            block_mask is None):
        key, entry = _lookup(_prepared_key(ad, q, k, v, causal, softmax_scale, window_size,
                                           softcap, dropout_p, backend, device, kv_splits))
        if entry is not None:
            dropout = (dropout_p, *_seed_offset(seed, offset)) if dropout_p else None
            return _run_prepared(ad, entry, q, k, v, dropout)
    given = (q, k, v)
    q, k, v = (ad.prepare(x, n) for x, n in ((q, "q"), (k, "k"), (v, "v")))
    dtype = _same_dtype(ad, {"q": q, "k": k, "v": v})
    seq = seq or _dense_seq(ad, q, k, v)
    out = ad.empty(ad.shape(q), dtype, like=q)
    lse = ad.empty(seq["lse_shape"], "f32", like=q)
    mod_inputs, fields, layouts = _modifiers(ad, seq["heads_q"], seq["batch"], seq["seqlen_q"],
                                             seq["seqlen_k"], dtype, alibi_slopes, bias, sinks)
    _sparse(ad, seq, block_mask, block_size, False, mod_inputs, fields)
    layouts += [(n, seq["layout"](n, ad.strides(x))) for n, x in
                (("q", q), ("k", k), ("v", v), ("o", out))]
    spec = _core.make_spec(
        dtype=dtype, batch=seq["batch"], heads_q=seq["heads_q"], heads_kv=seq["heads_kv"],
        seqlen_q=seq["seqlen_q"], seqlen_k=seq["seqlen_k"], head_dim=seq["head_dim"],
        layouts=tuple(sorted(layouts)), kv_splits=int(kv_splits), **fields, **seq["fields"],
        **_scalars(causal, softmax_scale, window_size, softcap, dropout_p, seed, offset))
    inputs = {"q": q, "k": k, "v": v, **mod_inputs, **seq["inputs"]}
    ctx = ad.context(backend, device)
    ctx.run("forward", spec, {n: ad.arr(x) for n, x in inputs.items()},
            {"o": ad.arr(out), "lse": ad.arr(lse)})
    if key is not None and all(a is b for a, b in zip(given, (q, k, v))):
        _remember(key, spec, (q, k, v, out, lse), ad, dtype, seq["lse_shape"], ctx)
    return out, lse


def _remember(key, spec, tensors, ad, dtype, lse_shape, ctx):
    """Caches a plain forward's Prepared call under its signature (tensors used in place), with
    its context (cached contexts live as long as the process)."""
    if len(_PREPARED) >= _PREPARED_MAX:
        _PREPARED.clear()
    call = _core.Prepared("forward", spec, ("q", "k", "v", "o", "lse"), 3,
                          tuple(ad.arr(x).nbytes for x in tensors))
    _PREPARED[key] = (call, ad.shape(tensors[0]), tuple(lse_shape), dtype, ctx)


def backward(ad, dout, q, k, v, out, lse, *, dropout_p=0.0, softmax_scale=None, causal=False,
             window_size=(-1, -1), softcap=0.0, alibi_slopes=None, bias=None, sinks=None,
             seed=0, offset=0, backend="auto", device=0, seq=None, block_mask=None,
             block_size=(128, 128)):
    """(dq, dk, dv, d_sinks) of the forward's arguments; d_sinks None without sinks."""
    q, k, v, out, dout = (ad.prepare(x, n) for x, n in
                          ((q, "q"), (k, "k"), (v, "v"), (out, "out"), (dout, "dout")))
    dtype = _same_dtype(ad, {"q": q, "k": k, "v": v, "out": out, "dout": dout})
    seq = seq or _dense_seq(ad, q, k, v)
    _need(ad.shape(out) == ad.shape(q) and ad.shape(dout) == ad.shape(q),
          "out and dout must have q's shape %s" % (tuple(ad.shape(q)),))
    lse = ad.lse(lse, seq["lse_shape"])
    dq, dk, dv = (ad.empty(ad.shape(x), dtype, like=q) for x in (q, k, v))
    mod_inputs, fields, layouts = _modifiers(ad, seq["heads_q"], seq["batch"], seq["seqlen_q"],
                                             seq["seqlen_k"], dtype, alibi_slopes, bias, sinks)
    _sparse(ad, seq, block_mask, block_size, True, mod_inputs, fields)
    layouts += [(n, seq["layout"](n, ad.strides(x))) for n, x in
                (("q", q), ("k", k), ("v", v), ("o", out), ("d_o", dout), ("dq", dq),
                 ("dk", dk), ("dv", dv))]
    spec = _core.make_spec(
        dtype=dtype, batch=seq["batch"], heads_q=seq["heads_q"], heads_kv=seq["heads_kv"],
        seqlen_q=seq["seqlen_q"], seqlen_k=seq["seqlen_k"], head_dim=seq["head_dim"],
        layouts=tuple(sorted(layouts)), **fields, **seq["fields"],
        **_scalars(causal, softmax_scale, window_size, softcap, dropout_p, seed, offset))
    outputs = {"dq": dq, "dk": dk, "dv": dv}
    d_sinks = None
    if sinks is not None:
        d_sinks = outputs["d_sinks"] = ad.empty((seq["heads_q"],), "f32", like=q)
    inputs = {"q": q, "k": k, "v": v, "o": out, "lse": lse, "d_o": dout, **mod_inputs,
              **seq["inputs"]}
    ctx = ad.context(backend, device)
    ctx.run("backward", spec, {n: ad.arr(x) for n, x in inputs.items()},
            {n: ad.arr(x) for n, x in outputs.items()})
    return dq, dk, dv, d_sinks


def _check_qkv(q, k, v, qs, ks, vs):
    _need(ks == vs, "k and v must have one shape; got %s and %s" % (tuple(ks), tuple(vs)))
    _need(qs[-1] == ks[-1], "q and k must have one headdim; got %d and %d" % (qs[-1], ks[-1]))


def _dense_seq(ad, q, k, v):
    """The problem of (batch, seqlen, nheads, headdim) tensors."""
    qs, ks = _dims(ad, q, "q", 4), _dims(ad, k, "k", 4)
    _check_qkv(q, k, v, qs, ks, _dims(ad, v, "v", 4))
    _need(qs[0] == ks[0], "q and k must have one batch; got %d and %d" % (qs[0], ks[0]))
    return dict(batch=qs[0], seqlen_q=qs[1], heads_q=qs[2], head_dim=qs[3], seqlen_k=ks[1],
                heads_kv=ks[2], lse_shape=(qs[0], qs[2], qs[1]), fields={}, inputs={},
                layout=lambda name, s: ("bshd", (s[0], s[1], s[2])))


def varlen_seq(ad, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """The problem of packed (total, nheads, headdim) tensors with cu_seqlens."""
    qs, ks = _dims(ad, q, "q", 3), _dims(ad, k, "k", 3)
    _check_qkv(q, k, v, qs, ks, _dims(ad, v, "v", 3))
    cu_q, cu_k = ad.int32(cu_seqlens_q, "cu_seqlens_q"), ad.int32(cu_seqlens_k, "cu_seqlens_k")
    _need(len(ad.shape(cu_q)) == 1 and ad.shape(cu_q) == ad.shape(cu_k) and
          ad.shape(cu_q)[0] >= 1, "cu_seqlens_q and cu_seqlens_k must be (batch + 1,) int32")
    return dict(batch=ad.shape(cu_q)[0] - 1, seqlen_q=int(max_seqlen_q), heads_q=qs[1],
                head_dim=qs[2], seqlen_k=int(max_seqlen_k), heads_kv=ks[1],
                lse_shape=(qs[1], qs[0]), fields=dict(varlen=True),
                inputs={"cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k},
                layout=lambda name, s: ("packed", (s[0], s[1])))


def kvcache_seq(ad, q, k_cache, v_cache, cache_seqlens, block_table):
    """The problem of a decode step over a contiguous or paged cache."""
    qs, ks = _dims(ad, q, "q", 4), _dims(ad, k_cache, "k_cache", 4)
    _check_qkv(q, k_cache, v_cache, qs, ks, _dims(ad, v_cache, "v_cache", 4))
    fields, inputs, batch = {}, {}, qs[0]
    paged = None
    if block_table is not None:
        table = ad.int32(block_table, "block_table")
        _need(len(ad.shape(table)) == 2 and ad.shape(table)[0] == batch,
              "block_table must be (batch, max_num_blocks_per_seq) int32")
        pages_per_seq = ad.shape(table)[1]
        paged = (ks[1], ks[0], pages_per_seq)
        seqlen_k = ks[1] * pages_per_seq
        inputs["block_table"] = table
        fields["paged"] = paged
    else:
        _need(ks[0] == batch, "k_cache must have q's batch %d, has %d" % (batch, ks[0]))
        seqlen_k = ks[1]
    if cache_seqlens is not None:
        inputs["seqlens_k"] = cache_seqlens
        fields["seqlens_k"] = True

    def layout(name, s):
        if paged is not None and name in ("k", "v"):
            return ("paged", (s[0], s[1], s[2]))
        return ("bshd", (s[0], s[1], s[2]))
    return dict(batch=batch, seqlen_q=qs[1], heads_q=qs[2], head_dim=qs[3], seqlen_k=seqlen_k,
                heads_kv=ks[2], lse_shape=(batch, qs[2], qs[1]), fields=fields, inputs=inputs,
                layout=layout)
