"""test_cuda_interop.py - torch CUDA tensors on the cuda backend (_cuda.py): the decision table
(which tensors are wrapped, copied or refused), the interop contexts' cache per (device,
stream) with a fake driver and fake contexts, and the CUDA adapter's pointer and stream
extraction with fake tensors: all without a GPU. The real zero-copy path is in
test_cuda_tensors.py, collected only where torch.cuda and the cuda backend exist."""
import types

import pytest

import flashattn
from flashattn import _cuda

CPU, CUDA0, CUDA1 = ("cpu", None), ("cuda", 0), ("cuda", 1)


@pytest.mark.parametrize("devices, backend, device, want", [
    ({CPU}, "cpu", 0, _cuda.HOST),
    ({CPU}, "opencl", 0, _cuda.HOST),
    ({CPU}, "cuda", 0, _cuda.HOST),      # host tensors on a GPU: copied by the core
    (set(), "cuda", 0, _cuda.HOST),
    ({CUDA0}, "cuda", 0, _cuda.WRAP),    # the zero-copy case
    ({CUDA1}, "cuda", 1, _cuda.WRAP),
    ({CUDA0}, "cpu", 0, _cuda.COPY),     # through the host
    ({CUDA0}, "opencl", 0, _cuda.COPY),
    ({("mps", 0)}, "cuda", 0, _cuda.COPY),
    ({("xpu", 0)}, "opencl", 0, _cuda.COPY),
])
def test_placement(devices, backend, device, want):
    assert _cuda.placement(devices, backend, device) == want


@pytest.mark.parametrize("devices, backend, device, match", [
    ({CUDA1}, "cuda", 0, "on cuda:1 but device=0; pass device=1"),
    ({CPU, CUDA0}, "cuda", 0, "several devices"),
    ({CUDA0, CUDA1}, "cuda", 0, "several devices"),
    ({CPU, CUDA0}, "cpu", 0, "several devices"),
])
def test_placement_refuses(devices, backend, device, match):
    with pytest.raises(ValueError, match=match):
        _cuda.placement(devices, backend, device)


class FakeDriver:
    def __init__(self):
        self.retained = []

    def primary_context(self, ordinal):
        self.retained.append(ordinal)
        return 0x1000 + ordinal


class FakeContext:
    def __init__(self, handle, empty_ptr):
        self.handle, self.empty_ptr, self.closed = handle, empty_ptr, False

    def close(self):
        self.closed = True


def fake_interop(size=8):
    made = []

    def create(cu_context, stream):
        made.append((cu_context, stream))
        return len(made)
    interop = _cuda.Interop(driver=FakeDriver(), create=create, adopt=FakeContext,
                            empty=lambda ordinal: 0x9000 + ordinal, size=size)
    return interop, made


def test_one_context_per_device_and_stream():
    interop, made = fake_interop()
    a = interop.context(0, 0x77)
    assert interop.context(0, 0x77) is a  # cached
    b = interop.context(0, 0x88)          # another stream: another context
    c = interop.context(1, 0x77)          # another device
    assert len({id(a), id(b), id(c)}) == 3
    assert made == [(0x1000, 0x77), (0x1000, 0x88), (0x1001, 0x77)]
    assert (a.empty_ptr, c.empty_ptr) == (0x9000, 0x9001)


def test_least_recent_context_closed_past_the_size():
    interop, made = fake_interop(size=2)
    first = interop.context(0, 1)
    second = interop.context(0, 2)
    interop.context(0, 1)  # first is now the most recent
    interop.context(0, 3)
    assert second.closed and not first.closed
    assert list(interop.contexts) == [(0, 1), (0, 3)]


def test_no_cuda_interop_in_the_library_is_refused(monkeypatch):
    monkeypatch.setattr(_cuda, "has_cuda_interop", lambda: False)
    with pytest.raises(NotImplementedError, match="without the CUDA backend"):
        _cuda.create_context(0x1000, 0)


def test_interop_context_creation_reports_the_library(monkeypatch):
    """With the library's real fa_context_create_cuda and a bogus CUcontext, the failure is an
    exception carrying its message, never a crash (here: no driver, or an invalid context)."""
    if not _cuda.has_cuda_interop():  # a library built without CUDA headers refuses instead
        with pytest.raises(NotImplementedError, match="without the CUDA backend"):
            _cuda.create_context(0x1000, 0)
        return
    with pytest.raises(Exception, match="FA_STATUS_") as info:
        _cuda.create_context(0x1000, 0)
    assert isinstance(info.value, flashattn.FlashAttnError)


def test_adapter_extraction_with_fakes(monkeypatch):
    torch = pytest.importorskip("torch")
    from flashattn import _torch
    streams = {}
    fake_cuda = types.SimpleNamespace(current_stream=lambda dev: streams.setdefault(
        dev, types.SimpleNamespace(cuda_stream=0x5000 + dev.index)))
    monkeypatch.setattr(_torch.torch, "cuda", fake_cuda)
    interop, made = fake_interop()
    monkeypatch.setattr(_cuda, "INTEROP", interop)
    ad = _torch.CudaAdapter(1)
    ctx = ad.context("cuda", 1)
    assert made == [(0x1001, 0x5001)] and ctx is ad.context("auto", 1)
    with pytest.raises(TypeError):  # CUDA calls are never cached by signature
        ad.signature(torch.zeros(1))
    x = torch.zeros(2, 3, 4)
    assert ad.arr(x).ptr == x.data_ptr() and ad.arr(x).nbytes == 96
    t = x.transpose(1, 2)  # head dim not contiguous: made contiguous (on its device)
    assert ad.prepare(t, "q").is_contiguous() and ad.prepare(x, "q") is x
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        ad.prepare(x.double(), "q")


def test_adapter_choice(monkeypatch):
    torch = pytest.importorskip("torch")
    from flashattn import _torch
    cpu = torch.zeros(1)
    assert _torch.adapter((cpu, cpu, None), "cpu", 0) is _torch.TorchAdapter
    fake = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda", index=0))
    monkeypatch.setattr(_torch, "torch", types.SimpleNamespace(
        Tensor=types.SimpleNamespace, device=lambda *a: a))
    monkeypatch.setattr(_torch._core, "context", lambda b, d: types.SimpleNamespace(
        backend="cuda" if b in ("cuda", "auto") else b))
    assert isinstance(_torch.adapter((fake, fake), "auto", 0), _torch.CudaAdapter)
    assert _torch.adapter((fake, fake), "opencl", 0) is _torch.TorchAdapter
    with pytest.raises(ValueError, match="device=1"):
        _torch.adapter((fake,), "cuda", 1)
