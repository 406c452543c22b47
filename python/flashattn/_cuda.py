"""_cuda.py - torch CUDA tensors on the cuda backend without copies: the decision of which
tensors are wrapped, copied or refused, and the CUDA interop contexts (flashattn_cuda.h) made on
torch's primary context and current stream, one per (device, stream), whose runs wrap the
tensors' device pointers (fa_buffer_wrap_cuda).

Nothing here imports torch or loads the driver at import: the decision table and the context
cache take their device facts and the driver as arguments, so the tests run them with fakes on
a machine without a GPU; the real path runs where torch.cuda and the cuda backend exist.
"""
import collections
import ctypes
import threading

from . import _core
from ._lib import c_vp, check, has_cuda_interop, lib

HOST, WRAP, COPY = "host", "wrap", "copy"


def placement(devices, backend, device):
    """How a call's tensors reach the backend: HOST (all on the CPU: in place where the backend
    reads host memory, else copied, as _core decides), WRAP (all on CUDA device `device` and
    the backend is cuda: their device pointers, on torch's current stream), COPY (through the
    host: CUDA tensors on the cpu or OpenCL backend, other devices' tensors anywhere). Raises
    ValueError for tensors on several devices, or on another CUDA device than `device` when the
    backend is cuda. devices: the set of (type, index) of the call's tensors; backend: the one
    the context resolved to ("cpu", "opencl", "cuda")."""
    types = {t for t, _ in devices}
    if len(devices) > 1:
        raise ValueError("flashattn: the tensors are on several devices (%s); move them to one"
                         % ", ".join(sorted("%s:%s" % (t, "" if i is None else i)
                                            for t, i in devices)))
    if not devices or types == {"cpu"}:
        return HOST
    kind, index = next(iter(devices))
    if kind != "cuda" or backend != "cuda":
        return COPY
    if index != device:
        raise ValueError("flashattn: the tensors are on cuda:%d but device=%d; pass device=%d "
                         "(the cuda backend runs on the tensors' own device)"
                         % (index, device, index))
    return WRAP


class Driver:
    """The CUDA driver's primary contexts (the ones torch runs on), through libcuda.so.1."""

    def __init__(self, path="libcuda.so.1"):
        self.cuda = ctypes.CDLL(path)
        self._call("cuInit", 0)
        self.contexts = {}

    def _call(self, name, *args):
        status = getattr(self.cuda, name)(*args)
        if status != 0:
            raise RuntimeError("flashattn: %s failed with CUDA error %d" % (name, status))

    def primary_context(self, ordinal):
        """The device's primary CUcontext, retained once for the process's life."""
        if ordinal not in self.contexts:
            dev, ctx = ctypes.c_int(0), c_vp()
            self._call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(ordinal))
            self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
            self.contexts[ordinal] = ctx.value
        return self.contexts[ordinal]


def create_context(cu_context, stream):
    """An fa_context on (cu_context, stream) (fa_context_create_cuda); its handle."""
    if not has_cuda_interop():
        raise NotImplementedError("flashattn: this library was built without the CUDA backend, "
                                  "so CUDA tensors cannot be wrapped; copy them to the CPU")
    handle, why = c_vp(), ctypes.create_string_buffer(1024)
    check(lib.fa_context_create_cuda(ctypes.byref(handle), cu_context, stream or None, why,
                                     len(why)), why=why)
    return handle.value


def adopt_context(handle, empty_ptr):
    return _core.Context(None, None, handle=handle, wrap=lib.fa_buffer_wrap_cuda,
                         empty_ptr=empty_ptr)


class Interop:
    """The interop contexts by (device, stream), the least recently used closed past `size`
    (each holds its plans). driver, create, adopt and empty are the real ones above by default
    (empty(ordinal): the address of 16 bytes of device memory for empty tensors)."""

    def __init__(self, driver=None, create=create_context, adopt=adopt_context, empty=None,
                 size=8):
        self.driver, self.create, self.adopt, self.empty = driver, create, adopt, empty
        self.size = size
        self.contexts = collections.OrderedDict()
        self.lock = threading.Lock()

    def context(self, ordinal, stream):
        key = (ordinal, stream)
        with self.lock:
            ctx = self.contexts.get(key)
            if ctx is not None:
                self.contexts.move_to_end(key)
                return ctx
            if self.driver is None:
                self.driver = Driver()
            handle = self.create(self.driver.primary_context(ordinal), stream)
            ctx = self.contexts[key] = self.adopt(handle, self.empty(ordinal))
            while len(self.contexts) > self.size:
                self.contexts.popitem(last=False)[1].close()
            return ctx


INTEROP = None  # made on the first CUDA tensor wrapped (_torch.py)
