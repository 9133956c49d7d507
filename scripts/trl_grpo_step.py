#!/usr/bin/env python3
"""
The TRL side of `cli bench --vs-trl` (src/bench/vs-trl.ts, docs/vs-trl.md): the same GRPO LoRA step as ours,
through TRL's GRPOTrainer with PEFT on PyTorch CPU, timed per step after a warm-up.

usage: python scripts/trl_grpo_step.py SPEC.json
  SPEC.json is what src/bench/vs-trl.ts `trlSpec` writes: the model folder, the prompts (one string per prompt,
  read by a byte-level tokenizer: one token per byte), batch, group, response length, LoRA, learning rate, KL
  coefficient (beta), threads, warm-up and timed steps, and the matmul sizes to time.
  `python scripts/trl_grpo_step.py --probe` prints the versions of torch, transformers, peft and trl (exit 0) or
  the import error (exit 1); the bench runs it to decide whether the TRL side can run.

Prints progress on stderr and one JSON object on the last stdout line (parseTrlResult in src/bench/vs-trl.ts reads
it): per-step seconds of the step (wall, and CPU time of this process), of generation and of scoring (the update is
the rest), the completion lengths
of every step, the prompt lengths in tokens, ru_maxrss of this process (bytes), torch's matmul GFLOP/s per size
on the same thread count, and the versions. Never downloads: HF_HUB_OFFLINE is set and the model is a local folder.
"""
import json
import os
import resource
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def log(msg):
    sys.stderr.write(f"[trl] {msg}\n")
    sys.stderr.flush()


def probe():
    try:
        import torch  # noqa: F401
        import transformers
        import peft
        import trl
    except Exception as e:  # ImportError, or a broken install
        print(f"{type(e).__name__}: {e}")
        return 1
    print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__,
                      "peft": peft.__version__, "trl": trl.__version__}))
    return 0


