/**
 * The CLI's memory check before loading (src/cli/preflight.ts): a GPT-2-124M-shaped run is refused in words
 * from config.json alone — the folder here has no model.safetensors at all, so any read of the weights would
 * fail with a missing-file error instead of this refusal — and what fits passes.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, writeFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { validateConfig } from '../src/common/config';
import { isUserError } from '../src/common/errors';
import {
  memoryBudget,
  preflightGenerate,
  preflightSft,
  preflightTrain,
  preflightTrainReward,
} from '../src/cli/preflight';
import { nodeResources } from '../src/cli/train';
import { WASM_HEAP_BYTES } from '../src/core/model/size';
import { LLAMA_SHAPES } from '../src/core/model/llama-config';
import { spawnAsync } from './helpers/spawn';
import { heapStepRun } from '../scripts/wasm-heap-step';

/** GPT-2 124M's config.json as the Hub serves it (openai-community/gpt2). */
const GPT2_CONFIG = {
  activation_function: 'gelu_new',
  architectures: ['GPT2LMHeadModel'],
  attn_pdrop: 0.1,
  bos_token_id: 50256,
  embd_pdrop: 0.1,
  eos_token_id: 50256,
  initializer_range: 0.02,
  layer_norm_epsilon: 1e-5,
  model_type: 'gpt2',
  n_ctx: 1024,
  n_embd: 768,
  n_head: 12,
  n_layer: 12,
  n_positions: 1024,
  resid_pdrop: 0.1,
  summary_activation: null,
  summary_first_dropout: 0.1,
  summary_proj_to_labels: true,
  summary_type: 'cls_index',
  summary_use_proj: true,
  task_specific_params: { 'text-generation': { do_sample: true, max_length: 50 } },
  vocab_size: 50257,
};

let dir: string;
let gpt2: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'ppo-preflight-'));
  gpt2 = path.join(dir, 'gpt2');
  spawnSync('mkdir', [gpt2]);
  writeFileSync(path.join(gpt2, 'config.json'), JSON.stringify(GPT2_CONFIG));
});

async function messageOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (e) {
    expect(isUserError(e)).toBe(true);
    return (e as Error).message;
  }
  return '';
}

const wasm = memoryBudget('wasm');
const ppo = (over: Record<string, unknown> = {}) =>
  validateConfig({ model: gpt2, task: 'sentiment', batchSize: 4, responseLength: 8, ...over }, 'c.json');

describe('budgets', () => {
  it("WASM: 95% of the heap's maximum, held against the heap estimate (the app's number); cpu: 60% of the machine's memory", () => {
    expect(wasm.bytes).toBe(WASM_HEAP_BYTES * 0.95);
    expect(wasm.what).toBe('the WASM heap allows 4.1 GB (95% of its 4.3 GB maximum)');
    const cpu = memoryBudget('cpu', 16e9);
    expect(cpu.bytes).toBe(9.6e9);
    expect(cpu.what).toBe("the cpu backend may use 9.6 GB (60% of this machine's 16.0 GB)");
  });
});

