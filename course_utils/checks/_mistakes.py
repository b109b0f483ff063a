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
    "across pre-token boundaries": "pairs counted, or merges made, across two pieces of GPT-2's pre-tokenization",
    "piece counts ignored": "each distinct piece counted once, not as often as it occurs in the text",
    "overlapping pairs counted once": "a run a a a counts the pair (a, a) once instead of twice",
    "pair counted once per piece": "a pair that occurs twice in one piece is counted once (a set of its pairs)",
    "only the first occurrence merged": "only the first occurrence of the pair is merged, not every one",
    "overlapping pairs merged twice": "in a run a a a both overlapping (a, a) are merged, not the first only",
    "merged right to left": "the pair is merged scanning from the right: a a a becomes [a, new], not [new, a]",
    "second token of the pair kept": "after a merge the scan moves on by one, not two: the pair's second token is read again",  # noqa: E501
    "ties broken differently": "ties between the most frequent pairs not given to the greatest pair of byte strings",
    "special tokens trained on": "the special tokens' characters are trained on instead of cut out first",
    "merged ids not from 256": "the merged tokens' ids do not run 256, 257, ... (a gap or another start)",
    "whitespace stripped": "decoding strips the spaces or newlines at the text's ends (.strip(), .lstrip(), .rstrip())",
    "special tokens dropped": "decoding skips the special tokens (skip_special_tokens), or encoding loses them (re.split without a group)",  # noqa: E501
    "every other pair skipped": "pairs counted at positions 0-1, 2-3, ... only (zip(w[::2], w[1::2]))",
    "last pair skipped": "the last pair of each piece not counted (range(len(w) - 2))",
    "last token dropped": "merging loses the last token when it is not part of a merge (while i < len(ids) - 1)",
    "pair compared wrongly": "merging compares the tokens with the wrong halves of the pair (pair[0] twice, or only pair[0])",  # noqa: E501
    "merge not applied": "training records each merge but does not rewrite the pieces with it",
    "not decoded as UTF-8": "decoding uses another encoding than UTF-8 (latin-1)",
    "invalid bytes escaped": "invalid UTF-8 written as escapes or surrogates instead of '\\ufffd' (errors='replace')",
    "merges in one pass": "encoding makes one left-to-right pass of merges instead of repeating until none applies",
    "longest vocabulary match": "encoding cuts each piece into the longest vocabulary tokens (WordPiece), not by replaying merges",  # noqa: E501
    "merges in reverse order": "encoding merges the latest learned pair first (highest rank), not the earliest",
    "special tokens not added": "the special tokens are missing from the trained vocabulary",
    "wrong special token ids": "the special tokens are not the vocabulary's last ids, after the merged tokens",
    "wrong number of merges": "vocab_size misread: more or fewer merges than vocab_size - 256 - len(special_tokens)",
    "no stop when pairs run out": "the training loop does not stop when no pair is left to merge (it hangs)",
    "leading space dropped": "the pieces lose the space before each word (text.split() instead of GPT-2's pattern)",
    "merges in frequency order": "encoding merges the most frequent pair of the piece first, not the earliest learned",
    "merges in text order": "encoding merges the leftmost known pair first, not the earliest learned",
    "special tokens split": "a special token is encoded as ordinary text instead of as its own id",
    "byte values as ids": "a single byte's value used as its id instead of looking the id up in the vocabulary",
    "decoded token by token": "each token decoded on its own: a character split between two tokens breaks",
    "invalid bytes raise": "decoding invalid UTF-8 raises instead of giving '\\ufffd' (errors='replace')",
    "invalid bytes dropped": "invalid UTF-8 silently dropped (errors='ignore') instead of shown as '\\ufffd'",
    "ids joined as a string": "merging replaces the pair in the ids written out as text: '11 2' holds '1 2'",
    "pair never matched": "merging merges nothing, ids come back unchanged (e.g. ids[i:i + 2] == pair, a list against a tuple)",  # noqa: E501
    "pair reversed": "merging looks for (pair[1], pair[0]), or counting counts (b, a), instead of the pair",
    "special tokens replaced by a space": "training replaces each special token by a space instead of splitting at it",
    "documents glued together": "training deletes the special tokens, gluing the texts on both sides into one",
    "whitespace collapsed": "training collapses runs of spaces and newlines (' '.join(text.split())) first",
    "special tokens hard-coded": "encoding treats '<|endoftext|>' as special whatever the special_tokens argument says",
    "wrap-around pair counted": "pair counting pairs a piece's last token with its first ((w[i - 1], w[i]) from i = 0)",
    "tokens joined with spaces": "decoding puts a space between the tokens (' '.join) instead of joining their bytes",
    "ids as characters": "decoding turns each id into a character (chr(id)) instead of looking its bytes up in vocab",
    "characters instead of bytes": "encoding starts a piece from its characters, not one token per UTF-8 byte",
    "ids compared as strings": "encoding ranks pairs by their joined token's id as text: '1000' < '999'",
    "special tokens matched shortest first": "of two overlapping special tokens the shorter is matched, not the longer",
    "special token ids after a gap": "special tokens given the ids below vocab_size, not straight after the last merge",
    "pre-tokenizer differs": "a pattern of Python's re instead of pretokenize: '_' dropped or in words, '²' cut",
    "special tokens not escaped": "special tokens cut by re.split('|'.join(...)) without re.escape: '|' alternates",
    "text normalised": "the text normalised (unicodedata.normalize, NFC or NFKC): BPE works on the bytes as given",
    "text stripped": "training strips the text first: the spaces and newlines at its ends are not trained on",
    "ids merged as bytes": "merging replaces the pair in bytes(ids): no byte holds a merged id (256 or more)",
    "special tokens given as a tuple ignored": "special_tokens ignored unless a list (a tuple names them as well)",
    "text encoded line by line": "encoding splits the text at '\\n' and puts the newline's id between lines",
    "spaces before punctuation removed": "decoding drops the space before '.', ',', \"'s\" (clean_up_tokenization)",
    "unknown ids dropped": "decoding gives a text for an id outside the vocabulary (vocab.get(i, b'')), not an error",
    "only the first special token cut": "training cuts the text at special_tokens[0] only and trains on the others",
    "text lowercased": "training lowercases the text first (text.lower()): capitals are other bytes, learned as given",
    "state carried over between calls": "a call keeps state for the next (a mutable default, a global, a shared dict)",
    "stopped while pairs remained": "training stops at a minimum count (a pair occurring once is still merged)",
    "counts not updated after a merge": "training merges a pair no piece holds any more (counts not redone)",
    "cache kept between calls": "encoding caches a piece's ids between calls keyed by the piece alone, not the merges",
    "merges not checked": "encoding merges any pair whose joined bytes are a token, not only the learned merges",
    "merges ignored": "encoding applies no learned merge: the ids are the text's UTF-8 bytes",
    "merges sorted": "the merges put in sorted order (sorted(merges)): the learned order, which encoding follows, lost",
    # notebook 10 (trial s3_10)
    # notebook 10 (trial s4_10)
}
