#!/usr/bin/env python3
"""
The PyTorch side of `bench --gpu` (issue #22, `vsTorchEager`; src/bench/torch-ppo.ts, docs/gpu.md): the same
GPT-2 LoRA PPO step as ours, in PyTorch eager on the same GPU, timed by phase after warm-up steps, plus greedy and
sampled decode ms/token.

usage: python scripts/torch_ppo_step.py SPEC.json
  SPEC.json is what src/bench/torch-ppo.ts `torchSpec` writes: the model folder (config.json + model.safetensors,
  the one our bench trains), the device ("cuda", or "cpu" for a dry run), batch, prompt length Tq, response
  length R, LoRA rank and alpha, the PPO hyperparameters of our config, warm-up and timed steps, and the decode
  timing's batches and token count.

The step, as ours runs it (docs/engine.md "The step, in order"), float32 throughout (TF32 off, torch's default):
  1. generate: HF `generate` with the KV cache, sampling at our temperature / top-k / top-p, exactly R new tokens;
  2. score (no grad): reference log-probs (adapters off), old policy log-probs (policy adapters), values (value
     adapters + scalar head on the last hidden state), a host reward of the response ids (read back to the CPU:
     ours reads its responses back to score them too), the per-token KL penalty, GAE (γ, λ) and whitening;
  3. update: one epoch, one minibatch of the whole batch: clipped policy loss + vfCoef · clipped value loss, one
     backward, the global gradient norm clipped to maxGradNorm, one Adam step (policy adapters at learningRate,
     value adapters and head at valueLearningRate; Adam = AdamW with weight decay 0, as our optimizer).
LoRA: r and alpha on GPT-2's four Conv1Ds (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj), B zero at init, two
adapter sets (policy, value) on one frozen base: what our `valueModel: shared` builds. Written here as a small
module (LoraConv1D) rather than through PEFT, whose multi-adapter `set_adapter` changes which adapters train.

Prints progress on stderr and one JSON object on the last stdout line (parseTorchResult in src/bench/torch-ppo.ts):
the mean phase times of the timed steps, greedy ms/token per batch, sampled ms/token, the device, the versions.
Never downloads: the model is a local folder.
"""
import json
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


def log(msg):
    sys.stderr.write(f"[torch] {msg}\n")
    sys.stderr.flush()


