"""conftest.py - the backends every test runs on (cpu and opencl; cuda where it has a device),
and the rule that a backend the suite requires (FLASHATTN_REQUIRE_BACKENDS, as the C suites)
fails rather than skips when it has no device. Tests marked cuda_tensors (torch CUDA tensors
on the cuda backend) are collected only where torch.cuda and the cuda backend both exist:
elsewhere they are deselected, not skipped."""
import os

import pytest

import flashattn


def _available():
    return {d["backend"]: bool(d["devices"]) for d in flashattn.devices()}


AVAILABLE = _available()
REQUIRED = [b for b in os.environ.get("FLASHATTN_REQUIRE_BACKENDS", "").split(",") if b]
# cuda joins where it has a device; the suite never lists a test it will skip for want of one.
BACKENDS = ["cpu", "opencl"] + (["cuda"] if AVAILABLE.get("cuda") else [])


@pytest.fixture(params=BACKENDS)
def backend(request):
    name = request.param
    if not AVAILABLE.get(name):
        if name in REQUIRED:
            pytest.fail("backend %s is required (FLASHATTN_REQUIRE_BACKENDS) but has no device"
                        % name)
        pytest.skip("backend %s has no device here" % name)
    return name


def _cuda_tensors_ready():
    if not AVAILABLE.get("cuda"):
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


CUDA_TENSORS = _cuda_tensors_ready()


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda_tensors: needs torch.cuda and the cuda backend")


def pytest_collection_modifyitems(config, items):
    if CUDA_TENSORS:
        return
    dropped = [item for item in items if item.get_closest_marker("cuda_tensors")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not item.get_closest_marker("cuda_tensors")]
