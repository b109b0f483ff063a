"""Checkers, one per exercise: ``check_<name>(student_function_or_class) -> CheckResult``.

Each runs the student's code on fresh random inputs of awkward shapes, compares with the
reference, names the likely mistake when they differ, prints its verdict in the notebook
and never raises. ``hint(name)`` prints hints. See :mod:`._core` for the machinery and
the course contract for the promises.

=========  ==============================
notebook   module
=========  ==============================
01         :mod:`.attention`
02         :mod:`.multihead`
03         :mod:`.positional`
04         :mod:`.encoder`
05         :mod:`.decoder`
06         :mod:`.model`
07         :mod:`.training`
08         :mod:`.classifier`
09         :mod:`.gpt`
=========  ==============================
"""

from ._core import CheckResult, hint
from .attention import *  # noqa: F403
from .attention import __all__ as _attention_all
from .multihead import *  # noqa: F403
from .multihead import __all__ as _multihead_all
from .positional import *  # noqa: F403
from .positional import __all__ as _positional_all
from .encoder import *  # noqa: F403
from .encoder import __all__ as _encoder_all
from .decoder import *  # noqa: F403
from .decoder import __all__ as _decoder_all
from .model import *  # noqa: F403
from .model import __all__ as _model_all
from .training import *  # noqa: F403
from .training import __all__ as _training_all
from .classifier import *  # noqa: F403
from .classifier import __all__ as _classifier_all
from .gpt import *  # noqa: F403
from .gpt import __all__ as _gpt_all

__all__ = [
    "CheckResult",
    "hint",
    *_attention_all,
    *_multihead_all,
    *_positional_all,
    *_encoder_all,
    *_decoder_all,
    *_model_all,
    *_training_all,
    *_classifier_all,
    *_gpt_all,
]
