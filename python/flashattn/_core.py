"""_core.py - contexts, plans and runs, cached and locked; no numpy or torch in here.

A front end (interface.py for numpy, _torch.py for torch) describes a call as a Spec (the
problem: shapes, strides, dtype and every option; hashable) and host tensors (Arr: a pointer,
its bytes). The core keeps one context per (backend, device) and one plan per (op, Spec) in it
(dropout's seed and offset set on the plan per call, not part of its key), so a repeated call
of the same shape neither re-plans nor rebuilds a kernel, and it serialises the calls on one
context with that context's lock (the C API allows one thread per context).
"""
import collections
import ctypes
import threading

from ._lib import (BACKENDS, DTYPES, LAYOUT_BSHD, MASK_CAUSAL_BOTTOM_RIGHT, MASK_NONE,
                   TENSOR_NAMES, ContextOptions, DeviceProps, Problem, Tensors, TensorLayout,
                   c_vp, check, lib)

PLAN_CACHE_SIZE = 64  # plans kept per context, least recently used dropped first
KEPT_WRAPS = 16  # wraps of small inputs kept per context (_kept_wrap), the oldest dropped first
KEPT_WRAP_BYTES = 1 << 20  # the largest input kept: what a wrap costs matters for small calls

# A host tensor as the library sees it: its first element's address and the bytes from there to
# the end of its last element (its strides are in the Spec).
Arr = collections.namedtuple("Arr", "ptr nbytes")

# One call's problem. Layouts are (kind, strides in elements): "bshd" (batch, seq, head),
# "packed" (varlen: token, head), "paged" (page, slot, head) or "bhs" (a bias: batch, head, row).
Spec = collections.namedtuple("Spec", [
    "dtype", "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "layouts",
    "causal", "scale", "window", "softcap", "alibi", "bias_dtype", "sinks", "dropout",
    "varlen", "seqlens_k", "paged", "kv_splits", "block_sparse"])

SPEC_DEFAULTS = dict(causal=False, scale=None, window=(-1, -1), softcap=0.0, alibi=0,
                     bias_dtype=None, sinks=False, dropout=(0.0, 0, 0), varlen=False,
                     seqlens_k=False, paged=None, kv_splits=0, block_sparse=None)


def make_spec(**fields):
    return Spec(**{**SPEC_DEFAULTS, **fields})


def _layout(kind, strides):
    if kind == "bshd":
        sb, ss, sh = strides
    elif kind == "packed":
        (ss, sh), sb = strides, 0
    elif kind == "paged":
        sb, ss, sh = strides
    else:  # "bhs": a bias's batch, head and row strides
        sb, sh, ss = strides
    return TensorLayout(0, sb, sh, ss)


def build_problem(spec):
    """The fa_problem of a Spec."""
    p = Problem()
    check(lib.fa_problem_init(ctypes.byref(p), DTYPES[spec.dtype], LAYOUT_BSHD, spec.batch,
                              spec.heads_q, spec.heads_kv, spec.seqlen_q, spec.seqlen_k,
                              spec.head_dim))
    if spec.paged is not None:
        check(lib.fa_problem_set_paged(ctypes.byref(p), *spec.paged))
    for name, (kind, strides) in spec.layouts:
        setattr(p, "bias_layout" if name == "bias" else name, _layout(kind, strides))
    p.mask = MASK_CAUSAL_BOTTOM_RIGHT if spec.causal else MASK_NONE
    p.scale = 0.0 if spec.scale is None else spec.scale
    if tuple(spec.window) != (-1, -1):
        p.window, (p.window_left, p.window_right) = 1, spec.window
    p.softcap = spec.softcap
    p.alibi = int(spec.alibi)
    if spec.bias_dtype is not None:
        p.bias, p.bias_dtype = 1, DTYPES[spec.bias_dtype]
    p.sinks = int(spec.sinks)
    p.dropout_p, p.dropout_seed, p.dropout_offset = spec.dropout
    p.varlen, p.seqlens_k = int(spec.varlen), int(spec.seqlens_k)
    p.kv_splits = spec.kv_splits
    if spec.block_sparse is not None:  # (block_q, block_k, the lists' batch and heads)
        p.block_sparse = 1
        p.sparse_block_q, p.sparse_block_k, p.sparse_batch, p.sparse_heads = spec.block_sparse
    return p


