#!/usr/bin/python3
"""Make the GPT-2 parity fixtures in tests/fixtures/parity/ (an independent PyTorch reference).

What it is for
    The TypeScript/TensorFlow.js GPT-2 is checked against these files: tiny random models saved in the
    Hugging Face safetensors layout, and the outputs a reference GPT-2 gives for them. The reference here
    is written from the published GPT-2 equations in plain torch (no `transformers`), computed in float64
    from the float32 weights that are stored, so it is accurate to well below float32 rounding.

    Reference equations (as Hugging Face's GPT2LMHeadModel / GPT2ForSequenceClassification):
      h0 = wte[ids] + wpe[pos]
      per block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))
      LayerNorm(x) = (x - mean) / sqrt(biased var + layer_norm_epsilon) * weight + bias
      attn: qkv = x @ c_attn.weight + c_attn.bias   (Conv1D, weight [C, 3C]); split q, k, v; n_head heads;
            scores = q k^T / sqrt(head_dim); causal mask and the attention mask over keys
            (masked scores = finfo(float64).min, as HF does); softmax; @ v; merge heads;
            @ c_proj.weight + c_proj.bias
      mlp:  gelu_new(x @ c_fc.weight + c_fc.bias) @ c_proj.weight + c_proj.bias,
            gelu_new(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      h = ln_f(x); LM logits = h @ wte^T (tied head); scalar head value = h @ score.weight^T (no bias)
      left padding: position = cumsum(mask) - 1, and position 1 where mask == 0 (HF's masked_fill_(mask==0, 1))

How to rerun
    From the repository root:  /usr/bin/python3 scripts/make_parity_fixtures.py
    (needs torch and numpy only; Debian's python3-torch works). Output is byte-for-byte the same on every
    run (fixed seeds, single-threaded float64 math, fixed number formatting). Files written:
      tests/fixtures/parity/tiny-prefixed/{config.json, model.safetensors, reward_model.safetensors, expected.json}
      tests/fixtures/parity/tiny-plain/{config.json, model.safetensors, expected.json}
    See `expected.json`'s "description" field and the `_layout_doc` below for the keys and shapes.
"""

import json
import math
import os
import struct
import sys

import numpy as np
import torch

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_ROOT = os.path.join(REPO_ROOT, "tests", "fixtures", "parity")
SIG_DIGITS = 9
NEG = torch.finfo(torch.float64).min

# --------------------------------------------------------------------------------------------------
# safetensors writer / reader (by hand: 8-byte LE u64 header length, JSON header padded with spaces
# to a multiple of 8, then raw little-endian data, tensors sorted by name)
# --------------------------------------------------------------------------------------------------


def write_safetensors(path, tensors):
    names = sorted(tensors)
    header = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    for name in names:
        arr = np.array(tensors[name].detach().cpu().numpy(), dtype="<f4", order="C")
        data = arr.tobytes(order="C")
        header[name] = {
            "dtype": "F32",
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32"
        b, e = info["data_offsets"]
        arr = np.frombuffer(raw[base + b : base + e], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


# --------------------------------------------------------------------------------------------------
# random weights
# --------------------------------------------------------------------------------------------------


def random_trunk(cfg, seed):
    """GPT2Model parameters (names without prefix), float32, std ~0.2 matrices, LN ~1+0.1 randn."""
    g = torch.Generator().manual_seed(seed)
    C, V, P = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]

    def randn(*shape, std=1.0, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g, dtype=torch.float64)).to(torch.float32)

    w = {}
    w["wte.weight"] = randn(V, C, std=0.2)
    w["wpe.weight"] = randn(P, C, std=0.2)
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        w[p + "ln_1.weight"] = randn(C, std=0.1, mean=1.0)
        w[p + "ln_1.bias"] = randn(C, std=0.1)
        w[p + "attn.c_attn.weight"] = randn(C, 3 * C, std=0.2)
        w[p + "attn.c_attn.bias"] = randn(3 * C, std=0.1)
        w[p + "attn.c_proj.weight"] = randn(C, C, std=0.2)
        w[p + "attn.c_proj.bias"] = randn(C, std=0.1)
        w[p + "ln_2.weight"] = randn(C, std=0.1, mean=1.0)
        w[p + "ln_2.bias"] = randn(C, std=0.1)
        w[p + "mlp.c_fc.weight"] = randn(C, 4 * C, std=0.2)
        w[p + "mlp.c_fc.bias"] = randn(4 * C, std=0.1)
        w[p + "mlp.c_proj.weight"] = randn(4 * C, C, std=0.2)
        w[p + "mlp.c_proj.bias"] = randn(C, std=0.1)
    w["ln_f.weight"] = randn(C, std=0.1, mean=1.0)
    w["ln_f.bias"] = randn(C, std=0.1)
    return w


