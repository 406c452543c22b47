"""test_kvcache_extras.py - flash_attn_with_kvcache's rotary_cos / rotary_sin (interleaved or
not; q at moving or fixed positions as flash-attn) and cache_batch_idx, numpy and torch,
against the float64 reference with the rotation written as complex multiplication."""
import os

import numpy as np
import pytest

import flashattn
from reference import attention

if os.environ.get("FLASHATTN_REQUIRE_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")

D, ROT = 32, 16  # head dim, rotary dim


def tables(n=64):
    theta = np.arange(n)[:, None] * (10000.0 ** (-np.arange(ROT // 2) / (ROT // 2)))[None, :]
    return np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32), theta


def rotate(x, theta_at, interleaved):
    """x (b, s, h, D) float64 rotated by the angles theta_at (b, s, ROT / 2)."""
    x = np.asarray(x, np.float64).copy()
    if interleaved:
        z = x[..., 0:ROT:2] + 1j * x[..., 1:ROT:2]
    else:
        z = x[..., :ROT // 2] + 1j * x[..., ROT // 2:ROT]
    z = z * np.exp(1j * theta_at)[:, :, None, :]
    if interleaved:
        x[..., 0:ROT:2], x[..., 1:ROT:2] = z.real, z.imag
    else:
        x[..., :ROT // 2], x[..., ROT // 2:ROT] = z.real, z.imag
    return x


def setup(seed):
    rng = np.random.default_rng(seed)
    make = lambda *s: rng.standard_normal(s).astype(np.float32)
    return make(3, 2, 4, D), make(3, 40, 2, D), make(3, 40, 2, D), make(3, 3, 2, D), \
        make(3, 3, 2, D), np.array([10, 0, 25], np.int32)


@pytest.mark.parametrize("interleaved", [True, False], ids=["interleaved", "halves"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "fixed"])
def test_rotary(backend, interleaved, causal):
    q, k_cache, v_cache, k, v, lengths = setup(0)
    cos, sin, theta = tables()
    want_k, want_v = k_cache.copy(), v_cache.copy()
    out = flashattn.flash_attn_with_kvcache(
        q, k_cache, v_cache, k, v, cache_seqlens=lengths, causal=causal, rotary_cos=cos,
        rotary_sin=sin, rotary_interleaved=interleaved, backend=backend)
    new_pos = lengths[:, None] + np.arange(3)
    q_pos = lengths[:, None] + (np.arange(2) if causal else np.zeros(2, int))
    rk = rotate(k, theta[new_pos], interleaved)
    rq = rotate(q, theta[q_pos], interleaved)
    for b, n in enumerate(lengths):
        want_k[b, n:n + 3], want_v[b, n:n + 3] = rk[b], v[b]
        assert np.allclose(k_cache[b, n:n + 3], rk[b], atol=1e-5)  # rotated, appended in place
        ref, _ = attention(rq[b:b + 1], want_k[b:b + 1, :n + 3], want_v[b:b + 1, :n + 3],
                           causal=causal)
        assert np.max(np.abs(out[b:b + 1] - ref)) <= 5e-5
    assert np.allclose(k_cache, want_k, atol=1e-5) and np.array_equal(v_cache, want_v)


def test_cache_batch_idx(backend):
    q, k_cache, v_cache, k, v, _ = setup(1)
    big_k = np.random.default_rng(2).standard_normal((5, 40, 2, D)).astype(np.float32)
    big_v = np.random.default_rng(3).standard_normal((5, 40, 2, D)).astype(np.float32)
    idx, lengths = np.array([4, 0, 2], np.int32), np.array([7, 30, 0], np.int32)
    before_k = big_k.copy()
    out = flashattn.flash_attn_with_kvcache(q, big_k, big_v, k, v, cache_seqlens=lengths,
                                            cache_batch_idx=idx, causal=True, backend=backend)
    assert np.array_equal(big_k[[1, 3]], before_k[[1, 3]])  # rows no sequence uses: untouched
    for b, (row, n) in enumerate(zip(idx, lengths)):
        assert np.array_equal(big_k[row, n:n + 3], k[b])
        ref, _ = attention(q[b:b + 1], big_k[row:row + 1, :n + 3], big_v[row:row + 1, :n + 3],
                           causal=True)
        assert np.max(np.abs(out[b:b + 1] - ref)) <= 5e-5


def test_torch_matches_numpy(backend):
    q, k_cache, v_cache, k, v, lengths = setup(4)
    cos, sin, _ = tables()
    t = [torch.from_numpy(x.copy()) for x in (q, k_cache, v_cache, k, v)]
    kw = dict(causal=True, rotary_cos=cos, rotary_sin=sin, cache_batch_idx=[2, 1, 0],
              backend=backend)
    want = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lengths,
                                             **kw)
    got = flashattn.flash_attn_with_kvcache(
        *t, cache_seqlens=torch.from_numpy(lengths),
        **{**kw, "rotary_cos": torch.from_numpy(cos), "rotary_sin": torch.from_numpy(sin),
           "cache_batch_idx": torch.tensor([2, 1, 0], dtype=torch.int32)})
    assert np.max(np.abs(got.numpy() - want)) <= 1e-5
    assert np.allclose(t[1].numpy(), k_cache, atol=1e-5)


def test_bad_extras(backend):
    q, k_cache, v_cache, _, _, lengths = setup(5)
    cos, sin, _ = tables()
    call = lambda **kw: flashattn.flash_attn_with_kvcache(q, k_cache, v_cache,
                                                         cache_seqlens=lengths, backend=backend,
                                                         **kw)
    with pytest.raises(ValueError, match="both rotary_cos and rotary_sin"):
        call(rotary_cos=cos)
    with pytest.raises(ValueError, match="rotary_dim <= headdim"):
        call(rotary_cos=np.ones((8, 20), np.float32), rotary_sin=np.ones((8, 20), np.float32))
    with pytest.raises(ValueError, match="not with block_table"):
        call(cache_batch_idx=[0, 1, 2], block_table=np.zeros((3, 1), np.int32))
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        call(cache_batch_idx=[0, 1, 3])  # a row past the cache
    with pytest.raises(ValueError, match=r"in \[0, 3\)"):
        call(cache_batch_idx=[0, -1, 2])