def unseeded(spec):
    """The Spec a plan is cached under: dropout's seed and offset left out, since a plan takes
    them at run time (fa_plan_set_dropout) and a training loop draws a new seed every call."""
    p = spec.dropout[0]
    return spec._replace(dropout=(p, 0, 0)) if p else spec


class _Plan:
    """A plan of one (op, Spec), and on an accelerator its device buffers by tensor name."""

    def __init__(self, ctx, op, spec):
        self.problem = build_problem(spec)
        handle = c_vp()
        create = lib.fa_plan_create_backward if op == "backward" else lib.fa_plan_create
        check(create(ctx.handle, ctypes.byref(self.problem), ctypes.byref(handle)), ctx.handle)
        self.handle = handle.value
        self.buffers = {}
        self.seeded = spec.dropout[1:]  # the dropout seed and offset its launches hold

    def reseed(self, ctx, dropout):
        """Gives a dropout plan the call's (p, seed, offset); a no-op when it has them."""
        if dropout[0] and self.seeded != dropout[1:]:
            check(lib.fa_plan_set_dropout(self.handle, dropout[1], dropout[2]), ctx.handle)
            self.seeded = dropout[1:]

    def explain(self):
        return lib.fa_plan_explain(self.handle).decode()

    def destroy(self):
        for buf in self.buffers.values():
            lib.fa_buffer_destroy(buf)
        self.buffers.clear()
        lib.fa_plan_destroy(self.handle)
        self.handle = None


