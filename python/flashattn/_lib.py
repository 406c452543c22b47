"""_lib.py - the C library through ctypes: its structs mirrored field by field, the prototypes
of the functions the package calls, and a status turned into an exception with its message.

The struct mirrors must match include/flashattn.h exactly: tests/python/test_layout.py compiles
a probe against the header and compares every size and offset, so a header change that is not
made here too fails the tests instead of corrupting memory.
"""
import ctypes
import os

c_i32, c_i64, c_u32, c_u64 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_uint64
c_enum = ctypes.c_int  # C enums are ints on every ABI the library is built for
c_vp = ctypes.c_void_p


class TensorLayout(ctypes.Structure):
    _fields_ = [("offset", c_i64), ("stride_batch", c_i64), ("stride_head", c_i64),
                ("stride_seq", c_i64)]


class Problem(ctypes.Structure):
    _fields_ = [
        ("dtype", c_enum), ("batch", c_i64), ("heads_q", c_i64), ("heads_kv", c_i64),
        ("seqlen_q", c_i64), ("seqlen_k", c_i64), ("head_dim", c_i64),
        ("q", TensorLayout), ("k", TensorLayout), ("v", TensorLayout), ("o", TensorLayout),
        ("mask", c_enum), ("scale", ctypes.c_float), ("block_r", c_i32), ("block_c", c_i32),
        ("d_o", TensorLayout), ("dq", TensorLayout), ("dk", TensorLayout), ("dv", TensorLayout),
        ("softcap", ctypes.c_float), ("alibi", c_i32), ("bias", c_i32), ("bias_dtype", c_enum),
        ("bias_layout", TensorLayout), ("window", c_i32), ("window_left", c_i64),
        ("window_right", c_i64), ("sinks", c_i32), ("dropout_p", ctypes.c_float),
        ("dropout_seed", c_u64), ("dropout_offset", c_u32), ("varlen", c_i32),
        ("seqlens_k", c_i32), ("page_size", c_i64), ("num_pages", c_i64),
        ("pages_per_seq", c_i64), ("kv_splits", c_i32),
        ("block_sparse", c_i32), ("sparse_block_q", c_i32), ("sparse_block_k", c_i32),
        ("sparse_batch", c_i32), ("sparse_heads", c_i32), ("sparse_full", c_i32),
        ("q_position", c_i64), ("k_position", c_i64), ("whole_seqlen_q", c_i64),
        ("whole_seqlen_k", c_i64)]


# fa_tensors' members, in the header's order; each a const or non-const fa_buffer pointer.
TENSOR_NAMES = ("q", "k", "v", "o", "lse", "d_o", "dq", "dk", "dv", "alibi_slopes", "bias",
                "sinks", "d_sinks", "cu_seqlens_q", "cu_seqlens_k", "seqlens_k", "block_table",
                "o_parts", "lse_parts", "kv_num_blocks", "kv_indices", "full_kv_num_blocks",
                "full_kv_indices", "q_num_blocks", "q_indices", "full_q_num_blocks",
                "full_q_indices")


class Tensors(ctypes.Structure):
    _fields_ = [(name, c_vp) for name in TENSOR_NAMES]


class DeviceProps(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 256), ("vendor", ctypes.c_char * 128), ("backend", c_enum),
        ("sram_bytes", c_u64), ("global_mem_bytes", c_u64), ("max_work_group_size", c_u32),
        ("compute_units", c_u32), ("fp16", c_u32), ("bf16", c_u32),
        ("arch", ctypes.c_char * 32), ("gpu", c_u32), ("local_mem_global", c_u32),
        ("wg_multiple", c_u32), ("vector_width", c_u32)]


class ContextOptions(ctypes.Structure):
    _fields_ = [("backend", c_enum), ("device", ctypes.c_int)]


class PlanLaunchInfo(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_char_p), ("grid", c_u64 * 3), ("onchip_bytes", c_u64),
                ("work_group_size", c_i32), ("block_r", c_i32), ("block_c", c_i32)]


