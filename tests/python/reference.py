"""reference.py - attention in float64 numpy, the tests' oracle (never the library's code):
every modifier in the library's order (flashattn.h): s = scale * q.k -> softcap -> + ALiBi +
bias -> causal (bottom-right) and window mask -> softmax with sinks -> dropout -> P V.
Shapes are flash-attn's: q (batch, seqlen_q, nheads, d), k, v (batch, seqlen_k, nheads_k, d).
"""
import numpy as np

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
U32 = 0xFFFFFFFF


def philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on arrays of uint64 counter words (each < 2^32): four word arrays."""
    c = [np.asarray(x, np.uint64) & U32 for x in (c0, c1, c2, c3)]
    k0, k1 = np.uint64(k0), np.uint64(k1)
    for r in range(10):
        if r:
            k0, k1 = (k0 + np.uint64(W0)) & np.uint64(U32), (k1 + np.uint64(W1)) & np.uint64(U32)
        p0, p1 = np.uint64(M0) * c[0], np.uint64(M1) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & np.uint64(U32),
             (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & np.uint64(U32)]
    return c


def keep_mask(batch, heads, sq, sk, p, seed, offset):
    """Dropout's keep mask (batch, heads, sq, sk), bit for bit the library's rule."""
    b, h, i, j = np.meshgrid(np.arange(batch), np.arange(heads), np.arange(sq), np.arange(sk),
                             indexing="ij")
    words = philox(j >> 2, i, b * heads + h, np.full(b.shape, offset), seed & U32, seed >> 32)
    word = np.choose(j & 3, words)
    return word >= np.uint64(int(np.floor(p * 2.0**32)))


def attention(q, k, v, causal=False, scale=None, window=(-1, -1), softcap=0.0, alibi=None,
              bias=None, sinks=None, dropout=None, seqlens_k=None):
    """(out (batch, seqlen_q, nheads, d), lse (batch, nheads, seqlen_q)) in float64; dropout is
    (p, seed, offset); seqlens_k (batch,) limits each sequence's keys; alibi (nheads,) or
    (batch, nheads) slopes."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    batch, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    k, v = np.repeat(k, h // hk, axis=2), np.repeat(v, h // hk, axis=2)
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    lengths = np.full(batch, sk) if seqlens_k is None else np.asarray(seqlens_k)
    i = np.arange(sq)[None, :, None]
    j = np.arange(sk)[None, None, :]
    shifted = i + (lengths[:, None, None] - sq)  # i' = i + seqlen_k - seqlen_q, per sequence
    if alibi is not None:  # slopes (nheads,) or, per sequence, (batch, nheads)
        slopes = np.asarray(alibi, np.float64)
        slopes = slopes[:, :, None, None] if slopes.ndim == 2 else slopes[None, :, None, None]
        s = s - slopes * np.abs(shifted - j)[:, None]
    if bias is not None:
        s = s + np.broadcast_to(np.asarray(bias, np.float64), s.shape)
    allowed = j < lengths[:, None, None]
    if causal:
        allowed = allowed & (j <= shifted)
    if window[0] >= 0:
        allowed = allowed & (j >= shifted - window[0])
    if window[1] >= 0:
        allowed = allowed & (j <= shifted + window[1])
    s = np.where(allowed[:, None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    if sinks is not None:
        m = np.maximum(m, np.asarray(sinks, np.float64)[None, :, None, None])
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(s - m)
    denom = e.sum(-1, keepdims=True)
    if sinks is not None:
        denom = denom + np.exp(np.asarray(sinks, np.float64)[None, :, None, None] - m)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(denom > 0, e / denom, 0.0)
        lse = np.where(denom > 0, np.log(denom) + m, -np.inf)[..., 0]
    if dropout is not None and dropout[0] > 0:
        keep = keep_mask(batch, h, sq, sk, *dropout)
        p = np.where(keep, p * float(np.float32(1.0 / (1.0 - dropout[0]))), 0.0)
    return np.einsum("bhqk,bkhd->bqhd", p, v), lse


def grads_with_bias(q, k, v, dout, bias, causal):
    """Gradients (dq, dk, dv) of sum(out * dout) of the float64 reference with an additive bias
    (broadcast to (batch, nheads, seqlen_q, seqlen_k); -inf masks), the backward written out."""
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    h, hk = q.shape[2], k.shape[2]
    out, lse = attention(q, k, v, bias=bias, causal=causal)
    kk, vv = np.repeat(k, h // hk, axis=2), np.repeat(v, h // hk, axis=2)
    scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale + bias
    sq, sk = q.shape[1], k.shape[1]
    if causal:
        s = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.where(np.isfinite(lse)[..., None], np.exp(s - lse[..., None]), 0.0)
    dv = np.einsum("bhqk,bqhd->bkhd", p, dout)
    dp = np.einsum("bqhd,bkhd->bhqk", dout, vv)
    ds = p * (dp - np.einsum("bqhd,bqhd->bhq", dout, out)[..., None]) * scale
    fold = lambda g: g.reshape(g.shape[0], g.shape[1], hk, h // hk, -1).sum(3)
    return (np.einsum("bhqk,bkhd->bqhd", ds, kk), fold(np.einsum("bhqk,bqhd->bkhd", ds, q)),
            fold(dv))


def naive_error(q, k, v, ref, **kw):
    """The largest error of naive attention computed in q's own precision (float32 or float16
    numpy: scores, softmax and P V rounded to it), the yardstick of flash-attn's tolerance."""
    dt = q.dtype
    batch, sq, h, d = q.shape
    k, v = np.repeat(k, h // k.shape[2], axis=2), np.repeat(v, h // v.shape[2], axis=2)
    s = (np.einsum("bqhd,bkhd->bhqk", q, k).astype(dt) * dt.type(kw.get("scale") or
                                                                  1.0 / np.sqrt(d))).astype(dt)
    sk = k.shape[1]
    if kw.get("causal"):
        ok = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq
        s = np.where(ok, s, -np.inf).astype(dt)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True)).astype(dt)
        p = (e / e.sum(-1, keepdims=True)).astype(dt)
    out = np.einsum("bhqk,bkhd->bqhd", p, v).astype(dt)
    return float(np.nanmax(np.abs(out.astype(np.float64) - ref)))
