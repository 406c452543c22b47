"""test_numpy.py - flashattn's functions on numpy arrays against the float64 reference, on a
subsample of flash-attn's own test grid (odd lengths, d 32..256, GQA/MQA, causal, window,
softcap, ALiBi, bias, sinks, dropout, varlen, KV caches contiguous and paged), with flash-attn's
tolerance: at most 2x the error of naive attention in the same precision (3x for gradients),
plus a floor. Runs without torch."""
import numpy as np
import pytest

import flashattn
from reference import attention, naive_error

FLOOR = {np.float32: 2e-5, np.float16: 2e-3}


def rand(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def assert_close(got, ref, naive, dtype, factor=2.0, what="out"):
    got = np.asarray(got, np.float64)
    assert not np.isnan(got[np.isfinite(ref)]).any(), "%s: NaN where the reference is finite" % what
    err = float(np.max(np.abs(got - ref))) if got.size else 0.0
    tol = factor * naive + FLOOR[dtype] * max(1.0, float(np.max(np.abs(ref))) if ref.size else 1)
    assert err <= tol, "%s: error %.3g > tolerance %.3g (naive %.3g)" % (what, err, tol, naive)


# (batch, seqlen_q, seqlen_k, nheads, nheads_k, d, options): flash-attn's grid, subsampled.
CASES = [
    (1, 1, 1, 1, 1, 32, {}),
    (2, 113, 203, 4, 2, 64, {"causal": True}),
    (1, 127, 255, 4, 1, 128, {}),
    (1, 255, 127, 2, 2, 256, {"causal": True}),
    (1, 1023, 1024, 1, 1, 64, {"causal": True}),
    (2, 97, 97, 4, 4, 96, {"window_size": (17, 5)}),
    (1, 64, 256, 2, 1, 80, {"softcap": 30.0, "causal": True}),
    (2, 33, 77, 4, 2, 64, {"alibi": True}),
    (1, 57, 81, 2, 2, 32, {"bias": True}),
    (1, 40, 90, 4, 2, 64, {"sinks": True, "window_size": (-1, 20)}),
]


def case_inputs(case, dtype, seed=0):
    b, sq, sk, h, hk, d, opts = case
    rng = np.random.default_rng(seed)
    q, k, v = rand(rng, (b, sq, h, d), dtype), rand(rng, (b, sk, hk, d), dtype), \
        rand(rng, (b, sk, hk, d), dtype)
    kw = {key: opts[key] for key in ("causal", "window_size", "softcap") if key in opts}
    ref_kw = dict(causal=opts.get("causal", False), window=opts.get("window_size", (-1, -1)),
                  softcap=opts.get("softcap", 0.0))
    if opts.get("alibi"):
        kw["alibi_slopes"] = ref_kw["alibi"] = 2.0 ** (-8.0 * (np.arange(h) + 1) / h)
        kw["alibi_slopes"] = kw["alibi_slopes"].astype(np.float32)
    if opts.get("bias"):
        kw["bias"] = ref_kw["bias"] = rng.uniform(-1, 1, (1, h, sq, sk)).astype(np.float32)
    if opts.get("sinks"):
        kw["sinks"] = ref_kw["sinks"] = rng.standard_normal(h).astype(np.float32)
    return q, k, v, kw, ref_kw


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "b%d_q%d_k%d_h%d_%d_d%d_%s" % (
    c[:6] + ("-".join(sorted(c[6])) or "plain",)))
def test_forward(backend, case, dtype):
    q, k, v, kw, ref_kw = case_inputs(case, dtype)
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True, backend=backend, **kw)
    assert out.dtype == dtype and out.shape == q.shape
    ref, ref_lse = attention(q, k, v, **ref_kw)
    naive = naive_error(q, k, v, ref, causal=ref_kw["causal"]) if not (
        set(case[6]) - {"causal"}) else 0.0
    assert_close(out, ref, naive, dtype)
    assert lse.dtype == np.float32 and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.max(np.abs(lse[finite] - ref_lse[finite]), initial=0) <= 1e-3


def numeric_grads(q, k, v, dout, ref_kw):
    """Gradients of sum(out * dout) of the float64 reference: the backward written out, P from
    the reference's softmax (no dropout), checked against finite differences in C already."""
    q, k, v, dout = (np.asarray(x, np.float64) for x in (q, k, v, dout))
    h, hk = q.shape[2], k.shape[2]
    out, lse = attention(q, k, v, **ref_kw)
    kk, vv = np.repeat(k, h // hk, axis=2), np.repeat(v, h // hk, axis=2)
    scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.einsum("bqhd,bkhd->bhqk", q, kk) * scale
    p = np.where(np.isfinite(lse)[..., None], np.exp(s - lse[..., None]), 0.0)
    sq, sk = q.shape[1], k.shape[1]
    if ref_kw.get("causal"):
        p = np.where(np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq, p, 0.0)
    dv = np.einsum("bhqk,bqhd->bkhd", p, dout)
    dp = np.einsum("bqhd,bkhd->bhqk", dout, vv)
    ds = p * (dp - np.einsum("bqhd,bqhd->bhq", dout, out)[..., None]) * scale
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kk)
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q)
    fold = lambda g: g.reshape(g.shape[0], g.shape[1], hk, h // hk, -1).sum(3)
    return dq, fold(dk), fold(dv)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[3]], ids=["gqa_causal", "mqa",
                                                                      "d256_causal"])