def random_score_head(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    return (0.2 * torch.randn(1, cfg["n_embd"], generator=g, dtype=torch.float64)).to(torch.float32)


# --------------------------------------------------------------------------------------------------
# reference GPT-2 in float64
# --------------------------------------------------------------------------------------------------


def layer_norm(x, w, b, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased variance
    return (x - mean) / torch.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def positions_for(mask):
    pos = torch.cumsum(mask, dim=-1) - 1
    pos = pos.masked_fill(mask == 0, 1)
    return pos


def trunk_forward(w, cfg, ids, mask):
    """ids, mask: int64 [B, T]. Returns final hidden states h [B, T, C] (float64) and positions."""
    W = {k: v.to(torch.float64) for k, v in w.items()}
    B, T = ids.shape
    C, H = cfg["n_embd"], cfg["n_head"]
    D = C // H
    eps = cfg["layer_norm_epsilon"]
    pos = positions_for(mask)
    x = W["wte.weight"][ids] + W["wpe.weight"][pos]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    # HF: where(causal, scores, finfo.min), then + (1 - mask) * finfo.min over keys
    key_add = (1.0 - mask.to(torch.float64))[:, None, None, :] * NEG
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        a = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = a @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, H, D).transpose(1, 2)
        k = k.view(B, T, H, D).transpose(1, 2)
        v = v.view(B, T, H, D).transpose(1, 2)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(D)
        s = torch.where(causal, s, torch.tensor(NEG, dtype=torch.float64))
        s = s + key_add
        att = torch.softmax(s, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, C)
        o = o @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        x = x + o
        m = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        m = gelu_new(m @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"])
        m = m @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
        x = x + m
    h = layer_norm(x, W["ln_f.weight"], W["ln_f.bias"], eps)
    return h, pos


def lm_logits(w, cfg, ids, mask):
    h, pos = trunk_forward(w, cfg, ids, mask)
    return h @ w["wte.weight"].to(torch.float64).T, pos


def score_values(w, score_w, cfg, ids, mask):
    h, _ = trunk_forward(w, cfg, ids, mask)
    return (h @ score_w.to(torch.float64).T)[..., 0]


def last_real_index(mask):
    T = mask.shape[1]
    idx = torch.arange(T).expand_as(mask)
    return torch.where(mask == 1, idx, torch.full_like(idx, -1)).max(dim=1).values


# --------------------------------------------------------------------------------------------------
# cases
# --------------------------------------------------------------------------------------------------


def rnd_ids(g, n, hi=256):
    return torch.randint(0, hi, (n,), generator=g, dtype=torch.int64)


def left_pad(seqs, T, pad_id):
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.int64)
    mask = torch.zeros((len(seqs), T), dtype=torch.int64)
    for r, s in enumerate(seqs):
        ids[r, T - len(s) :] = s
        mask[r, T - len(s) :] = 1
    return ids, mask


def greedy(w, cfg, prompt, n_new):
    seq = prompt.clone()
    toks, lps, margins = [], [], []
    for _ in range(n_new):
        ids = seq[None, :]
        logits, _ = lm_logits(w, cfg, ids, torch.ones_like(ids))
        last = logits[0, -1]
        top2 = torch.topk(last, 2).values
        t = int(torch.argmax(last))
        lp = torch.log_softmax(last, dim=-1)[t]
        toks.append(t)
        lps.append(float(lp))
        margins.append(float(top2[0] - top2[1]))
        seq = torch.cat([seq, torch.tensor([t], dtype=torch.int64)])
    return toks, lps, min(margins), seq


def rounded(x):
    """Nested lists of float64 rounded to SIG_DIGITS significant digits (JSON numbers)."""
    if isinstance(x, torch.Tensor):
        x = x.tolist()
    if isinstance(x, list):
        return [rounded(v) for v in x]
    if isinstance(x, float):
        assert math.isfinite(x), x
        return float(f"{x:.{SIG_DIGITS}g}")
    return x


def hf_config(cfg):
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "vocab_size": cfg["vocab_size"],
        "n_positions": cfg["n_positions"],
        "n_ctx": cfg["n_positions"],
        "n_embd": cfg["n_embd"],
        "n_layer": cfg["n_layer"],
        "n_head": cfg["n_head"],
        "n_inner": None,
        "layer_norm_epsilon": cfg["layer_norm_epsilon"],
        "activation_function": "gelu_new",
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
        "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": cfg["eos_token_id"],
        "pad_token_id": cfg["pad_token_id"],
        "tie_word_embeddings": True,
        "tokenizer": "bytes",
    }


