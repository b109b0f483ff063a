"""Checkers, one per exercise: ``check_<name>(student_function_or_class) -> CheckResult``.

Each runs the student's code on fresh random inputs of awkward shapes, compares with the
reference, names the likely mistake when they differ, prints its verdict in the notebook
and never raises. ``hint(name)`` prints hints. See :mod:`._core` for the machinery and
the course contract for the promises. One module per notebook: 01 :mod:`.attention`,
02 :mod:`.multihead`, 03 :mod:`.positional`, 04 :mod:`.encoder`, 05 :mod:`.decoder`,
06 :mod:`.model`, 07 :mod:`.training`, 08 :mod:`.classifier`, 09 :mod:`.gpt` and
:mod:`.gpt_weights` (GPT-2's checkpoint, the notebook's last exercise), 10 :mod:`.llama`, 11 :mod:`.tokenizer`.
"""

from ._core import CheckResult, hint
from .attention import *  # noqa: F403
from .multihead import *  # noqa: F403
from .positional import *  # noqa: F403
from .encoder import *  # noqa: F403
from .decoder import *  # noqa: F403
from .model import *  # noqa: F403
from .training import *  # noqa: F403
from .classifier import *  # noqa: F403
from .gpt import *  # noqa: F403
from .gpt_weights import *  # noqa: F403
from .llama import *  # noqa: F403
from .tokenizer import *  # noqa: F403
from . import attention, multihead, positional, encoder, decoder, model, training, classifier  # imported above
from . import gpt, gpt_weights, llama, tokenizer  # imported above
from . import catalogue

CHECKER_MODULES = (attention, multihead, positional, encoder, decoder, model, training, classifier, gpt, gpt_weights, llama,  # noqa: E501
              tokenizer)
catalogue.use_checker_modules(CHECKER_MODULES)
__all__ = ["CheckResult", "hint", *(name for module in CHECKER_MODULES for name in module.__all__)]
