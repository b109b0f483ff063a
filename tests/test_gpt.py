"""The decoder-only model of notebook 09 (course_utils/gpt.py, gpt_training.py, stories.py).

Parity with Hugging Face's GPT2LMHeadModel (a small random GPT2Config, weights copied with our
loader, nothing downloaded) needs `transformers`; without it those tests skip.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from course_utils import (
    EncoderLayer,
    FeedForward,
    LayerNorm,
    MultiHeadAttention,
    causal_mask,
    count_parameters,
    record_attention,
    stories,
)
from course_utils.generation import empty_cache, generate, gpt_decode_step, next_token_probs, sample_next_token
from course_utils.gpt import GPT, GPTBlock, context_length
from course_utils.gpt_training import (
    CHECKPOINT,
    FAST_RECIPE,
    GPT_RECIPE,
    CharTokenizer,
    evaluate_loss,
    fit_gpt,
    language_model_loss,
    load_pretrained_gpt,
    lr_at,
    prepare_data,
    pretrained_gpt_info,
    split_text,
)
from course_utils.gpt_weights import convert_gpt2_state_dict, gpt2_state_dict, gpt_from_gpt2
from course_utils.stories import DATA_DIR, FILE_NAME, SHAKESPEARE_SHA256, generate_text, load_shakespeare, load_text


def small_gpt(seed=0, **kwargs):
    torch.manual_seed(seed)
    config = dict(vocab_size=13, d_model=12, num_heads=3, num_layers=2, d_ff=20, dropout=0.0, max_len=10)
    config.update(kwargs)
    return GPT(**config).eval()


# ---------------------------------------------------------------- the model
def test_block_equals_a_pre_norm_gelu_encoder_layer_with_a_causal_mask():
    torch.manual_seed(0)
    block = GPTBlock(12, 3, 20).eval()
    layer = EncoderLayer(12, 3, 20, norm_first=True, activation="gelu_tanh").eval()
    layer.load_state_dict(block.state_dict(), strict=False)
    x = torch.randn(2, 7, 12)
    pad = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])[:, None]  # (B, 1, L)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    with torch.no_grad():
        torch.testing.assert_close(block(x), layer(x, causal))
        torch.testing.assert_close(block(x, pad), layer(x, causal & pad))


def test_model_is_causal_and_tied():
    model = small_gpt()
    assert model.lm_head.weight is model.token_embedding.weight
    assert model.lm_head.bias is None
    tokens = torch.randint(0, 13, (2, 9))
    changed = tokens.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 13
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert a.shape == (2, 9, 13)
    assert torch.equal(a[:, :5], b[:, :5]) and not torch.allclose(a[:, 5:], b[:, 5:])
    # the shared Parameter is counted (and optimised) once
    D, V, N, F, Lmax = 12, 13, 2, 20, 10
    per_block = 4 * (D * D + D) + 2 * D * F + F + D + 4 * D
    assert count_parameters(model) == N * per_block + V * D + Lmax * D + 2 * D


def test_gpt2_small_has_124m_parameters_on_the_meta_device():
    with torch.device("meta"):
        model = GPT(50257)
    assert count_parameters(model) == 124_439_808


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda m: m(torch.zeros(2, 11, dtype=torch.long)), ValueError, "max_len = 10"),
        (lambda m: m(torch.full((1, 3), 13)), ValueError, "outside the vocabulary"),
        (lambda m: m(torch.zeros(2, 3)), TypeError, "token ids"),
        (lambda m: m(torch.zeros(3, dtype=torch.long)), ValueError, "(B, L)"),
        (lambda m: next_token_probs(torch.zeros(2, 5), temperature=0), ValueError, "temperature"),
        (lambda m: next_token_probs(torch.zeros(2, 5), top_k=0), ValueError, "top_k"),
        (lambda m: next_token_probs(torch.zeros(2, 5), top_p=1.5), ValueError, "top_p"),
        (lambda m: generate(m, torch.zeros(1, 0, dtype=torch.long), 3), ValueError, "at least one token"),
        (lambda m: generate(m, torch.zeros(1, 2, dtype=torch.long), -1), ValueError, "max_new_tokens"),
        (lambda m: m(torch.zeros(2, 0, dtype=torch.long)), ValueError, "at least one position (L >= 1)"),
        (lambda m: next_token_probs(torch.zeros(2, 5), temperature=math.inf), ValueError, "finite number > 0"),
        (lambda m: next_token_probs(torch.full((2, 5), -math.inf)), ValueError, "every logit of row (0,)"),
        (lambda m: next_token_probs(torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]])), ValueError, "row (1,)"),
        (lambda m: next_token_probs(torch.tensor([0.0, math.nan, 1.0])), ValueError, "nan at index (1,)"),
        (lambda m: next_token_probs(torch.tensor([0.0, math.inf])), ValueError, "finite or -inf"),
    ],
)
def test_bad_input_is_named(call, error, words):
    with pytest.raises(error, match=None) as info:
        call(small_gpt())
    assert words in str(info.value)


# ---------------------------------------------------------------- sampling
def test_next_token_probs_hand_example():
    z = torch.tensor([2.0, 1.0, 0.0, -1.0])
    cases = {
        (1.0, None, None): [0.6439, 0.2369, 0.0871, 0.0321],
        (0.5, None, None): [0.8650, 0.1171, 0.0158, 0.0021],
        (2.0, None, None): [0.4550, 0.2760, 0.1674, 0.1015],
        (1.0, 2, None): [0.7311, 0.2689, 0.0, 0.0],
        (1.0, None, 0.9): [0.6652, 0.2447, 0.0900, 0.0],
        (1.0, None, 0.5): [1.0, 0.0, 0.0, 0.0],
        (1.0, 3, 0.99): [0.6652, 0.2447, 0.0900, 0.0],
    }
    for (T, k, p), expected in cases.items():
        torch.testing.assert_close(next_token_probs(z, T, k, p), torch.tensor(expected), atol=1e-4, rtol=0)


def test_greedy_and_cached_generation_agree_and_restore_the_mode():
    model = small_gpt(dropout=0.3, max_len=12).train()
    prompt = torch.randint(0, 13, (3, 4))
    cached = generate(model, prompt, 8, temperature=0)
    assert model.training
    plain = generate(model, prompt, 8, temperature=0, use_cache=False)
    topk1 = generate(model, prompt, 8, top_k=1)
    assert torch.equal(cached, plain) and torch.equal(cached, topk1)
    assert torch.equal(cached[:, :4], prompt) and cached.shape == (3, 12)
    # longer than max_len: the window slides (no cache), the newest token is always fed
    long = generate(model, prompt, 15, temperature=0)
    assert long.shape == (3, 19) and torch.equal(long[:, :12], cached)


def test_seeded_sampling_is_repeatable_and_follows_the_distribution():
    model = small_gpt()
    prompt = torch.randint(0, 13, (1, 3)).expand(3000, 3)
    a = generate(model, prompt, 1, temperature=0.7, generator=torch.Generator().manual_seed(0))
    b = generate(model, prompt, 1, temperature=0.7, generator=torch.Generator().manual_seed(0), use_cache=False)
    assert torch.equal(a, b)
    with torch.no_grad():
        target = next_token_probs(model(prompt[:1])[0, -1], 0.7)
    freq = torch.bincount(a[:, -1], minlength=13).float() / 3000
    assert 0.5 * (freq - target).abs().sum() < 0.05
    logits = torch.randn(4, 13)
    assert torch.equal(sample_next_token(logits, temperature=0), logits.argmax(-1))


def test_language_model_loss_shifts_by_one():
    logits = torch.randn(2, 5, 7)
    tokens = torch.randint(0, 7, (2, 5))
    expected = nn.functional.cross_entropy(logits[:, :4].reshape(-1, 7), tokens[:, 1:].reshape(-1))
    torch.testing.assert_close(language_model_loss(logits, tokens), expected)
    # a window (B, L + 1), the model having read its first L tokens (fit_gpt's form): every position scored
    window = torch.randint(0, 7, (2, 6))
    expected = nn.functional.cross_entropy(logits.reshape(-1, 7), window[:, 1:].reshape(-1))
    assert torch.equal(language_model_loss(logits, window), expected)
    with pytest.raises(ValueError, match=r"tokens must be \(B, L\) = \(2, 5\).*got \(2, 7\)"):
        language_model_loss(logits, torch.randint(0, 7, (2, 7)))


# ---------------------------------------------------------------- GPT-2's layout
def test_round_trip_through_gpt2_layout():
    model = small_gpt()
    exported = gpt2_state_dict(model)
    assert exported["transformer.h.0.attn.c_attn.weight"].shape == (12, 36)  # Conv1D (in, 3 * out)
    assert exported["transformer.h.0.mlp.c_fc.weight"].shape == (12, 20)  # (in, out): transposed
    back = gpt_from_gpt2(exported, num_heads=3)
    tokens = torch.randint(0, 13, (2, 6))
    with torch.no_grad():
        assert torch.equal(back(tokens), model(tokens))
    assert back.lm_head.weight is back.token_embedding.weight
    untied = dict(exported, **{"lm_head.weight": torch.randn(13, 12)})
    with pytest.raises(ValueError, match="lm_head.weight differs"):
        convert_gpt2_state_dict(untied)


def _gpt2_layout_with(change):
    """small_gpt's weights in GPT-2's layout, changed by ``change(state_dict)``."""
    sd = gpt2_state_dict(small_gpt())
    change(sd)
    return sd


@pytest.mark.parametrize("change, words", [
    (lambda sd: sd.pop("transformer.h.1.mlp.c_fc.bias"), ("lacks 1 tensor(s): h.1.mlp.c_fc.bias", "h.0 ... h.1")),
    (lambda sd: sd.update({"transformer.h.0.mlp.c_fc.weight": sd["transformer.h.0.mlp.c_fc.weight"].t()}),
     ("h.0.mlp.c_fc.weight has shape (20, 12), the transpose of GPT-2's (12, 20)", "Conv1D")),
    (lambda sd: sd.update({"transformer.h.1.mlp.c_proj.weight": sd["transformer.h.1.mlp.c_proj.weight"].t()}),
     ("h.1.mlp.c_proj.weight has shape (12, 20), the transpose of GPT-2's (20, 12)",)),
    (lambda sd: sd.update({"transformer.h.0.attn.c_attn.weight": torch.zeros(12, 24)}),
     ("h.0.attn.c_attn.weight has shape (12, 24)", "needs (12, 36)")),
    (lambda sd: sd.update({"transformer.h.2.ln_1.weight": torch.ones(12)}),  # a third block, incomplete
     ("h.0 ... h.2 (num_layers = 3", "lacks 11 tensor(s)")),
    (lambda sd: sd.update({"transformer.h.0.attn.rotary.inv_freq": torch.ones(4)}),
     ("has no place for: h.0.attn.rotary.inv_freq",)),
    (lambda sd: sd.update({"score.weight": torch.ones(2, 12)}), ("has no place for: score.weight",)),
])
def test_gpt2_state_dict_is_validated(change, words):
    sd = _gpt2_layout_with(change)
    for load in (convert_gpt2_state_dict, lambda sd: gpt_from_gpt2(sd, num_heads=3)):
        with pytest.raises(ValueError) as info:
            load(sd)
        for w in words:
            assert w in str(info.value), (w, str(info.value))


def test_gpt2_causal_mask_buffers_are_accepted():
    sd = _gpt2_layout_with(lambda sd: sd.update({f"transformer.h.{i}.attn.{b}": torch.ones(1, 1, 10, 10)
                                                 for i in range(2) for b in ("bias", "masked_bias")}))
    tokens = torch.randint(0, 13, (2, 6))
    with torch.no_grad():
        assert torch.equal(gpt_from_gpt2(sd, num_heads=3)(tokens), small_gpt()(tokens))


def _hf():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    transformers.logging.set_verbosity_error()
    return transformers


def test_parity_with_hugging_face_gpt2():
    transformers = _hf()
    from course_utils.gpt_weights import gpt_from_hf

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=37, n_positions=16, n_embd=24, n_layer=3, n_head=4,
                                     bos_token_id=0, eos_token_id=0, pad_token_id=0)
    hf = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # GPT-2 initialises biases and norms to 0 / 1: randomise them so a mix-up shows
        for name, p in hf.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    state = hf.state_dict()  # its own layout: Conv1D weights (in, out), fused c_attn (D, 3D)
    assert state["transformer.h.0.attn.c_attn.weight"].shape == (24, 72)
    ours = gpt_from_hf(hf)
    tokens = torch.randint(0, 37, (3, 11))
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens), hf(tokens).logits, atol=1e-5, rtol=1e-4)
    hf_greedy = hf.generate(tokens[:, :4], max_new_tokens=12, do_sample=False)
    assert torch.equal(generate(ours, tokens[:, :4], 12, temperature=0), hf_greedy)
    # the state dict alone (GPT2Model keys, without "transformer.") loads the same
    bare = {k[len("transformer."):]: v for k, v in state.items() if k.startswith("transformer.")}
    with torch.no_grad():
        torch.testing.assert_close(gpt_from_gpt2(bare, num_heads=4)(tokens), ours(tokens))


# ---------------------------------------------------------------- data, training, checkpoint
def test_the_fables_file_is_the_generators_output():
    assert (DATA_DIR / FILE_NAME).read_text(encoding="utf-8") == generate_text()
    assert load_text() == generate_text()
    assert len(generate_text().encode()) < 300_000


def test_tokenizer_split_and_schedule():
    text = load_text()
    tok = CharTokenizer(text)
    assert tok.decode(tok.encode("Once upon a time")) == "Once upon a time"
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.encode("Zebra#")
    train, valid = split_text(text)
    assert train + valid == text and valid.count("\n") == len(text.splitlines()) // 10
    assert lr_at(1, 100, 1.0, 10) == pytest.approx(0.1)
    assert lr_at(10, 100, 1.0, 10) == pytest.approx(1.0) and lr_at(100, 100, 1.0, 10) == pytest.approx(0.0)


def test_a_few_training_steps_lower_the_loss():
    tok, train, valid = prepare_data(load_text())  # the fables: a small corpus, quick to encode
    torch.manual_seed(0)
    model = GPT(len(tok), d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0, max_len=16)
    before = evaluate_loss(model, valid, batches=2)
    assert abs(before - math.log(len(tok))) < 0.2  # an untrained model guesses uniformly
    history = fit_gpt(model, train, valid, steps=40, batch_size=16, lr=1e-2, warmup=5, eval_every=20)
    assert history["eval_steps"] == [20, 40] and len(history["train_loss"]) == 40
    assert evaluate_loss(model, valid, batches=2) < before - 0.5
    assert model.lm_head.weight is model.token_embedding.weight  # still tied after training


def _tiny_run():
    tok, train, valid = prepare_data(load_text())
    torch.manual_seed(0)
    model = GPT(len(tok), d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0, max_len=16)
    return model, train, valid


def test_fit_gpt_progress_reports_time_per_step_and_time_left(capsys):
    model, train, valid = _tiny_run()
    fit_gpt(model, train, valid, steps=45, batch_size=4, warmup=1, eval_every=40, progress=True)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["step    20 of 45", "step    40 of 45", "step    45 of 45"]
    assert "validation loss" not in lines[0] and "validation loss" in lines[1]
    assert all(" s per step, " in line for line in lines)
    assert re.search(r"about \d+ s left$", lines[0]) and lines[-1].endswith("done")


def test_fit_gpt_interrupted_keeps_the_model_trained_so_far(capsys):
    """Kernel -> Interrupt in the notebook: a KeyboardInterrupt from inside a step ends training, the
    history holds the steps done and a final validation loss, and the model is left in eval mode."""
    model, train, valid = _tiny_run()
    calls = []

    def interrupt(module, args):
        if module.training:  # a training step, not a validation batch
            calls.append(1)
            if len(calls) == 6:
                raise KeyboardInterrupt

    handle = model.register_forward_pre_hook(interrupt)
    before = model.token_embedding.weight.detach().clone()
    history = fit_gpt(model, train, valid, steps=50, batch_size=4, warmup=1, eval_every=3, interruptible=True)
    handle.remove()
    assert history["interrupted_at"] == 5 and len(history["train_loss"]) == 5
    assert history["eval_steps"] == [3, 5] and len(history["val_loss"]) == 2
    assert not model.training and not torch.equal(model.token_embedding.weight, before)
    assert "training interrupted at step 5 of 50" in capsys.readouterr().out
    handle = model.register_forward_pre_hook(interrupt)  # not interruptible (the default): raises
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        fit_gpt(model, train, valid, steps=50, batch_size=4, warmup=1, eval_every=3)
    handle.remove()


def test_shakespeare_ships_with_the_package_and_equals_the_data_file(monkeypatch, tmp_path):
    plain = load_shakespeare()
    assert (DATA_DIR / stories.SHAKESPEARE_FILE).read_text(encoding="utf-8") == plain
    assert stories.sha256(plain) == SHAKESPEARE_SHA256 and len(plain) == 1_115_394
    # as in a pip-installed package (Colab): no data/ folder beside the package, the gzipped copy
    stories._unpacked.cache_clear()
    monkeypatch.setattr(stories, "DATA_DIR", tmp_path / "absent")
    assert load_shakespeare() == plain
    with pytest.raises(FileNotFoundError, match="tinyshakespeare.txt"):
        load_shakespeare(tmp_path)
    assert stories.SHAKESPEARE_PACKED.stat().st_size < 500_000


def test_the_recipes_train_the_same_gpt_on_shakespeare():
    tok, train, valid = prepare_data()
    assert len(tok) == 65 and train.numel() + valid.numel() == 1_115_394
    assert {k: v for k, v in FAST_RECIPE["model"].items() if k != "max_len"} == {
        k: v for k, v in GPT_RECIPE["model"].items() if k != "max_len"}


def test_write_and_report_writes_the_record_that_checkpoint_info_reads(tmp_path, capsys):
    """The --write command both training modules share (gpt_training, llama_training): the help
    without --write, else the model and its record, which checkpoint_info reads back."""
    from course_utils import gpt_training as G
    from course_utils import llama_training

    tokenizer = G.CharTokenizer(load_shakespeare())
    model = GPT(len(tokenizer), d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8)
    history = {"steps": 3, "train_seconds": 0.123, "val_loss": [2.34567]}
    path, recipe = tmp_path / "tiny.pt", {"fit": {"steps": 3}}

    def save(m, tok, hist, meta):
        return G.write_checkpoint(path, 7, {"vocab_size": len(tok)}, m.state_dict(), tok, hist, meta)

    assert G.main([]) == 0 and llama_training.main([]) == 0 and G.write_and_report([], "", "TINY", recipe, path,
                                                                                  None, save) == 0
    assert not path.exists() and "--write" in capsys.readouterr().out  # the help only
    train = lambda args: (model, tokenizer, history)  # noqa: E731
    assert G.write_and_report(["--write", "--threads", "2"], "", "TINY", recipe, path, train, save) == 0
    info = G.checkpoint_info(path, 7, "tests")
    assert info == {"config": {"vocab_size": len(tokenizer)}, "recipe": recipe, "threads": 2,
                    "torch": str(torch.__version__), "steps": 3, "train_seconds": 0.1,
                    "wall_seconds": info["wall_seconds"], "final_val_loss": 2.3457}
    assert f"wrote {path}" in capsys.readouterr().out


def test_shipped_checkpoint_loads_and_writes_shakespeare():
    model, tok, history = load_pretrained_gpt()
    assert CHECKPOINT.stat().st_size < 2_000_000
    assert model.lm_head.weight is model.token_embedding.weight and not model.training
    info = pretrained_gpt_info()
    assert history["val_loss"][-1] == pytest.approx(info["final_val_loss"], abs=1e-3)
    assert info["final_val_loss"] < 1.75  # nats per character; ln V = 4.17 before training
    config = GPT_RECIPE["model"]
    assert (model.d_model, model.max_len, len(model.blocks)) == (config["d_model"], config["max_len"], config["num_layers"])  # noqa: E501
    _, _, valid = prepare_data()
    assert evaluate_loss(model, valid, batches=2) < 1.9
    out = generate(model, torch.tensor([tok.encode("ROMEO:\n")]), 120, temperature=0)
    words = [w.strip(".,;:!?'-").lower() for w in tok.decode(out[0]).split()]
    known = {w.strip(".,;:!?'-").lower() for w in load_shakespeare().split()}
    assert sum(w in known for w in words) >= 0.8 * len(words)


# ---------------------------------------------------------------- a student's GPT, from the contract only
class ContractBlock(nn.Module):
    """A GPTBlock written from the contract alone: one dropout module, the mask built by hand."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
        super().__init__()
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation="gelu_tanh")
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        allowed = causal_mask(x.size(1), device=x.device)
        if mask is not None:
            allowed = allowed & mask
        h = self.norm1(x)
        x = x + self.drop(self.self_attn(h, h, h, allowed)[0])
        return x + self.drop(self.feed_forward(self.norm2(x)))