describe('train', () => {
  it('refuses GPT-2 124M with full copies on the WASM budget, naming the estimate, the budget and what would fit', async () => {
    const msg = await messageOf(preflightTrain(ppo(), nodeResources, wasm));
    expect(msg).toMatch(
      /^Training .*gpt2 \(124\.4 M parameters\) with full copies needs ≈ 5\.6 GB of weights, gradients and optimiser state alone \(in all ≈ \d\.\d GB: policy 0\.50, reference 0\.50, value 0\.50, Adam 1\.99, gradients 1\.00, activations \d\.\d\d, packed weights 1\.02, heap growth 0\.10 GB\); the WASM heap allows 4\.1 GB \(95% of its 4\.3 GB maximum\)\./,
    );
    expect(msg).toMatch(/`--backend cpu` \(not bound by the WASM heap; /);
    expect(msg).toMatch(/or a smaller model \(e\.g\. distilbert\/distilgpt2 or tiny\)\.$/);
    expect(msg).not.toMatch(/safetensors/);
    // The LoRA remedy is estimated as buildTrainer builds it (a shared value model on the one base), so it fits:
    // it used to count a separate full value model and say "≈ 3.4 GB with a smaller batch".
    const lora =
      /Use LoRA \(`"lora": 8`: one frozen base, Adam on the adapters only, ≈ (\d+\.\d) GB\)(,| with)/.exec(
        msg,
      );
    expect(lora, msg).not.toBeNull();
    expect(Number(lora![1])).toBeLessThan(4.1);
    expect(lora![2]).toBe(',');
  });

  it('passes GPT-2 on a budget that holds it, and suggests a batch size when only the activations are too big', async () => {
    const big = { bytes: 64e9, what: 'the cpu backend may use 64.0 GB', backend: 'cpu' };
    const e = await preflightTrain(ppo(), nodeResources, big);
    expect(e.total).toBeGreaterThan(4.5e9);
    // A budget between the fixed part and the total at batch 64: a smaller batch is named that fits.
    const cfg = ppo({ batchSize: 64, miniBatches: 1, responseLength: 64 });
    const at64 = await preflightTrain(cfg, nodeResources, big);
    const tight = { bytes: (at64.total + 4.5e9) / 2, what: 'a test budget', backend: 'cpu' };
    const msg = await messageOf(preflightTrain(cfg, nodeResources, tight));
    expect(msg).toMatch(
      /^Training .* with full copies needs ≈ \d+\.\d GB: .*, with the activations of its batch; a test budget\. batchSize (\d+) would fit/,
    );
    const b = Number(/batchSize (\d+) would fit/.exec(msg)![1]);
    expect(b).toBeGreaterThan(0);
    expect(b).toBeLessThan(64);
    expect(
      await messageOf(
        preflightTrain(ppo({ batchSize: b, miniBatches: 1, responseLength: 64 }), nodeResources, tight),
      ),
    ).toBe('');
  });
});

describe('train: the Llama families on the WASM heap (config.json and the tokenizer only, no weights)', () => {
  /** A folder with the published shape's config.json and the 512-id ChatML tokenizer, and no model.safetensors. */
  function shapeFolder(name: 'qwen2.5-0.5b' | 'qwen3-0.6b' | 'smollm2-135m'): string {
    const d = path.join(dir, name);
    mkdirSync(d, { recursive: true });
    const config = { ...LLAMA_SHAPES[name], bos_token_id: 510, eos_token_id: 511, pad_token_id: 509 };
    writeFileSync(path.join(d, 'config.json'), JSON.stringify(config));
    for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json'])
      copyFileSync(path.join('tests/fixtures/hf-tokenizer', f), path.join(d, f));
    return d;
  }
  // tests/qwen-0.5b.slow.test.ts's run (scripts/wasm-heap-step.ts), as a config file gives it.
  const grpo = (model: string) => validateConfig(heapStepRun(model), 'c.json');

  it('Qwen2.5-0.5B LoRA GRPO (batch 4, 16 tokens): accepted; the heap estimate counts the packed weights', async () => {
    // Measured in-process (tests/qwen-0.5b.slow.test.ts): the heap reached 3.72 GB of its 4.29 GB. Held to 75% of
    // the heap in tensor bytes (3.34 GB, counting autodiff's copies of the embedding that WASM shares) it was
    // refused; as the heap counts it, it fits.
    const e = await preflightTrain(grpo(shapeFolder('qwen2.5-0.5b')), nodeResources, wasm);
    expect(e.parts.packed).toBe(4 * 357_826_560);
    expect(e.total).toBeGreaterThan(3.72e9);
    expect(e.total).toBeLessThan(wasm.bytes);
    const smol = await preflightTrain(grpo(shapeFolder('smollm2-135m')), nodeResources, wasm);
    expect(smol.total).toBeLessThan(1.5e9);
  });

  it('Qwen3-0.6B: refused in words (its 2.4 GB of weights and 1.7 GB packed do not fit the heap)', async () => {
    const msg = await messageOf(preflightTrain(grpo(shapeFolder('qwen3-0.6b')), nodeResources, wasm));
    expect(msg).toMatch(
      /^Training .*qwen3-0\.6b \(596\.0 M parameters\) with LoRA r=8 needs ≈ 4\.\d GB of weights, gradients and optimiser state alone \(in all ≈ \d\.\d GB: base 2\.38, .*packed weights 1\.7\d, heap growth 0\.10 GB\); the WASM heap allows 4\.1 GB \(95% of its 4\.3 GB maximum\)\./,
    );
    expect(msg).toMatch(/`--backend cpu` \(not bound by the WASM heap; /);
  });
});

describe('generate, sft, train-reward', () => {
  it('generate: GPT-2 (0.5 GB of weights, 0.34 GB packed by XNNPACK) fits the WASM budget; a budget below its weights refuses', async () => {
    const e = await preflightGenerate(gpt2, { prompt: 'The movie was', maxNewTokens: 40 }, wasm);
    expect(e.parts.base).toBe(124_439_808 * 4);
    // The blocks' matrices: 12 · (768 · 2304 + 768 · 768 + 2 · 768 · 3072) floats.
    expect(e.parts.packed).toBe(4 * 12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072));
    const msg = await messageOf(
      preflightGenerate(gpt2, { prompt: 'The movie was', maxNewTokens: 40 }, { ...wasm, bytes: 0.4e9 }),
    );
    expect(msg).toMatch(
      /^Generating with .*gpt2 \(124\.4 M parameters\) needs ≈ 0\.8 GB of weights, gradients and optimiser state alone \(in all ≈ 0\.8 GB: policy 0\.50, activations 0\.01, packed weights 0\.34 GB\)/,
    );
    expect(msg).toMatch(/Use `--backend cpu`, fewer --max-new-tokens, or a smaller model\.$/);
  });

  it('sft and train-reward: GPT-2 fits at small batches on WASM, and is refused in words at large ones', async () => {
    expect(await messageOf(preflightSft(gpt2, { batchSize: 2, seqLen: 32 }, wasm))).toBe('');
    // Batch 1 at seqLen 64: the 2.0 GB of weights, Adam and gradients, 0.34 GB of XNNPACK's packed weights, plus
    // their activations fit the heap's 4.1 GB.
    expect(await messageOf(preflightSft(gpt2, { batchSize: 1, seqLen: 64 }, wasm))).toBe('');
    // Batch 2 at seqLen 64: 13 logits-sized tensors of 2 · 65 · 50257 floats (the log-softmax's, the copies
    // autodiff keeps, their gradients) and 4 of wte's size (the gather's and the tied head's copies of wte and
    // their gradients of it) besides the forward: ≈ 3.7 GB of tensors, 1.66 GB of it activations, and the packed
    // weights: 4.0 GB, just inside the heap's 4.1 GB (the copies are counted although WASM shares them).
    expect(await messageOf(preflightSft(gpt2, { batchSize: 2, seqLen: 64 }, wasm))).toBe('');
    // Batch 4 at seqLen 64 (the failure seen in a fast-tier run) is refused: 2.71 GB of activations.
    expect(await messageOf(preflightSft(gpt2, { batchSize: 4, seqLen: 64 }, wasm))).toMatch(
      /^SFT of .*gpt2 \(124\.4 M parameters\) needs ≈ 5\.0 GB: policy 0\.50, Adam 1\.00, gradients 0\.50, activations 2\.71, packed weights 0\.34 GB, with the activations of its batch; the WASM heap allows 4\.1 GB/,
    );
    expect(await messageOf(preflightSft(gpt2, { batchSize: 64, seqLen: 512 }, wasm))).toMatch(
      /^SFT of .*gpt2 \(124\.4 M parameters\) needs ≈ \d+\.\d GB: .*activations .* GB, with the activations of its batch; the WASM heap allows 4\.1 GB .*\. Lower batchSize or seqLen, use `--backend cpu`, or choose a smaller model\.$/,
    );
    const pairs = [{ prompt: 'The movie was', chosen: ' great fun', rejected: ' dull' }];
    expect(await messageOf(preflightTrainReward(gpt2, { batchSize: 8, pairs }, wasm))).toBe('');
    const long = [{ prompt: 'word '.repeat(400), chosen: 'yes '.repeat(400), rejected: 'no '.repeat(400) }];
    expect(await messageOf(preflightTrainReward(gpt2, { batchSize: 64, pairs: long }, wasm))).toMatch(
      /^Training a reward model on .*gpt2 \(124\.4 M parameters\) needs/,
    );
  });
});

describe('the CLI itself', () => {
  it('train: a GPT-2 config.json without any weights file is refused for memory, exit 1, no stack, in seconds', async () => {
    const cfgPath = path.join(dir, 'c.json');
    writeFileSync(
      cfgPath,
      JSON.stringify({ model: gpt2, task: 'sentiment', batchSize: 4, responseLength: 8 }),
    );
    const t0 = Date.now();
    const r = await spawnAsync(
      process.execPath,
      [
        '--import',
        'tsx',
        'src/cli/main.ts',
        'train',
        '--config',
        cfgPath,
        '--out',
        path.join(dir, 'run'),
        '--json',
      ],
      { timeout: 120_000 },
    );
    expect(r.status, r.stderr).toBe(1);
    expect(r.stderr).toMatch(
      /^error: Training .*gpt2 \(124\.4 M parameters\) with full copies needs ≈ 5\.6 GB/,
    );
    expect(r.stderr).toMatch(/the WASM heap allows 4\.1 GB/);
    expect(r.stderr).not.toMatch(/internal error|RuntimeError|safetensors|\n {4}at /);
    expect(r.stdout).toBe('');
    expect(readdirSync(gpt2)).toEqual(['config.json']);
    expect(Date.now() - t0).toBeLessThan(60_000);
  }, 120_000);
});
