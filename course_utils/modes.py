"""A model's mode for a block of code (notebooks 06-09: decoding, evaluation, generation).

:func:`eval_mode` puts a model in eval mode (no dropout) while the course's helpers decode,
evaluate or generate with it, and gives it back in the mode it was in: a caller in the middle
of training finds its model still training.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) inside the block; the model's own mode back after it."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


__all__ = ["eval_mode"]
