"""_rotary.py - flash_attn_with_kvcache's rotary embedding, applied in Python before the call
(on numpy arrays or torch tensors, computed in float32): the new keys at their cache positions
before they are appended, the queries at theirs. The library itself sees rotated tensors."""


def _numpy(x):
    return hasattr(x, "astype")  # numpy arrays; torch tensors have .to and .clone instead


def _f32(x):
    return x.astype("float32") if _numpy(x) else x.float()


def apply(x, cos, sin, positions, interleaved):
    """x (batch, seqlen, nheads, d) rotated by (cos, sin) (seqlen_ro, rotary_dim / 2) at the
    integer positions (batch, seqlen): a new array of x's dtype. interleaved rotates the pairs
    (0, 1), (2, 3) ... of the first rotary_dim dimensions (GPT-J), else their two halves
    (GPT-NeoX), as flash-attn's rotary_interleaved."""
    half = cos.shape[-1]
    c, s = _f32(cos[positions])[:, :, None, :], _f32(sin[positions])[:, :, None, :]
    if interleaved:
        first, second = slice(0, 2 * half, 2), slice(1, 2 * half, 2)
    else:
        first, second = slice(0, half), slice(half, 2 * half)
    x1, x2 = _f32(x[..., first]), _f32(x[..., second])
    out = x.copy() if _numpy(x) else x.clone()
    out[..., first] = x1 * c - x2 * s
    out[..., second] = x1 * s + x2 * c
    return out


def check(cos, sin, head_dim):
    """ValueError unless cos and sin are both given as (seqlen_ro, rotary_dim / 2) with
    rotary_dim <= head_dim, or both absent."""
    if (cos is None) != (sin is None):
        raise ValueError("flashattn: give both rotary_cos and rotary_sin, or neither")
    if cos is not None and (len(cos.shape) != 2 or tuple(cos.shape) != tuple(sin.shape) or
                            2 * cos.shape[1] > head_dim):
        raise ValueError("flashattn: rotary_cos and rotary_sin must be (seqlen_ro, rotary_dim / "
                         "2) with rotary_dim <= headdim %d; got %s and %s"
                         % (head_dim, tuple(cos.shape), tuple(sin.shape)))
