"""The names of ``CheckResult.mistake`` that live outside the exercises' tables.

``GENERIC``: the names ``_core``'s shared probes and the ``@checker`` decorator report, in any
checker (name -> one-line meaning). Every other name is declared in an exercise's table (see
:mod:`.catalogue`); :func:`.catalogue.registry` assembles the whole registry from the tables and
this dict; tests/test_checks_core.py checks it both ways."""

from __future__ import annotations

GENERIC: dict[str, str] = {
    "not implemented": "the exercise still raises NotImplementedError",
    "time limit": "the student's code did not finish within the check's time limit",
    "not a function": "the checker was given something other than the student's function",
    "not a class": "the checker was given an instance or a non-Module, or the class builds no nn.Module",
    "not a tensor": "a numpy array or another non-tensor was returned",
    "wrong shape": "the result has the wrong shape",
    "wrong dtype": "the result has the wrong dtype",
    "values differ": "right shape, wrong values, and no catalogued mistake matches",
    "NaN": "the result contains NaN",
    "input modified in place": "an input tensor was changed in place",
    "parameters modified in place": "a forward call changes the module's own parameters or buffers in place",
    "view on a non-contiguous tensor": ".view on a transposed or sliced tensor (use .reshape)",
    "wrong device": "the result is on another device than asked for",
    "modules shared": "one module (or one parameter's memory) serves two roles of a layer",
    "forbidden call": "the exercise's own formula is replaced by the library call it forbids",
    "gradient blocked": "an input or parameter gets no gradient (no_grad, .detach(), .data, numpy cut the graph)",
    "gradient differs": "an input or parameter gets another gradient than the reference's (a detached branch or factor)",  # noqa: E501
    "backward fails": "backpropagating through the code raises (an in-place op on a tensor autograd saved)",
    "parameter renamed": "a parameter of the contract's signature has another name (callers pass it by keyword)",
    "parameters in wrong order": "the contract's parameter names in another order (callers also pass them by position)",
    "dtype not preserved": "the result is cast to another dtype than the one it must follow (the input's, or the weight's for integer ids)",  # noqa: E501
    "dropout ignores eval mode": "dropout still acts after model.eval()",
    "hard-coded dropout p": "a fixed p instead of the dropout argument",
    "gradients tracked": "generation or greedy decoding runs the model with gradient tracking on",
}