class Context:
    """One fa_context, its plans and the lock that serialises its calls."""

    def __init__(self, backend, device, handle=None, wrap=None, empty_ptr=None):
        """A new fa_context of (backend, device), or, with `handle`, one made elsewhere (a CUDA
        interop context, _cuda.py) whose tensors `wrap` wraps in place (empty_ptr: 16 bytes
        of its memory bound where a tensor has none)."""
        if handle is None:
            opts = ContextOptions(BACKENDS[backend], device)
            made, why = c_vp(), ctypes.create_string_buffer(1024)
            check(lib.fa_context_create(ctypes.byref(made), ctypes.byref(opts), why, len(why)),
                  why=why)
            handle = made.value
        self.handle = handle
        self.backend = lib.fa_backend_name(lib.fa_context_backend(self.handle)).decode()
        self.device = lib.fa_context_device(self.handle)
        self.note = lib.fa_context_backend_note(self.handle).decode()
        # How the tensors are bound: wrapped in place by `wrap` (host arrays on cpu and on
        # OpenCL CPU devices, device memory on a CUDA interop context), else copied (None).
        self.wrap = wrap or (lib.fa_buffer_wrap_host if self._wraps_host() else None)
        self.host = self.wrap is not None  # tensors used in place
        self.empty_ptr = empty_ptr or _EMPTY_PTR
        self.lock = threading.Lock()
        self.plans = collections.OrderedDict()
        self.plans_created = 0  # for the tests: a cached shape must not re-plan
        self.kept = {}  # id(input) -> (input, its wrap, address, bytes): _kept_wrap

    def _wraps_host(self):
        """Whether the library wraps host arrays here without a copy (the device's memory is
        host memory); a GPU answers UNSUPPORTED, and its arrays are copied."""
        buf = c_vp()
        if lib.fa_buffer_wrap_host(self.handle, _EMPTY_PTR, _EMPTY_BYTES, ctypes.byref(buf)):
            return False
        lib.fa_buffer_destroy(buf.value)
        return True

    def plan(self, op, spec):
        """The cached plan of (op, spec), made on first use, with spec's dropout seed and
        offset. Called with the lock held."""
        key = (op, unseeded(spec))
        plan = self.plans.get(key)
        if plan is not None:
            self.plans.move_to_end(key)
            plan.reseed(self, spec.dropout)
            return plan
        plan = _Plan(self, op, spec)
        self.plans_created += 1
        self.plans[key] = plan
        while len(self.plans) > PLAN_CACHE_SIZE:
            self.plans.popitem(last=False)[1].destroy()
        return plan

    def props(self):
        props = DeviceProps()
        check(lib.fa_context_device_props(self.handle, ctypes.byref(props)), self.handle)
        return props

    def run(self, op, spec, inputs, outputs):
        """Runs the plan of (op, spec): inputs and outputs map fa_tensors names to Arr."""
        with self.lock:
            plan = self.plan(op, spec)
            if self.host:
                self._run_host(plan, inputs, outputs)
            else:
                self._run_device(plan, inputs, outputs)

    def run_prepared(self, call, tensors, ptr, dropout=None):
        """Runs a Prepared call on `tensors` (in call.names' order); ptr(x) is x's address;
        dropout: this call's (p, seed, offset) where the call has dropout."""
        with self.lock:
            plan = call.plan
            if plan is None or plan.handle is None:  # first use, or dropped from the cache
                plan = call.plan = self.plan(call.op, call.spec)
            if dropout is not None:
                plan.reseed(self, dropout)
            if not self.host:
                arrs = [Arr(ptr(x), n) for x, n in zip(tensors, call.nbytes)]
                names, n_in = call.names, call.n_in
                self._run_device(plan, dict(zip(names[:n_in], arrs[:n_in])),
                                 dict(zip(names[n_in:], arrs[n_in:])))
                return
            wraps, handle, n_in, kept = [], self.handle, call.n_in, self.kept
            try:
                for i, (name, x, size) in enumerate(zip(call.names, tensors, call.nbytes)):
                    buf = None
                    if i < n_in:  # an input passed before, at the same address: its wrap
                        entry = kept.get(id(x))
                        if (entry is not None and entry[0] is x and entry[3] == size and
                                entry[2] == ptr(x) and size):
                            buf = entry[1]
                        else:
                            buf = self._kept_wrap(x, size, ptr)
                    if buf is None:  # _wrap's work inline: two of these a call
                        status = self.wrap(handle, ptr(x) if size else self.empty_ptr,
                                           size or _EMPTY_BYTES, call.buf_ref)
                        if status:
                            check(status, handle)
                        buf = call.buf.value
                        wraps.append(buf)
                    setattr(call.tensors, name, buf)
                status = lib.fa_run(handle, plan.handle, call.tensors_ref)
                if status:
                    check(status, handle)
            finally:
                for buf in wraps:
                    lib.fa_buffer_destroy(buf)

    def _kept_wrap(self, x, size, ptr):
        """The kept wrap of input x, made on its first use: small inputs passed again and again
        (a decode loop's, a benchmark's) skip a wrap and its destroy. A kept entry holds x, so
        the memory it wraps stays valid until the entry is dropped, the oldest first; it is
        used only while x is at the same address with the same extent (a torch resize_ moves
        it)."""
        if not size or size > KEPT_WRAP_BYTES:
            return None
        address = ptr(x)
        entry = self.kept.get(id(x))
        if entry is not None and entry[0] is x and entry[2:] == (address, size):
            return entry[1]
        buf = c_vp()
        check(self.wrap(self.handle, address, size, ctypes.byref(buf)), self.handle)
        if entry is not None:
            lib.fa_buffer_destroy(entry[1])
        self.kept[id(x)] = (x, buf.value, address, size)
        while len(self.kept) > KEPT_WRAPS:
            lib.fa_buffer_destroy(self.kept.pop(next(iter(self.kept)))[1])
        return buf.value

    def _run_host(self, plan, inputs, outputs):
        tensors, wraps = Tensors(), []
        try:
            for name, arr in list(inputs.items()) + list(outputs.items()):
                buf = c_vp()
                ptr, size = (arr.ptr, arr.nbytes) if arr.nbytes else (self.empty_ptr,
                                                                      _EMPTY_BYTES)
                check(self.wrap(self.handle, ptr, size, ctypes.byref(buf)), self.handle)
                wraps.append(buf.value)
                setattr(tensors, name, buf.value)
            check(lib.fa_run(self.handle, plan.handle, ctypes.byref(tensors)), self.handle)
        finally:
            for buf in wraps:
                lib.fa_buffer_destroy(buf)

    def _device_buffer(self, plan, name, nbytes):
        """The plan's device buffer for a tensor, (re)made when its size changes."""
        nbytes = max(nbytes, _EMPTY_BYTES)
        buf = plan.buffers.get(name)
        if buf is not None and lib.fa_buffer_size(buf) != nbytes:
            lib.fa_buffer_destroy(plan.buffers.pop(name))
            buf = None
        if buf is None:
            handle = c_vp()
            check(lib.fa_buffer_create(self.handle, nbytes, ctypes.byref(handle)), self.handle)
            buf = plan.buffers[name] = handle.value
        return buf

    def _run_device(self, plan, inputs, outputs):
        tensors = Tensors()
        for name, arr in inputs.items():
            buf = self._device_buffer(plan, name, arr.nbytes)
            if arr.nbytes:
                check(lib.fa_buffer_write(buf, 0, arr.ptr, arr.nbytes), self.handle)
            setattr(tensors, name, buf)
        for name, arr in outputs.items():
            setattr(tensors, name, self._device_buffer(plan, name, arr.nbytes))
        check(lib.fa_run(self.handle, plan.handle, ctypes.byref(tensors)), self.handle)
        for name, arr in outputs.items():
            if arr.nbytes:
                check(lib.fa_buffer_read(getattr(tensors, name), 0, arr.ptr, arr.nbytes),
                      self.handle)

    def close(self):
        with self.lock:
            for entry in self.kept.values():
                lib.fa_buffer_destroy(entry[1])
            self.kept.clear()
            for plan in self.plans.values():
                plan.destroy()
            self.plans.clear()
            lib.fa_context_destroy(self.handle)
            self.handle = None


