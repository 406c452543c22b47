"""test_cached_calls.py - the per-call fast paths: a forward cached by its argument signature
and the kept wraps of small inputs give the same bits as a first call, see an input changed in
place, never re-plan, stay bounded; torch calls that skip the custom op give the op's bits."""
import os

import numpy as np
import pytest

import flashattn
from flashattn import _core, _ops
from flashattn._numpy import NumpyAdapter
from reference import attention

if os.environ.get("FLASHATTN_REQUIRE_TORCH") == "1":
    import torch
else:
    torch = pytest.importorskip("torch")


def qkv(seed, shape=(1, 64, 2, 32)):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]


def test_cached_call_sees_in_place_changes(backend):
    q, k, v = qkv(0)
    first = flashattn.flash_attn_func(q, k, v, causal=True, backend=backend)
    ctx = _core.context(backend, 0)
    plans, kept = ctx.plans_created, len(ctx.kept)
    again = flashattn.flash_attn_func(q, k, v, causal=True, backend=backend)
    assert np.array_equal(first, again) and again is not first
    q[:] = 0.5 - q  # the same array, new values: its kept wrap must show them to the kernel
    k[:, 3:] *= -2.0
    out = flashattn.flash_attn_func(q, k, v, causal=True, backend=backend)
    ref, _ = attention(q, k, v, causal=True)
    assert np.max(np.abs(out - ref)) <= 2e-5 * max(1.0, np.max(np.abs(ref)))
    assert ctx.plans_created == plans
    assert len(ctx.kept) >= min(kept, 1)


def test_same_signature_other_arrays(backend):
    for seed in range(3):
        q, k, v = qkv(10 + seed)
        out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True, backend=backend)
        ref, ref_lse = attention(q, k, v)
        assert np.max(np.abs(out - ref)) <= 2e-5 * max(1.0, np.max(np.abs(ref)))
        assert np.max(np.abs(lse - ref_lse)) <= 1e-4


def test_kept_wraps_are_bounded(backend):
    ctx = _core.context(backend, 0)
    for seed in range(_core.KEPT_WRAPS + 5):
        flashattn.flash_attn_func(*qkv(100 + seed, (1, 16, 1, 16)), backend=backend)
    assert len(ctx.kept) <= _core.KEPT_WRAPS
    big = qkv(7, (1, 2048, 4, 64))  # 2 MiB each: wrapped per call, never kept
    flashattn.flash_attn_func(*big, backend=backend)
    assert all(entry[0] is not x for entry in ctx.kept.values() for x in big)


def test_refused_arguments_are_not_cached(backend):
    q, k, v = qkv(1)
    with pytest.raises(TypeError):
        flashattn.flash_attn_func(q.astype(np.float64), k, v, backend=backend)
    with pytest.raises(TypeError):  # twice: a refused call leaves no cache entry behind
        flashattn.flash_attn_func(q.astype(np.float64), k, v, backend=backend)
    with pytest.raises(ValueError, match="one headdim"):
        flashattn.flash_attn_func(q, k[..., :16], v[..., :16], backend=backend)


def test_torch_direct_call_matches_the_op(backend):
    q, k, v = (torch.from_numpy(x) for x in qkv(2))
    direct = flashattn.flash_attn_func(q, k, v, causal=True, backend=backend)
    through_op = torch.ops.flashattn.fwd(q, k, v, None, None, None, None, None, 0, 0, None,
                                         None, 0.0, None, True, -1, -1, 0.0,
                                         torch.tensor(0), 0, 0, backend, 0, None, 128,
                                         128)[0]
    assert torch.equal(direct, through_op)
    qg = q.clone().requires_grad_()
    out = flashattn.flash_attn_func(qg, k, v, causal=True, backend=backend)
    assert out.grad_fn is not None and torch.equal(out.detach(), direct)


def test_signature_key_ignores_unhashable_options():
    q, k, v = qkv(3)
    key = _ops._prepared_key(NumpyAdapter, q, k, v, False, None, [[-1], -1], 0.0, 0.0, "cpu",
                             0, 0)
    assert _ops._lookup(key) == (None, None)
    with pytest.raises(TypeError):  # and the general path refuses them
        flashattn.flash_attn_func(q, k, v, window_size=[[-1], -1], backend="cpu")