class ContractGPT(nn.Module):
    """A GPT with the contract's submodules and nothing else: no vocab_size / max_len attributes."""

    def __init__(self, vocab_size, d_model=768, num_heads=12, num_layers=12, d_ff=3072, dropout=0.1, max_len=1024):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.position_embedding = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([ContractBlock(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])
        self.norm = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
        self.lm_head.weight = self.token_embedding.weight

    def forward(self, tokens, mask=None):
        if tokens.size(1) > self.position_embedding.num_embeddings:
            raise ValueError("too long for max_len")
        x = self.token_embedding(tokens) + self.position_embedding.weight[: tokens.size(1)]
        x = self.dropout(x)
        for block in self.blocks:
            x = block(x, mask)
        return nn.functional.linear(self.norm(x), self.token_embedding.weight)  # the tied head, by hand


def test_every_helper_takes_a_contract_only_gpt():
    """generate (with and without the cache), gpt_decode_step, empty_cache, evaluate_loss,
    fit_gpt, record_attention and the export use only the contract's parts of a GPT."""
    torch.manual_seed(0)
    model = ContractGPT(13, d_model=12, num_heads=3, num_layers=2, d_ff=20, dropout=0.1, max_len=10).train()
    assert not hasattr(model, "max_len") and context_length(model) == 10
    prompt = torch.randint(0, 13, (2, 3))
    cached = generate(model, prompt, 7, temperature=0)
    assert model.training  # the mode is restored
    assert torch.equal(cached, generate(model, prompt, 7, temperature=0, use_cache=False))
    assert generate(model, prompt, 12, top_k=3, generator=torch.Generator().manual_seed(0)).shape == (2, 15)
    cache = empty_cache(model, 2, capacity=4)
    with torch.no_grad():
        model.eval()
        logits = [gpt_decode_step(model, prompt[:, t], t, cache) for t in range(3)][-1]
        torch.testing.assert_close(logits, model(prompt)[:, -1], atol=1e-5, rtol=1e-4)
        with record_attention(model) as maps:
            model(prompt)
    assert maps["blocks.1.self_attn"].shape == (2, 3, 3, 3)
    data = torch.randint(0, 13, (500,))
    history = fit_gpt(model, data, data, steps=3, batch_size=4, warmup=1, eval_every=3)
    assert len(history["train_loss"]) == 3 and evaluate_loss(model, data, batches=1) > 0
    back = gpt_from_gpt2(gpt2_state_dict(model), num_heads=3)
    with torch.no_grad():
        torch.testing.assert_close(back(prompt), model(prompt), atol=1e-5, rtol=1e-4)


def test_decode_step_uses_the_tied_head_without_an_lm_head_module():
    """check_gpt accepts a GPT whose forward computes the tied head itself (no lm_head module);
    the cached decoder must give that model's logits too (output_logits)."""
    from course_utils.generation import empty_cache, gpt_decode_step, output_logits

    torch.manual_seed(0)
    model = GPT(11, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0, max_len=8).eval()
    tokens = torch.randint(0, 11, (2, 5))  # (B, L)
    with torch.no_grad():
        expected = model(tokens)[:, -1]  # (B, V)
        h = torch.randn(3, 16)  # (N, D)
        with_head = output_logits(model, h)  # (N, V)
        del model.lm_head  # the tie is now computed from token_embedding alone
        torch.testing.assert_close(output_logits(model, h), with_head)
        cache = empty_cache(model, 2, capacity=5)
        for t in range(5):
            logits = gpt_decode_step(model, tokens[:, t], t, cache)  # (B, V)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)


def test_fit_gpt_shortens_a_run_that_would_not_fit_its_time_budget(capsys, monkeypatch):
    """``max_seconds``: on a clock where every step takes 2 s, 50 steps do not fit in 60 s; after
    the first report the run is cut to the steps that fit, the schedule ends there (its last
    step validates), and a line says so. Without a budget, or with room, nothing changes."""
    from types import SimpleNamespace

    import course_utils.gpt_training as gpt_training

    ticks = iter(range(10**6))  # perf_counter advances 1 s a call (two calls a step)
    monkeypatch.setattr(gpt_training, "time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    model, train, valid = _tiny_run()
    history = fit_gpt(model, train, valid, steps=50, batch_size=4, warmup=1, eval_every=10, max_seconds=60)
    done = len(history["train_loss"])
    assert 20 < done < 50 and history["steps"] == done and history["eval_steps"][-1] == done
    assert re.search(r"training \d+ steps instead, to stay within 60 s", capsys.readouterr().out)
    roomy = fit_gpt(model, train, valid, steps=30, batch_size=4, warmup=1, eval_every=10, max_seconds=10**6)
    assert len(roomy["train_loss"]) == 30 and roomy["steps"] == 30 and "instead" not in capsys.readouterr().out
    with pytest.raises(ValueError, match="max_seconds"):
        fit_gpt(model, train, valid, steps=5, max_seconds=0)


def test_fit_gpt_plans_again_and_uses_its_budget_when_the_pace_improves(capsys, monkeypatch):
    """A slow start (5 s per clock call for the first 20 steps, then 0.5 s) first cuts 300 steps
    in a 400 s budget to about 40; planned again every 20 steps at the pace so far, the run grows
    back and ends close to the budget instead of leaving most of it unused (issue 22: a shared
    CPU's slow first steps cut a run to 79 steps that finished in 179 s of 240)."""
    from types import SimpleNamespace

    import course_utils.gpt_training as gpt_training

    def clock():
        now, calls = 0.0, 0
        while True:
            calls += 1
            now += 5.0 if calls <= 41 else 0.5  # two calls a step: slow for the first 20 steps
            yield now

    ticks = clock()
    monkeypatch.setattr(gpt_training, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    model, train, valid = _tiny_run()
    history = fit_gpt(model, train, valid, steps=300, batch_size=4, warmup=1, eval_every=100, max_seconds=400)
    out = capsys.readouterr().out
    first = int(re.search(r"training (\d+) steps instead", out).group(1))
    done = len(history["train_loss"])
    assert first < 50 < 150 < done < 300 and history["steps"] == done and history["eval_steps"][-1] == done
    used = next(ticks) - 5.0  # the clock when the run ended, less the reading at its start
    assert 0.8 * 400 < used < 1.1 * 400, used
    assert out.count("instead") >= 2  # the growing plan is announced