def test_backward(backend, case, dtype):
    q, k, v, kw, ref_kw = case_inputs(case, dtype, seed=1)
    dout = rand(np.random.default_rng(2), q.shape, dtype)
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True, backend=backend, **kw)
    grads = flashattn.flash_attn_backward(dout, q, k, v, out, lse, backend=backend, **kw)
    refs = numeric_grads(q, k, v, dout, ref_kw)
    for name, got, ref, x in zip(("dq", "dk", "dv"), grads, refs, (q, k, v)):
        assert got.dtype == dtype and got.shape == x.shape
        # the naive error of a gradient: the forward's, scaled by the gradient's magnitude
        naive = naive_error(q, k, v, attention(q, k, v, **ref_kw)[0], causal=ref_kw["causal"])
        assert_close(got, ref, 3.0 * naive * max(1.0, float(np.max(np.abs(ref)))), dtype,
                     factor=1.0, what=name)


def test_dropout_same_bits(backend):
    q, k, v, _, _ = case_inputs((1, 37, 45, 2, 1, 32, {}), np.float32)
    drop = (0.25, 1234567890123, 7)
    out = flashattn.flash_attn_func(q, k, v, dropout_p=drop[0], seed=drop[1], offset=drop[2],
                                    backend=backend)
    ref, _ = attention(q, k, v, dropout=drop)
    assert_close(out, ref, 0.0, np.float32)


def test_varlen(backend):
    rng = np.random.default_rng(3)
    lens_q, lens_k = [5, 1, 17], [9, 30, 17]
    cu_q, cu_k = np.cumsum([0] + lens_q), np.cumsum([0] + lens_k)
    q = rand(rng, (cu_q[-1], 4, 64), np.float32)
    k, v = rand(rng, (cu_k[-1], 2, 64), np.float32), rand(rng, (cu_k[-1], 2, 64), np.float32)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cu_q.astype(np.int32),
                                                cu_k.astype(np.int32), max(lens_q),
                                                max(lens_k), causal=True, return_lse=True,
                                                backend=backend)
    assert lse.shape == (4, cu_q[-1])
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ref, ref_lse = attention(q[None, qs], k[None, ks], v[None, ks], causal=True)
        assert_close(out[qs], ref[0], 0.0, np.float32)
        assert np.allclose(lse[:, qs], ref_lse[0], atol=1e-4)


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_kvcache(backend, paged):
    rng = np.random.default_rng(4)
    batch, h, hk, d, cache, page = 2, 8, 2, 64, 64, 16
    lengths = np.array([10, 37], np.int32)
    q = rand(rng, (batch, 1, h, d), np.float32)
    k_new, v_new = rand(rng, (batch, 1, hk, d), np.float32), rand(rng, (batch, 1, hk, d),
                                                                  np.float32)
    dense_k, dense_v = rand(rng, (batch, cache, hk, d), np.float32), \
        rand(rng, (batch, cache, hk, d), np.float32)
    table = None
    if paged:
        pages = cache // page
        table = rng.permutation(batch * pages).reshape(batch, pages).astype(np.int32)
        k_cache = np.empty((batch * pages, page, hk, d), np.float32)
        v_cache = np.empty_like(k_cache)
        for b in range(batch):
            for p in range(pages):
                k_cache[table[b, p]] = dense_k[b, p * page:(p + 1) * page]
                v_cache[table[b, p]] = dense_v[b, p * page:(p + 1) * page]
    else:
        k_cache, v_cache = dense_k.copy(), dense_v.copy()
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                            cache_seqlens=lengths, block_table=table,
                                            causal=True, backend=backend)
    for b in range(batch):  # what flash-attn does: the new key written at cache_seqlens[b]
        dense_k[b, lengths[b]], dense_v[b, lengths[b]] = k_new[b, 0], v_new[b, 0]
    ref, _ = attention(q, dense_k, dense_v, causal=True, seqlens_k=lengths + 1)
    assert_close(out, ref, 0.0, np.float32)
    if not paged:
        assert np.array_equal(k_cache, dense_k)


def test_deterministic_repeats(backend):
    q, k, v, kw, _ = case_inputs(CASES[1], np.float32)
    dout = rand(np.random.default_rng(5), q.shape, np.float32)
    first = flashattn.flash_attn_func(q, k, v, return_lse=True, backend=backend, **kw)
    again = flashattn.flash_attn_func(q, k, v, return_lse=True, backend=backend, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    g1 = flashattn.flash_attn_backward(dout, q, k, v, *first, backend=backend, **kw)
    g2 = flashattn.flash_attn_backward(dout, q, k, v, *first, backend=backend, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(g1, g2))


def test_strided_inputs_read_in_place(backend):
    rng = np.random.default_rng(6)
    qkv = rand(rng, (2, 50, 3, 4, 32), np.float32)  # a packed QKV projection's output
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    out = flashattn.flash_attn_func(q, k, v, backend=backend)
    ref, _ = attention(q, k, v)
    assert_close(out, ref, 0.0, np.float32)