class Prepared:
    """One call's fixed part, cached by a front end per argument signature: the op and Spec,
    the tensors' fa_tensors names (inputs first) and byte extents; a run then needs only the
    pointers. Its Tensors struct and wrap handle are reused under the context's lock."""

    def __init__(self, op, spec, names, n_in, nbytes):
        self.op, self.spec, self.names, self.n_in, self.nbytes = op, spec, names, n_in, nbytes
        self.plan = None
        self.tensors, self.buf = Tensors(), c_vp()
        self.tensors_ref, self.buf_ref = ctypes.byref(self.tensors), ctypes.byref(self.buf)


# A tensor of no bytes (seqlen_k = 0, ...) is bound to this instead: the library asks for a
# buffer of at least one byte and reads none of it.
_EMPTY_BYTES = 16
_EMPTY = ctypes.create_string_buffer(_EMPTY_BYTES)
_EMPTY_PTR = ctypes.addressof(_EMPTY)

_contexts = {}
_contexts_lock = threading.Lock()


def context(backend, device):
    """The cached context of (backend, device); "auto" is resolved once, by the library."""
    if backend not in BACKENDS:
        raise ValueError("flashattn: unknown backend %r (one of %s)"
                         % (backend, ", ".join(BACKENDS)))
    if not isinstance(device, int) or isinstance(device, bool):
        raise TypeError("flashattn: device must be an int, not %s" % type(device).__name__)
    key = (backend, device)
    ctx = _contexts.get(key)
    if ctx is not None:
        return ctx
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = Context(backend, device)
            _contexts[key] = ctx
        return ctx


def devices():
    """Every backend the library knows, with its devices' properties or why it has none."""
    out = []
    for i in range(lib.fa_backend_count()):
        backend = lib.fa_backend_at(i)
        name = lib.fa_backend_name(backend).decode()
        count, why = ctypes.c_int(0), ctypes.create_string_buffer(1024)
        status = lib.fa_backend_device_count(backend, ctypes.byref(count), why, len(why))
        entry = {"backend": name, "devices": [], "why": why.value.decode() if status else ""}
        for d in range(count.value):
            props = DeviceProps()
            check(lib.fa_backend_device_props(backend, d, ctypes.byref(props), why, len(why)),
                  why=why)
            entry["devices"].append(props_dict(props))
        out.append(entry)
    return out


def props_dict(props):
    out = {}
    for name, _ in props._fields_:
        value = getattr(props, name)
        out[name] = value.decode(errors="replace") if isinstance(value, bytes) else value
    out["backend"] = lib.fa_backend_name(props.backend).decode()
    return out
