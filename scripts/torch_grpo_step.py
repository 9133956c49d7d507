#!/usr/bin/env python3
"""
The PyTorch side of `bench --gpu`'s Qwen GRPO row (`qwenGrpo.torchEagerPeft`; src/bench/torch-grpo.ts, docs/gpu.md):
the same LoRA GRPO step as ours, in PyTorch eager with PEFT on the same GPU, timed by phase after warm-up steps.

usage: python scripts/torch_grpo_step.py SPEC.json
  SPEC.json is what src/bench/torch-grpo.ts `torchGrpoSpec` writes: the model folder (config.json +
  model.safetensors, the one our bench trained: Qwen2.5-0.5B's shapes with random weights), the device ("cuda", or
  "cpu" for a dry run or a test), batch B, group size G (B / G prompts, each sampled G times), prompt length Tq,
  response length R, LoRA rank, alpha and target modules (PEFT's names: the layers our trainer adapted), the GRPO
  hyperparameters of our config (learning rate, sampling, klCoef = beta, scaleRewards, lossAggregation, clip range,
  log-ratio clamp, maxGradNorm), warm-up and timed steps, and the base's dtype ("float32", or "float16" for
  issue #36's f16-base rows: the frozen base in float16, the adapters in float32 as PEFT casts them by default,
  the log-softmax and loss in float32).

The step, as ours runs GRPO with one epoch of one minibatch (docs/engine.md), float32 throughout (or a float16
base), TF32 off:
  1. generate: HF `generate` with the KV cache through the PEFT model (adapters on), sampling at our temperature /
     top-k / top-p, exactly R new tokens for all B rows (B / G random prompts of Tq ids, each repeated G times);
  2. score (no grad): reference log-probs of the R response tokens with the adapters disabled (only when
     beta > 0: our trainer skips them otherwise too), a host reward of the response ids (read back to the CPU, as
     ours reads its responses back to score them; the same function as scripts/torch_ppo_step.py), and GRPO's
     group-relative advantages: (s - mean_g(s)) / (std_g(s) + 1e-4) with scaleRewards "group" (unbiased std;
     "batch": the batch's std; "none": no division), one per sample at every token;
  3. update: on-policy, as ours and TRL do with one epoch (num_iterations 1): the old log-probs are the update
     forward's own, detached (so the ratio is 1 and scoring runs no policy forward); the clipped surrogate per
     token plus beta * k3 (exp(ref - lp) - (ref - lp) - 1), aggregated by lossAggregation (token-mean, seq-mean,
     seq-sum-norm), one backward, the global gradient norm of the adapters clipped to maxGradNorm, one AdamW step
     with weight decay 0 (= our Adam).
LoRA through PEFT: LoraConfig(r, lora_alpha, target_modules, lora_dropout 0, bias "none") and get_peft_model, B zero
at init (PEFT's default init), so the policy equals the reference at the first step as ours does.

Prints progress on stderr and one JSON object on the last stdout line (parseTorchGrpoResult in
src/bench/torch-grpo.ts): the mean phase times of the timed steps, each step's time, the modules PEFT adapted and
its trainable parameter count, the device, the versions. Never downloads: the model is a local folder.
"""
import json
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

GRPO_STD_EPS = 1e-4  # src/core/ppo/advantages.ts GRPO_STD_EPS (TRL's)


def log(msg):
    sys.stderr.write(f"[torch] {msg}\n")
    sys.stderr.flush()


def host_reward(rows):
    """A reward the host computes from the response ids (scripts/torch_ppo_step.py's: the share of ids ≡ 0 mod 7)."""
    return [sum(1 for t in row if t % 7 == 0) / len(row) for row in rows]


def group_advantages(torch, scores, G, scale):
    """GRPO's advantages of src/core/ppo/advantages.ts grpoAdvantages: one per sample, groups of G consecutive rows."""
    g = scores.view(-1, G)
    centred = g - g.mean(dim=1, keepdim=True)
    if scale == "group":
        centred = centred / (g.std(dim=1, keepdim=True) + GRPO_STD_EPS)
    elif scale == "batch":
        centred = centred / (scores.std() + GRPO_STD_EPS)
    elif scale != "none":
        raise SystemExit(f"scaleRewards must be group, batch or none, got {scale!r}")
    return centred.reshape(-1)


def aggregate(torch, per_token, kind, R):
    """The loss aggregations of src/core/ppo/advantages.ts aggregateLoss (every response token counts: no stop)."""
    n = per_token.shape[0]
    if kind == "token-mean":
        return per_token.mean()
    if kind == "seq-mean":
        return per_token.mean(dim=1).mean()
    if kind == "seq-sum-norm":
        return per_token.sum() / (n * R)
    raise SystemExit(f"lossAggregation must be token-mean, seq-mean or seq-sum-norm, got {kind!r}")