def test_kept_wrap_follows_a_moved_tensor(backend):
    q, k, v = (torch.from_numpy(x).clone() for x in qkv(5))  # own, resizable storage
    flashattn.flash_attn_func(q, k, v, backend=backend)
    before = q.data_ptr()
    q.resize_(4, 64, 2, 32)  # a larger storage: the tensor moves
    q.resize_(1, 64, 2, 32)
    q.copy_(torch.from_numpy(qkv(6)[0]))
    assert q.data_ptr() != before
    out = flashattn.flash_attn_func(q, k, v, backend=backend)
    ref, _ = attention(q.numpy(), k.numpy(), v.numpy())
    assert np.max(np.abs(out.numpy() - ref)) <= 2e-5 * max(1.0, np.max(np.abs(ref)))
    entry = _core.context(backend, 0).kept[id(q)]
    assert entry[0] is q and entry[2] == q.data_ptr()


def _fresh_plans(ctx):
    """Drops every cached plan and prepared call: the next call plans anew."""
    _ops._PREPARED.clear()
    with ctx.lock:
        for plan in ctx.plans.values():
            plan.destroy()
        ctx.plans.clear()


def test_dropout_calls_reuse_one_plan(backend):
    q, k, v = qkv(8)
    ctx = _core.context(backend, 0)
    run = lambda seed, offset=0: flashattn.flash_attn_func(
        q, k, v, dropout_p=0.2, seed=seed, offset=offset, causal=True, backend=backend)
    first = run(7)
    plans, prepared = ctx.plans_created, len(_ops._PREPARED)
    assert np.array_equal(run(7), first)  # the prepared call: the same bits
    other = run(8)
    assert not np.array_equal(other, first)  # another seed, other bits
    assert np.array_equal(run(7), first)  # and back
    assert not np.array_equal(run(7, offset=1), first)  # the offset counts too
    assert ctx.plans_created == plans and len(_ops._PREPARED) == prepared
    _fresh_plans(ctx)
    assert np.array_equal(run(8), other)  # a plan made with seed 8: the re-seeded one's bits


def test_dropout_backward_reuses_one_plan(backend):
    q, k, v = qkv(9)
    dout = qkv(10)[0]
    ctx = _core.context(backend, 0)

    def grads(seed):
        out, lse = flashattn.flash_attn_func(q, k, v, dropout_p=0.3, seed=seed,
                                             return_lse=True, backend=backend)
        return flashattn.flash_attn_backward(dout, q, k, v, out, lse, dropout_p=0.3, seed=seed,
                                             backend=backend)
    a = grads(3)
    plans = ctx.plans_created
    b, a_again = grads(4), grads(3)
    assert ctx.plans_created == plans
    assert all(np.array_equal(x, y) for x, y in zip(a, a_again))
    assert not any(np.array_equal(x, y) for x, y in zip(a, b))
    _fresh_plans(ctx)
    assert all(np.array_equal(x, y) for x, y in zip(grads(4), b))


def test_torch_dropout_seeds_from_the_generator(backend):
    q, k, v = (torch.from_numpy(x) for x in qkv(11))
    ctx = _core.context(backend, 0)
    run = lambda: flashattn.flash_attn_func(q, k, v, dropout_p=0.25, backend=backend)
    torch.manual_seed(1)
    first, second = run(), run()
    plans = ctx.plans_created
    torch.manual_seed(1)
    assert torch.equal(run(), first) and torch.equal(run(), second)
    assert not torch.equal(first, second)  # each call draws its own seed
    assert ctx.plans_created == plans


def test_torch_dispatch_mode_sees_the_op(backend):
    """A dispatch mode (a profiler's, a fake tensor mode's) on the stack: the call goes through
    the custom op, where the mode sees it, not around it."""
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))
    q, k, v = (torch.from_numpy(x) for x in qkv(12))
    direct = flashattn.flash_attn_func(q, k, v, backend=backend)
    with Record():
        out = flashattn.flash_attn_func(q, k, v, backend=backend)
    assert any(name.startswith("flashattn.fwd") for name in seen), seen
    assert torch.equal(out, direct)
