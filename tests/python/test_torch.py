"""test_torch.py - flashattn on torch tensors: forward and autograd gradients against torch's
math SDPA in float64, f32/f16/bf16, sinks' gradient, varlen through autograd, opcheck of both
custom ops, torch.compile(fullgraph=True), bitwise repeats, errors. Skipped without torch,
except where FLASHATTN_REQUIRE_TORCH=1 (scripts/test.sh), which makes a missing torch fail."""
import os

import numpy as np
import pytest

if os.environ.get("FLASHATTN_REQUIRE_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")

import flashattn
import flashattn._torch  # noqa: F401 (the custom ops, for opcheck)
from reference import attention

FLOOR = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def sdpa(q, k, v, causal, dtype=torch.float64):
    """torch's math SDPA in `dtype` on flash-attn's layout, causal aligned bottom-right."""
    g = q.shape[2] // k.shape[2]
    qq, kk, vv = (x.to(dtype).transpose(1, 2) for x in
                  (q, k.repeat_interleave(g, 2), v.repeat_interleave(g, 2)))
    mask = None
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        mask = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        return torch.nn.functional.scaled_dot_product_attention(
            qq, kk, vv, attn_mask=mask).transpose(1, 2)


def inputs(dtype, b=2, sq=113, sk=203, h=4, hk=2, d=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=g).to(dtype).requires_grad_()
    return make(b, sq, h, d), make(b, sk, hk, d), make(b, sk, hk, d)


def check(got, ref, naive, dtype, factor, what):
    err = (got.double() - ref).abs().max().item()
    tol = factor * naive + FLOOR[dtype] * max(1.0, ref.abs().max().item())
    assert not torch.isnan(got).any(), what
    assert err <= tol, "%s: error %.3g > %.3g (naive %.3g)" % (what, err, tol, naive)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16],
                         ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_autograd_against_float64(backend, dtype, causal):
    q, k, v = inputs(dtype)
    out = flashattn.flash_attn_func(q, k, v, causal=causal, backend=backend)
    assert out.dtype == dtype and out.shape == q.shape
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref = sdpa(q, k, v, causal)
    refs = torch.autograd.grad(ref, (q, k, v), dout.double())
    naive_out = sdpa(q, k, v, causal, dtype)  # naive attention in the same precision
    naive_grads = torch.autograd.grad(naive_out, (q, k, v), dout)
    check(out, ref, (naive_out.double() - ref).abs().max().item(), dtype, 2.0, "out")
    for name, got, r, n in zip(("dq", "dk", "dv"), grads, refs, naive_grads):
        assert got.dtype == dtype
        check(got, r, (n.double() - r).abs().max().item(), dtype, 3.0, name)


def test_sinks_gradient(backend):
    q, k, v = inputs(torch.float32, sq=40, sk=60)
    sinks = torch.randn(4, generator=torch.Generator().manual_seed(3)).requires_grad_()
    out = flashattn.flash_attn_func(q, k, v, sinks=sinks, backend=backend)
    ref, _ = attention(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(),
                       sinks=sinks.detach().numpy())
    assert np.max(np.abs(out.detach().numpy() - ref)) < 1e-4
    (out * out).sum().backward()
    # the sink's gradient against central differences of the float64 reference
    eps, numeric = 1e-4, []
    for h in range(4):
        s = sinks.detach().double().numpy().copy()
        vals = []
        for sign in (1, -1):
            s2 = s.copy()
            s2[h] += sign * eps
            o, _ = attention(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(),
                             sinks=s2)
            vals.append((o * o).sum())
        numeric.append((vals[0] - vals[1]) / (2 * eps))
    assert np.allclose(sinks.grad.numpy(), numeric, rtol=1e-3, atol=1e-3)


def test_varlen_autograd(backend):
    lens = [7, 30, 1]
    cu = torch.tensor(np.cumsum([0] + lens), dtype=torch.int32)
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(cu[-1].item(), 4, 32, generator=g).requires_grad_()
               for _ in range(3))
    out = flashattn.flash_attn_varlen_func(q, k, v, cu, cu, max(lens), max(lens), causal=True,
                                           backend=backend)
    out.sum().backward()
    for b in range(3):
        sl = slice(cu[b].item(), cu[b + 1].item())
        qb, kb, vb = (x.detach()[sl][None].requires_grad_() for x in (q, k, v))
        ref = sdpa(qb, kb, vb, True)
        ref.sum().backward()
        assert torch.allclose(out[sl].double(), ref[0], atol=1e-5)
        for got, want in ((q.grad[sl], qb.grad), (k.grad[sl], kb.grad), (v.grad[sl], vb.grad)):
            assert torch.allclose(got.double(), want[0].double(), atol=1e-4)