class BlockMaskShape(ctypes.Structure):  # flashattn_block_mask.h
    _fields_ = [("batch", c_i64), ("heads", c_i64), ("seqlen_q", c_i64), ("seqlen_k", c_i64),
                ("block_q", c_i32), ("block_k", c_i32)]


class BlockLists(ctypes.Structure):
    _fields_ = [("num_blocks", c_vp), ("indices", c_vp), ("full_num_blocks", c_vp),
                ("full_indices", c_vp)]


# The mirrored structs by their C names, for the layout test.
STRUCTS = {"fa_tensor_layout": TensorLayout, "fa_problem": Problem, "fa_tensors": Tensors,
           "fa_device_props": DeviceProps, "fa_context_options": ContextOptions,
           "fa_plan_launch_info": PlanLaunchInfo, "fa_block_mask_shape": BlockMaskShape,
           "fa_block_lists": BlockLists}

# Enumerations (flashattn.h).
BACKENDS = {"auto": 0, "cpu": 1, "opencl": 2, "cuda": 3}
DTYPES = {"f32": 0, "f16": 1, "bf16": 2}
MASK_NONE, MASK_CAUSAL_BOTTOM_RIGHT = 0, 2
LAYOUT_BSHD = 1
TENSOR_IDS = {name: i for i, name in enumerate(
    ("q", "k", "v", "o", "lse", "d_o", "dq", "dk", "dv", "alibi_slopes", "bias", "sinks",
     "d_sinks", "cu_seqlens_q", "cu_seqlens_k", "seqlens_k", "block_table"))}

_PTR = ctypes.POINTER
_PROTOTYPES = {
    "fa_version": (ctypes.c_char_p, []),
    "fa_status_name": (ctypes.c_char_p, [c_enum]),
    "fa_backend_name": (ctypes.c_char_p, [c_enum]),
    "fa_backend_count": (ctypes.c_int, []),
    "fa_backend_at": (c_enum, [ctypes.c_int]),
    "fa_backend_device_count": (c_enum, [c_enum, _PTR(ctypes.c_int), ctypes.c_char_p,
                                         ctypes.c_size_t]),
    "fa_backend_device_props": (c_enum, [c_enum, ctypes.c_int, _PTR(DeviceProps),
                                         ctypes.c_char_p, ctypes.c_size_t]),
    "fa_context_create": (c_enum, [_PTR(c_vp), _PTR(ContextOptions), ctypes.c_char_p,
                                   ctypes.c_size_t]),
    "fa_context_destroy": (None, [c_vp]),
    "fa_context_backend": (c_enum, [c_vp]),
    "fa_context_device": (ctypes.c_int, [c_vp]),
    "fa_context_backend_note": (ctypes.c_char_p, [c_vp]),
    "fa_context_last_error": (ctypes.c_char_p, [c_vp]),
    "fa_context_device_props": (c_enum, [c_vp, _PTR(DeviceProps)]),
    "fa_buffer_create": (c_enum, [c_vp, ctypes.c_size_t, _PTR(c_vp)]),
    "fa_buffer_wrap_host": (c_enum, [c_vp, c_vp, ctypes.c_size_t, _PTR(c_vp)]),
    "fa_buffer_destroy": (None, [c_vp]),
    "fa_buffer_size": (ctypes.c_size_t, [c_vp]),
    "fa_buffer_write": (c_enum, [c_vp, ctypes.c_size_t, c_vp, ctypes.c_size_t]),
    "fa_buffer_read": (c_enum, [c_vp, ctypes.c_size_t, c_vp, ctypes.c_size_t]),
    "fa_problem_init": (c_enum, [_PTR(Problem), c_enum, c_enum, c_i64, c_i64, c_i64, c_i64,
                                 c_i64, c_i64]),
    "fa_problem_set_paged": (c_enum, [_PTR(Problem), c_i64, c_i64, c_i64]),
    "fa_problem_tensor_bytes": (c_enum, [_PTR(Problem), c_enum, c_i64, c_i64, _PTR(c_u64)]),
    "fa_plan_create": (c_enum, [c_vp, _PTR(Problem), _PTR(c_vp)]),
    "fa_plan_create_backward": (c_enum, [c_vp, _PTR(Problem), _PTR(c_vp)]),
    "fa_plan_destroy": (None, [c_vp]),
    "fa_plan_explain": (ctypes.c_char_p, [c_vp]),
    "fa_plan_set_dropout": (c_enum, [c_vp, c_u64, c_u32]),
    "fa_run": (c_enum, [c_vp, c_vp, _PTR(Tensors)]),
    "fa_block_mask_q_blocks": (c_i64, [_PTR(BlockMaskShape)]),
    "fa_block_mask_k_blocks": (c_i64, [_PTR(BlockMaskShape)]),
    "fa_block_mask_lists": (c_enum, [_PTR(BlockMaskShape), c_vp, _PTR(BlockLists),
                                     _PTR(BlockLists), ctypes.c_char_p, ctypes.c_size_t]),
}


