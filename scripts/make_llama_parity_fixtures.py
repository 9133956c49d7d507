#!/usr/bin/env python3
"""Make the Llama / Qwen2 / Qwen3 parity fixtures in tests/fixtures/parity-llama/ (transformers as the reference).

What it is for
    The TypeScript/TensorFlow.js Llama-architecture model (src/core/model/llama.ts) is checked against these files:
    tiny random models saved as Hugging Face folders, and what transformers' LlamaForCausalLM, Qwen2ForCausalLM and
    Qwen3ForCausalLM compute for them (float32, eager attention, CPU).

    Folders (each with config.json, model.safetensors, the tokenizer files of tests/fixtures/hf-tokenizer/, and
    expected.json + expected.safetensors):
      llama-tiny  untied lm_head, GQA (4 query heads, 2 KV heads), rope_theta 10000, F32 weights
      qwen2-tiny  tied head, q/k/v biases, rope_theta 1e6, BF16 weights (as Qwen ships them)
      qwen3-tiny  tied head, q_norm/k_norm, head_dim 16 != hidden/heads = 8, F16 weights

    expected.json: `single` (one raw prompt's ids), `batch` (two prompts left-padded: ids, attention mask; positions
    are cumsum(mask) - 1 as generate() computes them, passed explicitly), `greedy_raw` and `greedy_chat` (prompt ids,
    12 greedy tokens from model.generate(do_sample=False) with no stop id, and a plain argmax loop without the cache
    gives the same tokens, asserted here). expected.safetensors: `single_logits` [1, T, V], `batch_logits` [2, T, V].

    Weights are drawn N(0, 0.2) (norm weights 1 + N(0, 0.1), biases N(0, 0.1)), wider than transformers' 0.02, so
    the greedy choice is not decided by float32 rounding.

How to rerun
    /tmp/venv/bin/python scripts/make_llama_parity_fixtures.py   (torch, transformers 5; no network)
"""

import json
import os
import shutil

import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers import Qwen3Config, Qwen3ForCausalLM

torch.set_num_threads(1)
torch.manual_seed(0)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOK = os.path.join(ROOT, "tests", "fixtures", "hf-tokenizer")
OUT = os.path.join(ROOT, "tests", "fixtures", "parity-llama")

COMMON = dict(
    vocab_size=512,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    bos_token_id=510,
    eos_token_id=[511, 509],
    pad_token_id=509,
)

MODELS = [
    ("llama-tiny", LlamaConfig, LlamaForCausalLM, dict(tie_word_embeddings=False, rms_norm_eps=1e-5,
                                                      rope_theta=10000.0), torch.float32, "F32"),
    ("qwen2-tiny", Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=True, rms_norm_eps=1e-6,
                                                      rope_theta=1000000.0), torch.bfloat16, "BF16"),
    ("qwen3-tiny", Qwen3Config, Qwen3ForCausalLM, dict(tie_word_embeddings=True, rms_norm_eps=1e-6,
                                                      rope_theta=1000000.0, head_dim=16), torch.float16, "F16"),
]

RAW = "The quick brown fox jumps over"
BATCH = ["Hello world, this is", "What is 17 + 25?"]
CHAT_USER = "What is 17 + 25? Answer with a number."
NEW = 12


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def greedy_loop(model, ids):
    """Plain argmax loop, full forward each step (no cache), positions 0..T-1."""
    seq = list(ids)
    out, lps = [], []
    for _ in range(NEW):
        with torch.no_grad():
            logits = model(torch.tensor([seq])).logits[0, -1].double()
        tok = int(torch.argmax(logits))
        out.append(tok)
        lps.append(float(torch.log_softmax(logits, -1)[tok]))
        seq.append(tok)
    return out, lps


def main():
    tok = AutoTokenizer.from_pretrained(TOK)
    for i, (name, Cfg, Model, extra, dtype, dname) in enumerate(MODELS):
        cfg = Cfg(**COMMON, **extra)
        cfg._attn_implementation = "eager"
        model = Model(cfg).eval()
        randomize(model, 1000 + i)
        # Round the weights to the dtype the file stores, so the reference computes with exactly those values.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(dtype).to(torch.float32))
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        sd = {k: v.to(dtype).contiguous() for k, v in model.state_dict().items()}
        if cfg.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        cfg_json = cfg.to_dict()
        cfg_json.pop("_attn_implementation_internal", None)
        cfg_json["architectures"] = [Model.__name__]
        cfg_json["dtype"] = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg_json, f, indent=2, sort_keys=True)
        for fn in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(os.path.join(TOK, fn), os.path.join(d, fn))

        # Reload as a user would, in float32, and compute the reference outputs.
        ref = Model.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        single = tok(RAW, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            single_logits = ref(torch.tensor([single])).logits
        enc = [tok(s, add_special_tokens=False)["input_ids"] for s in BATCH]
        T = max(len(e) for e in enc)
        ids = [[509] * (T - len(e)) + e for e in enc]
        mask = [[0] * (T - len(e)) + [1] * len(e) for e in enc]
        m = torch.tensor(mask)
        pos = (torch.cumsum(m, 1) - 1).clamp(min=0)
        with torch.no_grad():
            batch_logits = ref(torch.tensor(ids), attention_mask=m, position_ids=pos).logits

        greedy = {}
        for key, prompt in (("greedy_raw", single),
                            ("greedy_chat", tok.apply_chat_template([{"role": "user", "content": CHAT_USER}],
                                                                    tokenize=True, add_generation_prompt=True,
                                                                    return_dict=False))):
            prompt = list(prompt["input_ids"]) if isinstance(prompt, dict) else list(prompt)
            with torch.no_grad():
                gen = ref.generate(torch.tensor([prompt]), max_new_tokens=NEW, do_sample=False, eos_token_id=None,
                                   pad_token_id=509, min_new_tokens=NEW)
            tokens = gen[0, len(prompt):].tolist()
            loop, lps = greedy_loop(ref, prompt)
            assert tokens == loop, (name, key, tokens, loop)
            greedy[key] = {"prompt_ids": prompt, "new_tokens": tokens, "greedy_logprobs": lps}

        save_file({"single_logits": single_logits.contiguous(), "batch_logits": batch_logits.contiguous()},
                  os.path.join(d, "expected.safetensors"), metadata={"format": "pt"})
        expected = {
            "description": "transformers %s reference (float32, eager); see scripts/make_llama_parity_fixtures.py"
                           % __import__("transformers").__version__,
            "weights_dtype": dname,
            "single": {"input_ids": [single]},
            "batch": {"input_ids": ids, "attention_mask": mask},
            **greedy,
        }
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f, indent=1)
        print(name, "T", len(single), "params", sum(p.numel() for p in ref.parameters()), greedy["greedy_chat"]["new_tokens"])


if __name__ == "__main__":
    main()
