# Runs TRL's own trainers for two optimiser steps from PPO Playground export files (argv): GRPOTrainer,
# RLOOTrainer or DPOTrainer, as each file's _trl_class says, on a tiny random GPT-2 with a character tokenizer
# built here (nothing is downloaded). The config is the exported one as written, less the "_" keys, with only
# output_dir, max_steps (2), report_to and saving changed; peft_config is passed as the trainer's peft_config.
# Prints one JSON line: {"trl": version, "runs": [{"file", "class", "steps", "loss", "seconds"}]}.
# Used by tests/exports-trl-run.test.ts (issue #34) where a python with trl is present.
import json
import math
import os
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import torch  # noqa: E402

torch.set_num_threads(1)
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Regex, Tokenizer, models, pre_tokenizers  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast  # noqa: E402


def tiny_model_and_tokenizer():
    chars = list("abcdefghijklmnopqrstuvwxyz .,!?")
    specials = ["<pad>", "<eos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", bos_token="<eos>"
    )
    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=len(vocab), n_positions=128, n_embd=16, n_layer=2, n_head=2,
        bos_token_id=1, eos_token_id=1, pad_token_id=0,
    )
    return GPT2LMHeadModel(cfg), hf_tok


def reward_len(completions, **kwargs):
    return [float(len(c)) / 10.0 for c in completions]


def main(paths):
    out = {"trl": trl.__version__, "runs": []}
    for path in paths:
        d = json.load(open(path))
        cls_name = d["_trl_class"]
        kw = {k: v for k, v in d.items() if not k.startswith("_") and k != "peft_config"}
        tmp = tempfile.mkdtemp(prefix="trl-two-steps-")
        kw.update(output_dir=tmp, max_steps=2, report_to="none", save_strategy="no", logging_steps=1)
        kw.pop("save_steps", None)
        if "eval_strategy" in kw:
            kw["eval_strategy"] = "no"
            kw.pop("eval_steps", None)
        args = getattr(trl, cls_name)(**kw)
        model, tok = tiny_model_and_tokenizer()
        # Saved and passed by path, as a user would: the trainers load their reference copy from it.
        model_dir = os.path.join(tmp, "model")
        model.save_pretrained(model_dir)
        tok.save_pretrained(model_dir)
        model = model_dir
        peft = None
        if "peft_config" in d:
            from peft import LoraConfig

            peft = LoraConfig(**d["peft_config"])
        t0 = time.time()
        if cls_name == "DPOConfig":
            ds = Dataset.from_list(
                [{"prompt": "the film was", "chosen": " good.", "rejected": " bad!"}] * 16
            )
            trainer = trl.DPOTrainer(model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=peft)
        else:
            ds = Dataset.from_list([{"prompt": p} for p in ["the film was", "i think", "a day", "we saw"] * 8])
            Trainer = trl.GRPOTrainer if cls_name == "GRPOConfig" else trl.RLOOTrainer
            trainer = Trainer(
                model=model, reward_funcs=reward_len, args=args, train_dataset=ds, processing_class=tok,
                peft_config=peft,
            )
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        out["runs"].append(
            {
                "file": path,
                "class": cls_name,
                "steps": trainer.state.global_step,
                "loss": losses[-1] if losses and math.isfinite(losses[-1]) else None,
                "seconds": round(time.time() - t0, 2),
            }
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
