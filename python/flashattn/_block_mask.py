"""_block_mask.py - block-sparse attention's block mask (flashattn_block_mask.h): a dense
[batch | 1, nheads | 1, q_blocks, k_blocks] mask turned by the C library into the lists of key
blocks each query block computes (and, for the backward, their transposes)."""
import ctypes

import numpy as np

from ._lib import BlockLists, BlockMaskShape, check, lib

# fa_tensors' names of the lists: the forward reads the kv pair, the backward both.
KV_NAMES = ("kv_num_blocks", "kv_indices")
Q_NAMES = ("q_num_blocks", "q_indices")


def _need(cond, message):
    if not cond:
        raise ValueError("flashattn: " + message)


def block_size_of(block_size):
    """(block_q, block_k) as ints; the library checks the values (powers of two, 16..256)."""
    try:
        bq, bk = (int(b) for b in block_size)
    except (TypeError, ValueError):
        raise ValueError("flashattn: block_size must be (block_q, block_k), got %r"
                         % (block_size,)) from None
    return bq, bk


def lists(dense, batch, heads, seqlen_q, seqlen_k, block_size, backward):
    """The lists of a dense mask (numpy uint8 or bool, 0 skip, 1 compute, 2 full) as int32
    numpy arrays by fa_tensors name, and the Spec's block_sparse field (block_q, block_k,
    mask batch, mask heads)."""
    dense = np.asarray(dense)
    if dense.dtype.kind not in "bu" or dense.dtype.itemsize != 1:
        raise TypeError("flashattn: block_mask must be bool or uint8, not %s" % dense.dtype)
    _need(dense.ndim == 4, "block_mask must be (batch | 1, nheads | 1, q_blocks, k_blocks), "
          "has shape %s" % (dense.shape,))
    bq, bk = block_size_of(block_size)
    mb, mh = dense.shape[:2]
    _need(mb in (1, batch) and mh in (1, heads), "block_mask's batch and heads %s must be 1 or "
          "the problem's (%d, %d)" % (dense.shape[:2], batch, heads))
    shape = BlockMaskShape(mb, mh, seqlen_q, seqlen_k, bq, bk)
    why = ctypes.create_string_buffer(512)
    nq, nk = lib.fa_block_mask_q_blocks(shape), lib.fa_block_mask_k_blocks(shape)
    if nq >= 0 and nk >= 0:
        _need(dense.shape[2:] == (nq, nk), "block_mask must have (q_blocks, k_blocks) = "
              "(%d, %d) for seqlen_q %d, seqlen_k %d and block_size (%d, %d); has %s"
              % (nq, nk, seqlen_q, seqlen_k, bq, bk, dense.shape[2:]))
    dense = np.ascontiguousarray(dense, dtype=np.uint8)
    out = {KV_NAMES[0]: np.empty((mb, mh, max(nq, 0)), np.int32),
           KV_NAMES[1]: np.empty((mb, mh, max(nq, 0), max(nk, 0)), np.int32)}
    kv = BlockLists(out[KV_NAMES[0]].ctypes.data, out[KV_NAMES[1]].ctypes.data, None, None)
    q = None
    if backward:
        out[Q_NAMES[0]] = np.empty((mb, mh, max(nk, 0)), np.int32)
        out[Q_NAMES[1]] = np.empty((mb, mh, max(nk, 0), max(nq, 0)), np.int32)
        q = BlockLists(out[Q_NAMES[0]].ctypes.data, out[Q_NAMES[1]].ctypes.data, None, None)
    check(lib.fa_block_mask_lists(ctypes.byref(shape), dense.ctypes.data, ctypes.byref(kv),
                                  ctypes.byref(q) if q is not None else None, why, len(why)),
          why=why)
    return out, (bq, bk, mb, mh)
