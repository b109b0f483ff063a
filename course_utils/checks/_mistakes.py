"""The names of ``CheckResult.mistake`` that live outside the exercises' tables.

``GENERIC``: the names ``_core``'s shared probes and the ``@checker`` decorator report, in any
checker (name -> one-line meaning). ``NOT_YET_IN_A_TABLE``: the names of the checkers not yet
written as a table (see :mod:`.catalogue`); a checker converted to a table declares its names
there, and they leave this dict. :func:`.catalogue.registry` assembles the whole registry from
the tables and these two; tests/test_checks_core.py checks it both ways."""

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

NOT_YET_IN_A_TABLE: dict[str, str] = {
    # masks
    # attention (01, 02)
    # positional encoding and embeddings (03)
    # layers and stacks (04, 05, 08, 09)
    # dropout
    # the model and decoding (06, 09)
    # GPT-2's weights (09, load_gpt2_weights)
    # training (07) and the classifier (08)
    # notebook 10: the modern decoder
    # byte-level BPE (11)
    "ties broken differently": "ties between the most frequent pairs not given to the greatest pair of byte strings",
    "special tokens trained on": "the special tokens' characters are trained on instead of cut out first",
    "merged ids not from 256": "the merged tokens' ids do not run 256, 257, ... (a gap or another start)",
    "merge not applied": "training records each merge but does not rewrite the pieces with it",
    "special tokens not added": "the special tokens are missing from the trained vocabulary",
    "wrong special token ids": "the special tokens are not the vocabulary's last ids, after the merged tokens",
    "wrong number of merges": "vocab_size misread: more or fewer merges than vocab_size - 256 - len(special_tokens)",
    "no stop when pairs run out": "the training loop does not stop when no pair is left to merge (it hangs)",
    "special tokens replaced by a space": "training replaces each special token by a space instead of splitting at it",
    "documents glued together": "training deletes the special tokens, gluing the texts on both sides into one",
    "whitespace collapsed": "training collapses runs of spaces and newlines (' '.join(text.split())) first",
    "special token ids after a gap": "special tokens given the ids below vocab_size, not straight after the last merge",
    "text stripped": "training strips the text first: the spaces and newlines at its ends are not trained on",
    "only the first special token cut": "training cuts the text at special_tokens[0] only and trains on the others",
    "text lowercased": "training lowercases the text first (text.lower()): capitals are other bytes, learned as given",
    "stopped while pairs remained": "training stops at a minimum count (a pair occurring once is still merged)",
    "counts not updated after a merge": "training merges a pair no piece holds any more (counts not redone)",
    # notebook 10 (trial s3_10)
    # notebook 10 (trial s4_10)
}
