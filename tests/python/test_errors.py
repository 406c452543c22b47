"""test_errors.py - bad inputs raise with the library's message (ValueError, TypeError,
RuntimeError), outputs untouched, and the caches: a repeated shape does not re-plan; calls
from many threads at once agree."""
import threading

import numpy as np
import pytest

import flashattn
from flashattn import _core


def qkv(dtype=np.float32, b=1, s=16, h=2, hk=2, d=32, sk=None):
    rng = np.random.default_rng(0)
    sk = sk or s
    return (rng.standard_normal((b, s, h, d)).astype(dtype),
            rng.standard_normal((b, sk, hk, d)).astype(dtype),
            rng.standard_normal((b, sk, hk, d)).astype(dtype))


def test_heads_mismatch_is_the_librarys_error(backend):
    q, k, v = qkv(h=3, hk=2)
    with pytest.raises(ValueError, match="FA_STATUS_HEADS_MISMATCH") as e:
        flashattn.flash_attn_func(q, k, v, backend=backend)
    assert isinstance(e.value, flashattn.FlashAttnError) and len(str(e.value)) > 30


def test_bad_arguments(backend):
    q, k, v = qkv()
    with pytest.raises(ValueError, match="FA_STATUS_INVALID_DROPOUT"):
        flashattn.flash_attn_func(q, k, v, dropout_p=1.0, backend=backend)
    with pytest.raises(ValueError, match="FA_STATUS_INVALID_WINDOW"):
        flashattn.flash_attn_func(q, k, v, window_size=(-3, 0), backend=backend)
    with pytest.raises(ValueError, match="FA_STATUS_UNSUPPORTED_HEAD_DIM"):
        flashattn.flash_attn_func(*qkv(d=300), backend=backend)
    with pytest.raises(ValueError, match="4 dimensions"):
        flashattn.flash_attn_func(q[0], k, v, backend=backend)
    with pytest.raises(ValueError, match="alibi_slopes"):
        flashattn.flash_attn_func(q, k, v, alibi_slopes=np.ones(5, np.float32),
                                  backend=backend)
    with pytest.raises(ValueError, match="FA_STATUS_BUFFER_TOO_SMALL: buffer q"):
        flashattn.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0, 40], np.int32),
                                         np.array([0, 16], np.int32), 40, 16, backend=backend)


def test_bad_dtypes(backend):
    q, k, v = qkv()
    with pytest.raises(TypeError, match="float32 or float16"):
        flashattn.flash_attn_func(q.astype(np.float64), k, v, backend=backend)
    with pytest.raises(TypeError, match="share one dtype"):
        flashattn.flash_attn_func(q, k.astype(np.float16), v, backend=backend)
    with pytest.raises(TypeError):
        flashattn.flash_attn_func(q.tolist(), k, v, backend=backend)


def test_unknown_backend_and_device():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="unknown backend"):
        flashattn.flash_attn_func(q, k, v, backend="tpu")
    with pytest.raises(ValueError, match="FA_STATUS_DEVICE_NOT_FOUND"):
        flashattn.flash_attn_func(q, k, v, backend="cpu", device=7)


def test_bad_lse_leaves_outputs_alone(backend):
    q, k, v = qkv()
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True, backend=backend)
    saved = out.copy()
    with pytest.raises(ValueError, match="softmax_lse"):
        flashattn.flash_attn_backward(out, q, k, v, out, lse[:, :1], backend=backend)
    assert np.array_equal(out, saved)


def test_repeated_shape_does_not_replan(backend):
    q, k, v = qkv(s=33)
    ctx = _core.context(backend, 0)
    flashattn.flash_attn_func(q, k, v, causal=True, backend=backend)
    before = ctx.plans_created
    for _ in range(3):
        flashattn.flash_attn_func(q + 1, k, v, causal=True, backend=backend)
    assert ctx.plans_created == before
    flashattn.flash_attn_func(q, k, v, causal=False, backend=backend)
    assert ctx.plans_created == before + 1


def test_threads_agree(backend):
    q, k, v = qkv(s=40)
    want = flashattn.flash_attn_func(q, k, v, backend=backend)
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(flashattn.flash_attn_func(q, k, v, backend=backend))
        except Exception as e:  # a failure in a thread must fail the test, not vanish
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 20
    assert all(np.array_equal(r, want) for r in results)


def test_devices_and_plan(backend):
    by_name = {d["backend"]: d for d in flashattn.devices()}
    assert by_name[backend]["devices"][0]["name"]
    text = flashattn.plan((1, 2048, 8, 64), backend=backend)
    assert text.startswith("backend %s" % backend) and "Bc" in text


def test_seqlen_k_zero_gives_zero_rows(backend):
    q, k, v = qkv(sk=1)
    out, lse = flashattn.flash_attn_func(q, k[:, :0], v[:, :0], return_lse=True,
                                         backend=backend)
    assert np.all(out == 0) and np.all(lse == -np.inf)
