"""test_alibi.py - ALiBi slopes of shape (batch, nheads), as flash-attn takes them: each
sequence its own slopes, forward and backward on every backend, numpy and torch, dense, varlen
and KV cache, against the float64 reference (the ALiBi term written out as a bias for the
gradients); (batch, nheads) slopes equal over the batch give the (nheads,) bits."""
import os

import numpy as np
import pytest

import flashattn
from reference import attention, grads_with_bias

if os.environ.get("FLASHATTN_REQUIRE_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")

TOL = 3e-5


def problem(seed=0, b=3, sq=37, sk=61, h=4, hk=2, d=32):
    rng = np.random.default_rng(seed)
    make = lambda *s: rng.standard_normal(s).astype(np.float32)
    slopes = rng.uniform(0.01, 0.5, (b, h)).astype(np.float32)
    return rng, make(b, sq, h, d), make(b, sk, hk, d), make(b, sk, hk, d), slopes


def alibi_bias(slopes, sq, sk):
    """The ALiBi term as a bias (batch, nheads, sq, sk): -slope * |i + sk - sq - j|."""
    dist = np.abs(np.arange(sq)[:, None] + sk - sq - np.arange(sk)[None, :])
    return -np.asarray(slopes, np.float64)[:, :, None, None] * dist


def close(got, ref):
    return np.max(np.abs(np.asarray(got, np.float64) - ref)) <= TOL * max(1.0, np.max(np.abs(ref)))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward(backend, causal):
    _, q, k, v, slopes = problem()
    out, lse = flashattn.flash_attn_func(q, k, v, causal=causal, alibi_slopes=slopes,
                                         return_lse=True, backend=backend)
    ref, ref_lse = attention(q, k, v, causal=causal, alibi=slopes)
    assert close(out, ref) and close(lse, ref_lse)
    shared, _ = attention(q, k, v, causal=causal, alibi=slopes[0])
    assert not close(out, shared)  # the other sequences' slopes matter


def test_backward(backend):
    rng, q, k, v, slopes = problem(seed=1)
    dout = rng.standard_normal(q.shape).astype(np.float32)
    out, lse = flashattn.flash_attn_func(q, k, v, causal=True, alibi_slopes=slopes,
                                         return_lse=True, backend=backend)
    grads = flashattn.flash_attn_backward(dout, q, k, v, out, lse, causal=True,
                                          alibi_slopes=slopes, backend=backend)
    refs = grads_with_bias(q, k, v, dout, alibi_bias(slopes, 37, 61), True)
    for got, ref in zip(grads, refs):
        assert np.max(np.abs(got - ref)) <= 1e-4 * max(1.0, np.max(np.abs(ref)))


def test_rows_equal_give_the_shared_bits(backend):
    _, q, k, v, slopes = problem(seed=2)
    rows = np.repeat(slopes[:1], 3, axis=0)
    a = flashattn.flash_attn_func(q, k, v, alibi_slopes=rows, backend=backend)
    b = flashattn.flash_attn_func(q, k, v, alibi_slopes=slopes[0], backend=backend)
    assert np.array_equal(a, b)


def test_varlen(backend):
    rng, _, _, _, slopes = problem(seed=3)
    lens_q, lens_k = [5, 17, 9], [11, 30, 9]
    cu_q, cu_k = np.cumsum([0] + lens_q).astype(np.int32), np.cumsum([0] + lens_k).astype(np.int32)
    q = rng.standard_normal((cu_q[-1], 4, 32)).astype(np.float32)
    k, v = (rng.standard_normal((cu_k[-1], 2, 32)).astype(np.float32) for _ in range(2))
    out = flashattn.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                           causal=True, alibi_slopes=slopes, backend=backend)
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        ref, _ = attention(q[None, qs], k[None, ks], v[None, ks], causal=True,
                           alibi=slopes[b:b + 1])
        assert close(out[qs], ref[0])


def test_kvcache(backend):
    rng, _, _, _, slopes = problem(seed=4)
    q = rng.standard_normal((3, 1, 4, 32)).astype(np.float32)
    k_cache, v_cache = (rng.standard_normal((3, 40, 2, 32)).astype(np.float32) for _ in range(2))
    lengths = np.array([40, 7, 23], np.int32)
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths,
                                            alibi_slopes=slopes, backend=backend)
    for b, n in enumerate(lengths):
        ref, _ = attention(q[b:b + 1], k_cache[b:b + 1, :n], v_cache[b:b + 1, :n],
                           alibi=slopes[b:b + 1])
        assert close(out[b:b + 1], ref)


def test_torch_autograd(backend):
    rng, q, k, v, slopes = problem(seed=5, b=2, sq=20, sk=28)
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    out = flashattn.flash_attn_func(tq, tk, tv, alibi_slopes=torch.from_numpy(slopes),
                                    backend=backend)
    dout = rng.standard_normal(q.shape).astype(np.float32)
    out.backward(torch.from_numpy(dout))
    assert close(out.detach().numpy(), attention(q, k, v, alibi=slopes)[0])
    refs = grads_with_bias(q, k, v, dout, alibi_bias(slopes, 20, 28), False)
    for x, ref in zip((tq, tk, tv), refs):
        assert np.max(np.abs(x.grad.numpy() - ref)) <= 1e-4 * max(1.0, np.max(np.abs(ref)))


def test_wrong_shape(backend):
    _, q, k, v, slopes = problem(seed=6)
    with pytest.raises(ValueError, match=r"\(batch, nheads\) = \(3, 4\)"):
        flashattn.flash_attn_func(q, k, v, alibi_slopes=np.ones((4, 4), np.float32),
                                  backend=backend)