# Only in a library built with the CUDA backend (flashattn_cuda.h): bound where present.
_CUDA_PROTOTYPES = {
    "fa_context_create_cuda": (c_enum, [_PTR(c_vp), c_vp, c_vp, ctypes.c_char_p,
                                        ctypes.c_size_t]),
    "fa_buffer_wrap_cuda": (c_enum, [c_vp, c_u64, ctypes.c_size_t, _PTR(c_vp)]),
}


def _library_path():
    """FLASHATTN_LIBRARY when set (a development build), else the copy inside the package."""
    path = os.environ.get("FLASHATTN_LIBRARY")
    if path:
        return path
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libflashattn_py.so")


def _load():
    path = _library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError("flashattn: cannot load the C library %s (%s); install the package "
                          "with `pip install .` from the project root, or set "
                          "FLASHATTN_LIBRARY to a built libflashattn.so" % (path, e)) from e
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    for name, (restype, argtypes) in _CUDA_PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = restype, argtypes
    return lib


def has_cuda_interop():
    """Whether the library was built with the CUDA backend's interop functions."""
    return hasattr(lib, "fa_context_create_cuda")


lib = _load()
LIBRARY_PATH = _library_path()

# Status names -> the exception class a caller sees. Bad arguments are ValueError, dtypes
# TypeError, what the backend or device cannot do RuntimeError (NotImplementedError, one of
# them, where the backend does not run the problem).
_TYPE_ERRORS = {"FA_STATUS_UNSUPPORTED_DTYPE"}
_RUNTIME_ERRORS = {"FA_STATUS_SRAM_TOO_SMALL", "FA_STATUS_OUT_OF_MEMORY",
                   "FA_STATUS_BACKEND_UNAVAILABLE", "FA_STATUS_DEVICE_ERROR",
                   "FA_STATUS_KERNEL_BUILD_ERROR"}


class FlashAttnError(Exception):
    """Mixed into every exception the library's status becomes; `status` is its name."""
    status = "FA_STATUS_UNKNOWN"


def _error_class(base):
    return type("FlashAttn" + base.__name__, (FlashAttnError, base), {})


_CLASSES = {b: _error_class(b) for b in (ValueError, TypeError, RuntimeError,
                                         NotImplementedError)}


def status_error(status, message):
    """The exception for a failed call: its class from the status, its text the library's."""
    name = lib.fa_status_name(status).decode()
    if name in _TYPE_ERRORS:
        base = TypeError
    elif name in _RUNTIME_ERRORS:
        base = RuntimeError
    elif name == "FA_STATUS_UNSUPPORTED":
        base = NotImplementedError
    else:
        base = ValueError
    text = message if message.startswith(name) else "%s: %s" % (name, message)
    err = _CLASSES[base](text)
    err.status = name
    return err


def check(status, ctx=None, why=None):
    """Raises status_error unless status is OK; the message from the context or `why`."""
    if status == 0:
        return
    if ctx is not None:
        message = lib.fa_context_last_error(ctx).decode(errors="replace")
    elif why is not None:
        message = why.value.decode(errors="replace")
    else:
        message = ""
    raise status_error(status, message)