def write_json(path, obj, indent=None):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent, separators=(",", ":") if indent is None else (",", ": "))
        f.write("\n")


LAYOUT_DOC = (
    "Reference outputs of a float64 plain-torch GPT-2 for the float32 weights in this folder "
    "(generated by scripts/make_parity_fixtures.py; values rounded to 9 significant digits). "
    "single: input_ids [1][T], attention_mask [1][T], positions [1][T], logits [1][T][V]. "
    "batch_left_padded: lengths [3], input_ids [3][T] left-padded with pad_token_id, attention_mask [3][T], "
    "positions [3][T] (cumsum(mask)-1, 1 at pads), logits [3][T][V] (pad rows included but meaningless: "
    "compare real positions only); with a score model also score_values [3][T] and score_last [3] "
    "(value at last_real_index [3]). greedy: prompt_ids [5], new_tokens [12] (argmax of full no-cache "
    "forward, no EOS stop), greedy_logprobs [12] (log_softmax at the chosen token), sequence [17], "
    "min_top2_margin (smallest top1-top2 logit gap over the steps)."
)


def make_folder(name, cfg, prefixed, seeds, with_score):
    out = os.path.join(OUT_ROOT, name)
    os.makedirs(out, exist_ok=True)
    V, P, T = cfg["vocab_size"], cfg["n_positions"], 7

    w = random_trunk(cfg, seeds["trunk"])
    # model.safetensors
    if prefixed:
        st = {"transformer." + k: v for k, v in w.items()}
        st["lm_head.weight"] = w["wte.weight"].clone()
        tril = torch.tril(torch.ones(P, P, dtype=torch.float32)).view(1, 1, P, P)
        for i in range(cfg["n_layer"]):
            st[f"transformer.h.{i}.attn.bias"] = tril.clone()
            st[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4, dtype=torch.float32)
    else:
        st = dict(w)
    write_safetensors(os.path.join(out, "model.safetensors"), st)
    write_json(os.path.join(out, "config.json"), hf_config(cfg), indent=2)

    # round-trip check of the writer
    back = read_safetensors(os.path.join(out, "model.safetensors"))
    assert sorted(back) == sorted(st)
    for k in st:
        assert back[k].shape == st[k].shape and torch.equal(back[k], st[k]), k

    g = torch.Generator().manual_seed(seeds["inputs"])
    exp = {"description": LAYOUT_DOC, "model_file": "model.safetensors", "config": hf_config(cfg)}

    # (a) single
    ids1 = rnd_ids(g, T)[None, :]
    mask1 = torch.ones_like(ids1)
    lg1, pos1 = lm_logits(w, cfg, ids1, mask1)
    exp["single"] = {
        "input_ids": ids1.tolist(),
        "attention_mask": mask1.tolist(),
        "positions": pos1.tolist(),
        "logits": rounded(lg1),
    }

    # (b) batch, left padded
    lengths = [7, 4, 1]
    seqs = [rnd_ids(g, n) for n in lengths]
    idsb, maskb = left_pad(seqs, T, cfg["pad_token_id"])
    lgb, posb = lm_logits(w, cfg, idsb, maskb)
    # self-check: real positions equal an unpadded run of each sequence alone
    for r, s in enumerate(seqs):
        lone, _ = lm_logits(w, cfg, s[None, :], torch.ones(1, len(s), dtype=torch.int64))
        diff = (lgb[r, T - len(s) :] - lone[0]).abs().max().item()
        assert diff < 1e-9, (name, r, diff)
    batch = {
        "lengths": lengths,
        "input_ids": idsb.tolist(),
        "attention_mask": maskb.tolist(),
        "positions": posb.tolist(),
        "logits": rounded(lgb),
    }
    if with_score:
        wr = random_trunk(cfg, seeds["reward_trunk"])
        sw = random_score_head(cfg, seeds["score"])
        rst = {"transformer." + k: v for k, v in wr.items()}
        rst["score.weight"] = sw
        write_safetensors(os.path.join(out, "reward_model.safetensors"), rst)
        back = read_safetensors(os.path.join(out, "reward_model.safetensors"))
        for k in rst:
            assert torch.equal(back[k], rst[k]), k
        sv = score_values(wr, sw, cfg, idsb, maskb)
        li = last_real_index(maskb)
        for r, s in enumerate(seqs):
            lone = score_values(wr, sw, cfg, s[None, :], torch.ones(1, len(s), dtype=torch.int64))
            assert abs(sv[r, -1].item() - lone[0, -1].item()) < 1e-9
        batch["score_model_file"] = "reward_model.safetensors"
        batch["score_values"] = rounded(sv)
        batch["last_real_index"] = li.tolist()
        batch["score_last"] = rounded(sv[torch.arange(len(seqs)), li])
    exp["batch_left_padded"] = batch

    # (c) greedy: pick the first prompt (deterministically) whose greedy path has no near-ties, so a
    # float32 implementation takes the same argmax at every step, and is not one token repeated.
    for attempt in range(100):
        prompt = rnd_ids(g, 5)
        toks, lps, margin, seq = greedy(w, cfg, prompt, 12)
        if margin > 1e-2 and len(set(toks)) >= 4:
            break
    else:
        raise RuntimeError("no greedy prompt without near-ties")
    exp["greedy"] = {
        "prompt_ids": prompt.tolist(),
        "new_tokens": toks,
        "greedy_logprobs": rounded(lps),
        "sequence": seq.tolist(),
        "min_top2_margin": rounded(margin),
    }
    write_json(os.path.join(out, "expected.json"), exp)

    lg_all = torch.cat([lg1.flatten(), lgb[maskb.bool()].flatten()])
    print(
        f"{name}: logits std {lg_all.std().item():.3f} range [{lg_all.min().item():.3f}, {lg_all.max().item():.3f}]; "
        f"greedy {toks} (prompt attempt {attempt}, min margin {margin:.4f})"
        + (f"; score_last {batch['score_last']}" if with_score else "")
    )


def main():
    base = {"bos_token_id": 256, "eos_token_id": 256, "pad_token_id": 257, "vocab_size": 258}
    prefixed = dict(base, n_positions=32, n_embd=16, n_layer=2, n_head=4, layer_norm_epsilon=1e-5)
    plain = dict(base, n_positions=48, n_embd=24, n_layer=3, n_head=3, layer_norm_epsilon=1e-6)
    make_folder("tiny-prefixed", prefixed, True, {"trunk": 1001, "reward_trunk": 1002, "score": 1003, "inputs": 1004}, True)
    make_folder("tiny-plain", plain, False, {"trunk": 2001, "inputs": 2004}, False)


if __name__ == "__main__":
    sys.exit(main())