def byte_tokenizer(eos_id_hint):
    """One token per byte (ids 0..255) plus <|endoftext|> as EOS and PAD: a prompt of n ASCII bytes is n tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins of bytes, GPT-2's mapping
    # ByteLevel.alphabet() is unordered: order it by the byte each character stands for.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_to_char = {b: chr(c) for b, c in zip(bs, cs)}
    assert set(byte_to_char.values()) == set(alphabet)
    vocab = {byte_to_char[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    fast.add_special_tokens({"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"})
    fast.padding_side = "left"
    return fast


def bench_matmul(torch, sizes, min_seconds=1.0):
    """GFLOP/s of [m, k] @ [k, n] on this process's thread count over at least min_seconds, per wall second and per
    CPU second of this process."""
    out = []
    for m, k, n in sizes:
        a = torch.randn(m, k)
        b = torch.randn(k, n)
        for _ in range(2):
            torch.mm(a, b)
        iters = 0
        t0, c0 = time.perf_counter(), time.process_time()
        while iters == 0 or time.perf_counter() - t0 < min_seconds:
            torch.mm(a, b)
            iters += 1
        s, c = time.perf_counter() - t0, time.process_time() - c0
        flops = 2 * m * k * n * iters
        out.append({"m": m, "k": k, "n": n, "iters": iters, "seconds": s, "gflops": flops / s / 1e9,
                    "gflopsCpu": flops / c / 1e9})
    return out


def main(spec_path):
    with open(spec_path) as f:
        spec = json.load(f)
    threads = int(spec["threads"])
    for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[v] = str(threads)
    import torch

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(threads)
    except RuntimeError:
        pass
    import transformers
    import peft
    import trl
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(int(spec.get("seed", 1)))
    t_load = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32, local_files_only=True)
    tokenizer = byte_tokenizer(model.config.eos_token_id)
    prompts = spec["prompts"]
    prompt_lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    B, G, R = int(spec["batchSize"]), int(spec["groupSize"]), int(spec["responseLength"])
    warmup, steps = int(spec["warmup"]), int(spec["steps"])
    # Enough prompts that every step draws batch / group of them (the sampler repeats each one G times).
    per_step = B // G
    rows = [prompts[i % len(prompts)] for i in range(per_step * (warmup + steps))]
    dataset = Dataset.from_dict({"prompt": rows})

    def reward_len(completions, **kw):
        return [float(len(c)) for c in completions]

    args = GRPOConfig(
        output_dir=spec.get("outputDir", "/tmp/trl-vs-bench"),
        per_device_train_batch_size=B,
        gradient_accumulation_steps=1,
        num_generations=G,
        num_iterations=1,
        max_completion_length=R,
        generation_kwargs={"min_new_tokens": R},
        temperature=float(spec.get("temperature", 1.0)),
        top_k=0,
        top_p=1.0,
        beta=float(spec["beta"]),
        learning_rate=float(spec["learningRate"]),
        max_steps=warmup + steps,
        bf16=False,
        fp16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=int(spec.get("seed", 1)),
        dataloader_num_workers=0,
        shuffle_dataset=False,
    )
    lora = LoraConfig(
        r=int(spec["lora"]),
        lora_alpha=float(spec["loraAlpha"]),
        lora_dropout=0.0,
        target_modules=list(spec["loraTargets"]),
        fan_in_fan_out=True,
        bias="none",
        task_type="CAUSAL_LM",
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_len,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora,
    )
    load_seconds = time.perf_counter() - t_load

    # Phase clocks: _generate (sampling the completions), _generate_and_score_completions (that, the reference's
    # log-probs and the rewards); the step is training_step from the callback's begin to its end.
    cur = {"gen": 0.0, "genScore": 0.0, "cgen": 0.0, "cgenScore": 0.0, "lengths": []}
    orig_gen = trainer._generate
    orig_gs = trainer._generate_and_score_completions

    def timed_gen(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        r = orig_gen(*a, **k)
        cur["gen"] += time.perf_counter() - t0
        cur["cgen"] += time.process_time() - c0
        return r

    def timed_gs(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        r = orig_gs(*a, **k)
        cur["genScore"] += time.perf_counter() - t0
        cur["cgenScore"] += time.process_time() - c0
        cur["lengths"] += [int(x) for x in r["completion_mask"].sum(dim=1).tolist()]
        return r

    trainer._generate = timed_gen
    trainer._generate_and_score_completions = timed_gs
    records = []

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            cur.update(gen=0.0, genScore=0.0, cgen=0.0, cgenScore=0.0, lengths=[], t0=time.perf_counter(),
                       c0=time.process_time())

        def on_step_end(self, a, state, control, **kw):
            s = time.perf_counter() - cur["t0"]
            cpu = time.process_time() - cur["c0"]
            records.append({"step": s, "cpu": cpu, "cpuPhases": {"generate": cur["cgen"], "score": cur["cgenScore"] - cur["cgen"],
                                                              "update": cpu - cur["cgenScore"]},
                            "generate": cur["gen"], "score": cur["genScore"] - cur["gen"],
                            "update": s - cur["genScore"], "completionLengths": cur["lengths"]})
            log(f"{'warm-up' if len(records) <= warmup else 'step'} {len(records)}: {s:.2f} s, CPU {cpu:.2f} s "
                f"(generate {cur['gen']:.2f}, score {cur['genScore'] - cur['gen']:.2f}, update {s - cur['genScore']:.2f})")

    trainer.add_callback(Clock())
    log(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); {len(prompts)} prompts of {prompt_lengths} tokens")
    trainer.train()
    matmul = bench_matmul(torch, [tuple(x) for x in spec.get("matmulSizes", [])])
    result = {
        "ok": True,
        "threads": torch.get_num_threads(),
        "loadSeconds": load_seconds,
        "warmup": warmup,
        "steps": records[warmup:],
        "warmupSteps": records[:warmup],
        "promptLengths": prompt_lengths,
        "maxRssBytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "matmul": matmul,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "peft": peft.__version__, "trl": trl.__version__, "python": sys.version.split()[0]},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--probe":
        sys.exit(probe())
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
