"""test_examples.py - the examples in examples/python run, shortened: the decode loop matches
plain attention, and the GPT trained with flash_attn_func follows the SDPA one's losses."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))


def test_decode_paged(backend):
    import decode_paged
    worst, lengths = decode_paged.decode(12, backend)
    assert worst < 1e-5 and lengths.tolist() == [17, 32, 45]


def test_train_gpt_matches_sdpa(backend):
    if os.environ.get("FLASHATTN_REQUIRE_TORCH") != "1":
        pytest.importorskip("torch")
    import train_gpt
    flash, sdpa = train_gpt.train(25, backend, out=lambda line: None)
    assert flash[-1] < flash[0] - 0.5  # it learns
    assert max(abs(a - b) for a, b in zip(flash, sdpa)) < 2e-3
