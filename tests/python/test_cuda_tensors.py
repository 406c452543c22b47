"""test_cuda_tensors.py - torch CUDA tensors on the cuda backend, zero-copy on torch's current
stream: forward and autograd against the float64 reference, a side stream, strided inputs, and
the copy through the host on the cpu backend. Collected only where torch.cuda and the cuda
backend exist (conftest.py deselects them elsewhere; the logic around them is unit-tested with
fakes in test_cuda_interop.py)."""
import pytest

import flashattn
from flashattn import _cuda

torch = pytest.importorskip("torch")  # never reached without torch: conftest deselects first
pytestmark = pytest.mark.cuda_tensors

DEV = "cuda:0"


def ref_attention(q, k, v, causal):
    g = q.shape[2] // k.shape[2]
    qq, kk, vv = (x.double().cpu().transpose(1, 2) for x in
                  (q, k.repeat_interleave(g, 2), v.repeat_interleave(g, 2)))
    mask = None
    if causal:
        sq, sk = q.shape[1], k.shape[1]
        mask = torch.arange(sk)[None, :] <= torch.arange(sq)[:, None] + sk - sq
    return torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask) \
        .transpose(1, 2)


def make(dtype, b=2, sq=113, sk=203, h=4, hk=2, d=64, grad=False):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*s, generator=g).to(DEV, dtype).requires_grad_(grad) for s in
            ((b, sq, h, d), (b, sk, hk, d), (b, sk, hk, d))]


def tol(dtype):
    return {torch.float32: 2e-4, torch.float16: 4e-3, torch.bfloat16: 3e-2}[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_forward_in_place_on_the_current_stream(dtype):
    q, k, v = make(dtype)
    out = flashattn.flash_attn_func(q, k, v, causal=True, backend="cuda")
    assert out.device == q.device and out.dtype == dtype
    err = (out.double().cpu() - ref_attention(q, k, v, True)).abs().max().item()
    assert err <= tol(dtype)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    assert (0, stream) in _cuda.INTEROP.contexts  # the interop context of torch's stream


def test_side_stream():
    q, k, v = make(torch.float16)
    side = torch.cuda.Stream(device=DEV)
    with torch.cuda.stream(side):
        out = flashattn.flash_attn_func(q, k, v, backend="cuda")
    side.synchronize()
    assert (0, side.cuda_stream) in _cuda.INTEROP.contexts
    err = (out.double().cpu() - ref_attention(q, k, v, False)).abs().max().item()
    assert err <= tol(torch.float16)


def test_autograd():
    q, k, v = make(torch.float32, grad=True)
    out = flashattn.flash_attn_func(q, k, v, causal=True, backend="cuda")
    dout = torch.randn_like(out)
    out.backward(dout)
    qr, kr, vr = (x.detach().double().cpu().requires_grad_() for x in (q, k, v))
    ref_attention(qr, kr, vr, True).backward(dout.double().cpu())
    for got, want in ((q.grad, qr.grad), (k.grad, kr.grad), (v.grad, vr.grad)):
        assert got.device == q.device
        assert (got.double().cpu() - want).abs().max().item() <= 1e-3


def test_strided_slice_of_packed_qkv():
    qkv = torch.randn(1, 97, 3, 4, 64, device=DEV)
    q, k, v = qkv.unbind(2)  # BSHD views with a seq stride of 3 * 4 * 64
    out = flashattn.flash_attn_func(q, k, v, backend="cuda")
    err = (out.double().cpu() - ref_attention(q, k, v, False)).abs().max().item()
    assert err <= tol(torch.float32)


def test_cuda_tensors_on_the_cpu_backend_are_copied():
    q, k, v = make(torch.float32, b=1, sq=17, sk=33)
    out = flashattn.flash_attn_func(q, k, v, backend="cpu")
    assert out.device == q.device
    err = (out.double().cpu() - ref_attention(q, k, v, False)).abs().max().item()
    assert err <= 1e-5


def test_other_device_refused():
    q, k, v = make(torch.float32, b=1, sq=8, sk=8)
    with pytest.raises(ValueError):  # placement's refusal, or no device 1 on this machine
        flashattn.flash_attn_func(q, k, v, backend="cuda", device=1)