def op_args(q, k, v, backend, causal=True, block_mask=None):
    return (q, k, v, None, None, None, None, None, 0, 0, None, None, 0.0, None, causal, -1, -1,
            0.0, torch.tensor(0), 0, 0, backend, 0, block_mask, 16, 16)


def test_opcheck(backend):
    q, k, v = inputs(torch.float32, b=1, sq=17, sk=33, h=2, hk=1, d=32)
    torch.library.opcheck(torch.ops.flashattn.fwd.default, op_args(q, k, v, backend))
    out, lse = torch.ops.flashattn.fwd(*op_args(q, k, v, backend))
    q, k, v = (x.detach() for x in (q, k, v))  # no double backward: bwd has no autograd
    bwd_args = (torch.randn_like(out), q, k, v, out.detach(), lse.detach(), None, None, None,
                None, None, 0, 0, 0.0, None, True, -1, -1, 0.0, torch.tensor(0), 0, backend, 0,
                None, 16, 16)
    torch.library.opcheck(torch.ops.flashattn.bwd.default, bwd_args)
    mask = torch.tensor([[[[True, False, True], [False, True, True]]]])  # 2 x 3 blocks of 16
    torch.library.opcheck(torch.ops.flashattn.fwd.default,
                          op_args(q, k, v, backend, block_mask=mask))


def test_compile_fullgraph(backend):
    torch._dynamo.reset()
    q, k, v = inputs(torch.float32, b=1, sq=32, sk=32, h=2, hk=2, d=32)

    def loss(q, k, v):
        return flashattn.flash_attn_func(q, k, v, causal=True, backend=backend).square().sum()
    compiled = torch.compile(loss, fullgraph=True)
    got = compiled(q, k, v)
    got.backward()
    grads = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    want = loss(q, k, v)
    want.backward()
    assert torch.equal(got, want)
    assert all(torch.equal(a, x.grad) for a, x in zip(grads, (q, k, v)))


def test_dropout_seed_is_reused_by_backward(backend):
    q, k, v = inputs(torch.float32, b=1, sq=24, sk=40, h=2, hk=1, d=32)
    torch.manual_seed(7)
    out = flashattn.flash_attn_func(q, k, v, dropout_p=0.3, backend=backend)
    torch.manual_seed(7)
    again = flashattn.flash_attn_func(q, k, v, dropout_p=0.3, backend=backend)
    assert torch.equal(out, again)
    ref, _ = attention(*(x.detach().numpy() for x in (q, k, v)), dropout=(0.3, 5, 0))
    got = flashattn.flash_attn_func(q, k, v, dropout_p=0.3, seed=5, backend=backend)
    assert np.max(np.abs(got.detach().numpy() - ref)) < 1e-4
    got.sum().backward()  # the gradient of the same dropped-out forward
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0


def test_kvcache_torch(backend):
    g = torch.Generator().manual_seed(8)
    k_cache, v_cache = torch.randn(2, 32, 2, 64, generator=g), torch.randn(2, 32, 2, 64,
                                                                            generator=g)
    q, k, v = (torch.randn(2, 1, 4, 64, generator=g), torch.randn(2, 1, 2, 64, generator=g),
               torch.randn(2, 1, 2, 64, generator=g))
    lengths = torch.tensor([3, 20], dtype=torch.int32)
    before = k_cache.clone()
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lengths,
                                            causal=True, backend=backend)
    assert torch.equal(k_cache[0, 3], k[0, 0]) and torch.equal(k_cache[1, 20], k[1, 0])
    assert torch.equal(k_cache[0, :3], before[0, :3])
    ref, _ = attention(q.numpy(), k_cache.numpy(), v_cache.numpy(), causal=True,
                       seqlens_k=(lengths + 1).numpy())
    assert np.max(np.abs(out.numpy() - ref)) < 1e-5


def test_torch_errors(backend):
    q, k, v = inputs(torch.float32, b=1, sq=8, sk=8, h=3, hk=2, d=32)
    with pytest.raises(ValueError, match="FA_STATUS_HEADS_MISMATCH"):
        flashattn.flash_attn_func(q, k, v, backend=backend)
    with pytest.raises(TypeError, match="bfloat16"):
        flashattn.flash_attn_func(q.double(), k, v, backend=backend)