def main(spec_path):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import transformers
    from transformers import GPT2LMHeadModel

    spec = json.load(open(spec_path))
    dev = torch.device(spec["device"])
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("CUDA is not available")
    torch.manual_seed(spec.get("seed", 0))

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    model = GPT2LMHeadModel.from_pretrained(spec["model"], torch_dtype=torch.float32).to(dev)
    model.eval()  # no dropout (ours has none); autograd still runs in eval mode
    for p in model.parameters():
        p.requires_grad_(False)
    C = model.config.n_embd
    r, alpha = spec["lora"], spec["loraAlpha"]
    mode = ["policy"]  # which adapter set the LoRA modules apply: "policy", "value" or None (the reference)

    class LoraConv1D(nn.Module):
        """GPT-2's Conv1D (weight [in, out]) plus, per adapter set, B·A·alpha/r (PEFT's nn.Linear semantics)."""

        def __init__(self, base):
            super().__init__()
            self.base = base
            n_in, n_out = base.weight.shape
            self.A = nn.ParameterDict()
            self.B = nn.ParameterDict()
            for name in ("policy", "value"):
                a = torch.empty(r, n_in, device=dev)
                nn.init.kaiming_uniform_(a, a=5 ** 0.5)  # PEFT's init of A
                self.A[name] = nn.Parameter(a)
                self.B[name] = nn.Parameter(torch.zeros(n_out, r, device=dev))
            self.scale = alpha / r

        def forward(self, x):
            y = self.base(x)
            m = mode[0]
            if m is None:
                return y
            return y + (x @ self.A[m].t()) @ self.B[m].t() * self.scale

    for blk in model.transformer.h:
        blk.attn.c_attn = LoraConv1D(blk.attn.c_attn)
        blk.attn.c_proj = LoraConv1D(blk.attn.c_proj)
        blk.mlp.c_fc = LoraConv1D(blk.mlp.c_fc)
        blk.mlp.c_proj = LoraConv1D(blk.mlp.c_proj)
    value_head = nn.Linear(C, 1).to(dev)
    nn.init.zeros_(value_head.weight)
    nn.init.zeros_(value_head.bias)

    def adapter_params(name):
        out = []
        for blk in model.transformer.h:
            for mod in (blk.attn.c_attn, blk.attn.c_proj, blk.mlp.c_fc, blk.mlp.c_proj):
                out += [mod.A[name], mod.B[name]]
        return out

    pol_params = adapter_params("policy")
    val_params = adapter_params("value") + list(value_head.parameters())
    opt = torch.optim.AdamW(
        [{"params": pol_params, "lr": spec["learningRate"]}, {"params": val_params, "lr": spec["valueLearningRate"]}],
        betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)

    B, Tq, R = spec["batch"], spec["Tq"], spec["responseLength"]
    T = spec["temperature"] or 1.0
    V = model.config.vocab_size
    gen = torch.Generator(device="cpu").manual_seed(1)

    def sample_kwargs():
        # top_k 0 turns HF's top-k off (None would fall back to generation_config's 50).
        return {"do_sample": True, "temperature": T, "top_k": spec["topK"], "top_p": spec["topP"]}

    def generate(ids, n, sampled):
        extra = sample_kwargs() if sampled else {"do_sample": False}
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                              pad_token_id=0, eos_token_id=None, **extra)

    def response_logprobs(seq):
        """log π(token) of the R response tokens, from the hidden states before them; [B, R]."""
        h = model.transformer(seq).last_hidden_state[:, Tq - 1:-1]
        logits = model.lm_head(h) / T
        return torch.log_softmax(logits.float(), -1).gather(-1, seq[:, Tq:, None]).squeeze(-1)

    def values(seq):
        h = model.transformer(seq).last_hidden_state[:, Tq - 1:-1]
        return value_head(h).squeeze(-1)

    def host_reward(resp):
        """A reward the host computes from the response ids (ours: a lexicon over the decoded text)."""
        ids = resp.cpu().tolist()
        return torch.tensor([sum(1 for t in row if t % 7 == 0) / len(row) for row in ids], device=dev)

    def step():
        prompts = torch.randint(0, V, (B, Tq), generator=gen).to(dev)
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            mode[0] = "policy"
            seq = generate(prompts, R, True)
        sync()
        t1 = time.perf_counter()
        with torch.no_grad():
            mode[0] = None
            ref_lp = response_logprobs(seq)
            mode[0] = "policy"
            old_lp = response_logprobs(seq)
            mode[0] = "value"
            old_v = values(seq)
            score = host_reward(seq[:, Tq:])
            kl = old_lp - ref_lp
            rew = -spec["klCoef"] * kl
            rew[:, -1] += score
            adv = torch.zeros_like(rew)
            last = torch.zeros(B, device=dev)
            for t in reversed(range(R)):
                nxt = old_v[:, t + 1] if t + 1 < R else torch.zeros(B, device=dev)
                delta = rew[:, t] + spec["gamma"] * nxt - old_v[:, t]
                last = delta + spec["gamma"] * spec["lam"] * last
                adv[:, t] = last
            ret = adv + old_v
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        sync()
        t2 = time.perf_counter()
        mode[0] = "policy"
        lp = response_logprobs(seq)
        ratio = torch.exp(torch.clamp(lp - old_lp, -spec["logRatioClamp"], spec["logRatioClamp"]))
        eps = spec["clipRange"]
        pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - eps, 1 + eps)).mean()
        mode[0] = "value"
        v = values(seq)
        vc = old_v + torch.clamp(v - old_v, -spec["clipRangeValue"], spec["clipRangeValue"])
        vloss = 0.5 * torch.max((v - ret) ** 2, (vc - ret) ** 2).mean()
        loss = pg + spec["vfCoef"] * vloss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if spec["maxGradNorm"] > 0:
            torch.nn.utils.clip_grad_norm_(pol_params + val_params, spec["maxGradNorm"])
        opt.step()
        sync()
        t3 = time.perf_counter()
        if not torch.isfinite(loss):
            raise SystemExit("the PyTorch step's loss is not finite")
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

    def per_token(batch, sampled):
        """ms per new token: (time of N new tokens − time of 2) / (N − 2), fastest of 3 after a warm-up."""
        n = spec["decodeTokens"]
        ids = torch.randint(0, V, (batch, 8), generator=gen).to(dev)

        def run(k):
            sync()
            t0 = time.perf_counter()
            with torch.no_grad():
                generate(ids, k, sampled)
            sync()
            return time.perf_counter() - t0

        run(n)
        long = min(run(n) for _ in range(3))
        short = min(run(2) for _ in range(3))
        return (long - short) / (n - 2) * 1000

    mode[0] = "policy"
    greedy = {str(b): per_token(b, False) for b in spec["decodeBatches"]}
    sampled = per_token(spec["sampledBatch"], True)
    log(f"greedy ms/token {greedy}, sampled {sampled:.2f} at batch {spec['sampledBatch']}")
    out = {
        **mean,
        "steps": len(rows),
        "stepTimes": [r["timeStep"] for r in rows],
        "greedyMsPerToken": greedy,
        "sampledMsPerToken": sampled,
        "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        sys.exit(2)
    main(sys.argv[1])
