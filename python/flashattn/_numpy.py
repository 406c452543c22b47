"""_numpy.py - the adapter that lets _ops work on numpy arrays (float32, float16)."""
import ctypes

import numpy as np

from ._core import Arr, context

_DTYPES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}
_NUMPY = {v: k for k, v in _DTYPES.items()}
_char_at, _addressof = ctypes.c_char.from_buffer, ctypes.addressof


def _extent(x):
    """Bytes from x's first element to the end of its last (non-negative strides)."""
    if x.size == 0:
        return 0
    return (sum((n - 1) * s for n, s in zip(x.shape, x.strides)) + x.itemsize)


def _usable(x):
    """Whether the library can read x in place: strides whole, non-negative, last one 1."""
    item = x.itemsize
    return (x.ndim == 0 or x.strides[-1] == item or x.shape[-1] <= 1) and all(
        s >= 0 and s % item == 0 for s in x.strides)


def _in_place(x):
    return x if _usable(x) else np.ascontiguousarray(x)


class NumpyAdapter:
    name = "numpy"
    context = staticmethod(context)  # the (backend, device) context its calls run on

    @staticmethod
    def prepare(x, name):
        if not isinstance(x, np.ndarray):
            raise TypeError("flashattn: %s must be a numpy array, not %s"
                            % (name, type(x).__name__))
        if x.dtype not in _DTYPES:
            raise TypeError("flashattn: %s must be float32 or float16, not %s" % (name, x.dtype))
        return _in_place(x)

    @staticmethod
    def dtype(x):
        return _DTYPES[x.dtype]

    @staticmethod
    def shape(x):
        return tuple(x.shape)

    @staticmethod
    def strides(x):
        """Strides in elements; a size-1 dimension's stride does not matter, given as 0."""
        return tuple(s // x.itemsize if n > 1 else 0 for n, s in zip(x.shape, x.strides))

    @staticmethod
    def signature(x):
        """What a cached call depends on: the kind, shape, strides and dtype."""
        return type(x), x.shape, x.strides, x.dtype

    @staticmethod
    def ptr(x):
        try:  # a writable contiguous array's address without numpy's ctypes helper (~1 us)
            return _addressof(_char_at(x))
        except (TypeError, ValueError):
            return x.ctypes.data

    @staticmethod
    def arr(x):
        return Arr(x.ctypes.data, _extent(x))

    @staticmethod
    def empty(shape, dtype, like):
        return np.empty(shape, _NUMPY[dtype])

    @staticmethod
    def vector_f32(x, name):
        return np.ascontiguousarray(np.asarray(x, dtype=np.float32))

    @staticmethod
    def int32(x, name):
        x = np.asarray(x)
        if x.dtype.kind not in "iu":
            raise TypeError("flashattn: %s must be integers, not %s" % (name, x.dtype))
        return np.ascontiguousarray(x, dtype=np.int32)

    @staticmethod
    def host_mask(x):
        return np.asarray(x)

    @staticmethod
    def from_numpy(x):
        return x

    @staticmethod
    def lse(x, shape):
        x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
        if x.shape != tuple(shape):
            raise ValueError("flashattn: softmax_lse must have shape %s, has %s"
                             % (tuple(shape), x.shape))
        return x

    @staticmethod
    def bias(x, shape, dtype):
        """The bias broadcast (stride 0) to (batch, nheads, seqlen_q, seqlen_k), in f32 or q's
        dtype, keys contiguous."""
        x = np.asarray(x)
        if x.dtype not in (np.dtype(np.float32), _NUMPY[dtype]):
            raise TypeError("flashattn: bias must be float32 or q's dtype, not %s" % x.dtype)
        try:
            x = np.broadcast_to(x, shape)
        except ValueError:
            raise ValueError("flashattn: bias of shape %s does not broadcast to (batch, nheads, "
                             "seqlen_q, seqlen_k) = %s" % (x.shape, tuple(shape))) from None
        return _in_place(x)
