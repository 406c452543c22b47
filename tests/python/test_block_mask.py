"""test_block_mask.py - block-sparse attention through the block_mask keyword: forward and
backward on every backend, numpy and torch, against the float64 reference with the mask
applied as a bias of 0 and -inf; bad masks raising with the library's message."""
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


def blocks(sq, sk, bq, bk):
    return -(-sq // bq), -(-sk // bk)


def random_mask(rng, shape):
    """A random 0/1 block mask with query block 1 wholly skipped (its rows: O 0, LSE -inf)."""
    mask = rng.random(shape) < 0.5
    mask[:, :, 1, :] = False
    return mask


def element_mask(mask, sq, sk, bq, bk):
    """The block mask spread over its elements: (mask batch, mask heads, sq, sk) bool."""
    return np.repeat(np.repeat(mask.astype(bool), bq, axis=2), bk, axis=3)[:, :, :sq, :sk]


def masked_reference(q, k, v, mask, bq, bk, **kw):
    sq, sk = q.shape[1], k.shape[1]
    bias = np.where(element_mask(mask, sq, sk, bq, bk), 0.0, -np.inf)
    return attention(q, k, v, bias=bias, **kw), bias


def problem(seed=0, b=2, sq=100, sk=150, h=4, hk=2, d=32):
    rng = np.random.default_rng(seed)
    make = lambda *s: rng.standard_normal(s).astype(np.float32)
    return rng, make(b, sq, h, d), make(b, sk, hk, d), make(b, sk, hk, d)


def assert_matches(out, lse, ref, ref_lse):
    assert np.max(np.abs(out - ref)) <= TOL * max(1.0, float(np.max(np.abs(ref))))
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), finite)
    assert np.max(np.abs(lse[finite] - ref_lse[finite])) <= 1e-4


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("mask_dims", [(2, 1), (1, 4), (2, 4)], ids=["batch", "heads", "both"])
def test_forward(backend, causal, mask_dims):
    rng, q, k, v = problem()
    bq, bk = 32, 16
    mask = random_mask(rng, mask_dims + blocks(100, 150, bq, bk))
    out, lse = flashattn.flash_attn_func(q, k, v, causal=causal, block_mask=mask,
                                         block_size=(bq, bk), return_lse=True, backend=backend)
    (ref, ref_lse), _ = masked_reference(q, k, v, mask, bq, bk, causal=causal)
    assert_matches(out, lse, ref, ref_lse)
    assert np.all(out[:, bq:2 * bq] == 0) and np.all(lse[:, :, bq:2 * bq] == -np.inf)


def test_forward_uint8_and_window(backend):
    rng, q, k, v = problem(seed=3, b=1, sq=64, sk=64, h=2, hk=1)
    mask = random_mask(rng, (1, 2) + blocks(64, 64, 16, 16)).astype(np.uint8)
    out = flashattn.flash_attn_func(q, k, v, window_size=(20, 0), block_mask=mask,
                                    block_size=(16, 16), backend=backend)
    (ref, _), _ = masked_reference(q, k, v, mask, 16, 16, window=(20, 0))
    assert np.max(np.abs(out - ref)) <= TOL * max(1.0, float(np.max(np.abs(ref))))


def check_grads(grads, q, k, v, dout, bias, causal):
    for name, got, ref in zip(("dq", "dk", "dv"), grads, grads_with_bias(q, k, v, dout, bias,
                                                                         causal)):
        got = np.asarray(got, np.float64)
        err = float(np.max(np.abs(got - ref)))
        assert err <= 1e-4 * max(1.0, float(np.max(np.abs(ref)))), "%s: error %.3g" % (name,
                                                                                     err)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward(backend, causal):
    rng, q, k, v = problem(seed=1)
    mask = random_mask(rng, (2, 4) + blocks(100, 150, 16, 32))
    dout = rng.standard_normal(q.shape).astype(np.float32)
    kw = dict(causal=causal, block_mask=mask, block_size=(16, 32), backend=backend)
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True, **kw)
    (_, _), bias = masked_reference(q, k, v, mask, 16, 32, causal=causal)
    grads = flashattn.flash_attn_backward(dout, q, k, v, out, lse, **kw)  # every backend
    check_grads(grads, q, k, v, dout, bias, causal)


def test_torch_autograd_cpu():
    rng, q, k, v = problem(seed=2, b=1, sq=70, sk=90)
    mask = random_mask(rng, (1, 4) + blocks(70, 90, 16, 16))
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    out = flashattn.flash_attn_func(tq, tk, tv, causal=True, block_mask=torch.from_numpy(mask),
                                    block_size=(16, 16), backend="cpu")
    dout = rng.standard_normal(q.shape).astype(np.float32)
    out.backward(torch.from_numpy(dout))
    (ref, _), bias = masked_reference(q, k, v, mask, 16, 16, causal=True)
    assert np.max(np.abs(out.detach().numpy() - ref)) <= TOL * max(1.0, np.max(np.abs(ref)))
    check_grads([x.grad.numpy() for x in (tq, tk, tv)], q, k, v, dout, bias, True)


def test_torch_forward_matches_numpy(backend):
    rng, q, k, v = problem(seed=4, b=1, sq=48, sk=80)
    mask = random_mask(rng, (1, 1) + blocks(48, 80, 16, 16))
    want = flashattn.flash_attn_func(q, k, v, block_mask=mask, block_size=(16, 16),
                                     backend=backend)
    got = flashattn.flash_attn_func(*(torch.from_numpy(x) for x in (q, k, v)),
                                    block_mask=torch.from_numpy(mask), block_size=(16, 16),
                                    backend=backend)
    assert np.array_equal(got.numpy(), want)


def test_bad_block_masks(backend):
    rng, q, k, v = problem(b=1, sq=64, sk=64)
    good = np.ones((1, 1, 4, 4), bool)
    call = lambda m, bs=(16, 16): flashattn.flash_attn_func(q, k, v, block_mask=m,
                                                            block_size=bs, backend=backend)
    with pytest.raises(ValueError, match=r"\(q_blocks, k_blocks\) = \(4, 4\)"):
        call(np.ones((1, 1, 4, 3), bool))
    with pytest.raises(ValueError, match="batch and heads"):
        call(np.ones((1, 3, 4, 4), bool))
    with pytest.raises(TypeError, match="bool or uint8"):
        call(good.astype(np.float32))
    with pytest.raises(ValueError, match="FA_STATUS_INVALID_BLOCK_SIZE"):
        call(np.ones((1, 1, 3, 3), bool), (24, 24))
    with pytest.raises(ValueError, match="FA_STATUS_INVALID_BLOCK_MASK"):
        call(good.astype(np.uint8) * 3)
    with pytest.raises(ValueError, match="block_size"):
        call(good, 16)
    assert call(good).shape == q.shape  # the context stays usable