def main(spec_path):
    import torch
    import transformers
    import peft
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    spec = json.load(open(spec_path))
    dev = torch.device(spec["device"])
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available")
    # float32 without TF32 (our WebGPU kernels compute in float32).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(spec.get("seed", 0))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    t_load = time.perf_counter()
    dtypes = {"float32": torch.float32, "float16": torch.float16}
    dtype_name = spec.get("dtype", "float32")
    if dtype_name not in dtypes:
        raise SystemExit(f"dtype must be float32 or float16, got {dtype_name!r}")
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=dtypes[dtype_name],
                                                local_files_only=True).to(dev)
    base.eval()  # no dropout (ours has none); autograd still runs in eval mode
    targets = list(spec["loraTargets"])
    lora = LoraConfig(r=spec["lora"], lora_alpha=spec["loraAlpha"], target_modules=targets, lora_dropout=0.0,
                      bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(base, lora)
    model.eval()
    inner = model.get_base_model()  # the *ForCausalLM with PEFT's LoRA layers in it
    params = [p for p in model.parameters() if p.requires_grad]
    trainable = sum(p.numel() for p in params)
    adapted = sorted({name.rsplit(".", 1)[-1] for name, m in inner.named_modules()
                      if isinstance(m, peft.tuners.lora.LoraLayer)})
    log(f"{type(inner).__name__}, LoRA r {spec['lora']} on {adapted}: {trainable} trainable parameters "
        f"({time.perf_counter() - t_load:.1f} s to load)")
    opt = torch.optim.AdamW(params, lr=spec["learningRate"], betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)

    B, G, Tq, R = spec["batch"], spec["groupSize"], spec["Tq"], spec["responseLength"]
    if B % G != 0:
        raise SystemExit(f"batch {B} is not a whole number of groups of {G}")
    T = spec["temperature"] or 1.0
    beta = spec["klCoef"]
    eps = spec["clipRange"]
    clamp = spec["logRatioClamp"]
    V = inner.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(1)

    def response_logprobs(seq):
        """log π(token) of the R response tokens from the hidden states before them (logits of those only); [B, R]."""
        h = inner.model(seq).last_hidden_state[:, Tq - 1:-1]
        logits = inner.lm_head(h) / T
        return torch.log_softmax(logits.float(), -1).gather(-1, seq[:, Tq:, None]).squeeze(-1)

    def step():
        prompts = torch.randint(0, V, (B // G, Tq), generator=gen).repeat_interleave(G, dim=0).to(dev)
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            # top_k 0 turns HF's top-k off (None would fall back to generation_config's 50).
            seq = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=R,
                                 min_new_tokens=R, do_sample=True, temperature=T, top_k=spec["topK"],
                                 top_p=spec["topP"], pad_token_id=0, eos_token_id=None)
        sync()
        t1 = time.perf_counter()
        with torch.no_grad():
            ref_lp = None
            if beta > 0:
                with model.disable_adapter():
                    ref_lp = response_logprobs(seq)
            scores = torch.tensor(host_reward(seq[:, Tq:].cpu().tolist()), device=dev)
            adv = group_advantages(torch, scores, G, spec["scaleRewards"])[:, None]
        sync()
        t2 = time.perf_counter()
        lp = response_logprobs(seq)
        old = lp.detach()  # on-policy: one epoch of one minibatch (TRL num_iterations 1)
        ratio = torch.exp(torch.clamp(lp - old, -clamp, clamp))
        per_token = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - eps, 1 + eps))
        if ref_lp is not None:
            d = ref_lp - lp
            per_token = per_token + beta * (torch.exp(d) - d - 1)
        loss = aggregate(torch, per_token, spec["lossAggregation"], R)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if spec["maxGradNorm"] > 0:
            torch.nn.utils.clip_grad_norm_(params, spec["maxGradNorm"])
        opt.step()
        sync()
        t3 = time.perf_counter()
        if not torch.isfinite(loss):
            raise SystemExit("the PyTorch step's loss is not finite")
        if seq.shape[1] != Tq + R:
            raise SystemExit(f"generate gave {seq.shape[1] - Tq} new tokens, not {R}")
        return {"timeGenerate": t1 - t0, "timeScore": t2 - t1, "timeUpdate": t3 - t2, "timeStep": t3 - t0}

    for i in range(spec["warmup"]):
        s = step()
        log(f"warm-up {s['timeStep']:.3f} s")
    rows = []
    for i in range(spec["steps"]):
        s = step()
        log(f"step {s['timeStep']:.3f} s (generate {s['timeGenerate']:.3f}, score {s['timeScore']:.3f}, "
            f"update {s['timeUpdate']:.3f})")
        rows.append(s)
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    out = {
        **mean,
        "steps": len(rows),
        "stepTimes": [r["timeStep"] for r in rows],
        "loraTargets": adapted,
        "trainableParams": trainable,
        "refLogprobs": beta > 0,
        "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "dtype": dtype_name,
        "peakMemoryBytes": torch.cuda.max_memory_allocated() if dev.type == "cuda" else None,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        sys.exit(2)
    main(sys.argv[1])
