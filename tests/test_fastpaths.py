"""The speed paths' seam (course_utils/fastpaths.py, issue 24 item 3): one explicit switch.

The parity of each path with the solution's lines is tested where the reference is
(test_attention.py, test_layers.py, test_decoding_cache.py); here, the switch itself: the
four twins are declared, ``with fastpaths.disabled():`` runs the solution's lines and ends
with its block (also on an error), and it is no module flag (another thread keeps the paths).
"""

from __future__ import annotations

import threading

import pytest
import torch

from course_utils import LayerNorm, fastpaths


def test_the_four_twins_are_declared_by_the_plain_functions_name():
    assert fastpaths.SPEED_PATHS == {
        "course_utils.attention.softmax_over_keys": fastpaths.softmax_last_axis,
        "course_utils.layers.LayerNorm.forward": fastpaths.layer_norm,
        "course_utils.decoding._context": fastpaths.single_query_context,
        "course_utils.gpt.GPTBlock.forward": fastpaths.gpt_block,
    }
    assert not hasattr(fastpaths, "ENABLED")  # the old module flag is gone


def test_disabled_runs_the_solution_lines_and_ends_with_its_block(monkeypatch):
    calls = []
    var = torch.Tensor.var
    monkeypatch.setattr(torch.Tensor, "var", lambda *a, **k: calls.append(1) or var(*a, **k))
    norm, x = LayerNorm(6), torch.randn(2, 6)
    norm(x)
    assert calls == [] and fastpaths.enabled()  # the twin: two means, no x.var
    with fastpaths.disabled():
        assert not fastpaths.enabled()
        with fastpaths.disabled():  # nests
            norm(x)
        assert not fastpaths.enabled()
        norm(x)
        seen = []
        thread = threading.Thread(target=lambda: seen.append(fastpaths.enabled()))
        thread.start()
        thread.join()
        assert seen == [True]  # not a module flag: another thread keeps the paths
    assert calls == [1, 1] and fastpaths.enabled()
    with pytest.raises(RuntimeError), fastpaths.disabled():
        raise RuntimeError
    assert fastpaths.enabled()  # reset on the way out of an error too
