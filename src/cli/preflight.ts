/**
 * The CLI's check before loading, the same one the app makes (src/worker/sources.ts checkMemory): from a model
 * folder's config.json alone — no weight is read — estimate what the command will hold (src/core/model/size.ts)
 * and refuse, in words, a run that cannot fit the backend's budget, instead of crashing inside the WASM heap.
 *
 * Budgets (docs/formats.md §8):
 * - `wasm`: 95% of the tfjs WASM heap's 4 GiB maximum (WASM_HEAP_RUN_SHARE of WASM_HEAP_BYTES, ≈ 4.1 GB, the
 *   app's number), held against what the heap will reach, not against tensor bytes: a training run's estimate on
 *   WASM counts autodiff's kept copies as the buffers they share there and adds XNNPACK's packed weights
 *   (RunMemoryOptions.heap; docs/engine.md "The WASM heap estimate"); generation's and SFT's estimates add the packed
 *   weights. The rest is the rollout, the allocator's slack and short-lived tensors.
 * - `cpu` (and any other backend): 60% of this machine's memory (os.totalmem(), DEVICE_MEMORY_SHARE, as the app
 *   takes 60% of navigator.deviceMemory).
 */
import os from 'node:os';
import * as tf from '@tensorflow/tfjs-core';
import { derived, validateConfig, type TrainConfig } from '../common/config';
import { readConfig } from '../core/model/folder';
import type { LMConfig } from '../core/model/config';
import { encodePrompt, tokenizerForFolder } from '../core/tokenizer';
import { resolvePrompts, type Resources } from '../core/ppo/setup';
import { bucket, vocabChunking } from '../core/ppo/trainer';
import { currentPlanDevice } from '../core/ppo/gpu-plan';
import { LORA_TARGETS } from '../core/model/lora';
import {
  DEVICE_MEMORY_SHARE,
  estimateGenerateMemory,
  estimateRunMemory,
  estimateSequenceTrainingMemory,
  fittingMicroBatch,
  fixedBytes,
  formatEstimate,
  formatGB,
  microBatchRemedy,
  paramCount,
  runMemoryOptions,
  runShapeOf,
  deviceFallbackFloor,
  WASM_HEAP_BYTES,
  WASM_HEAP_RUN_SHARE,
  withPackedWeights,
  type MemoryEstimate,
  type RunMemoryOptions,
  type VocabChunking,
  WEBGPU_MEMORY_OPTIONS,
} from '../core/model/size';
import { UserError } from '../common/errors';
import { assertFolder, nodeFiles, readJsonFile } from './files-node';
import { PRESETS, resolveModel } from './models';
import { wasmFusedBlocksHere } from '../core/kernels/wasm-activations';

export interface MemoryBudget {
  bytes: number;
  /** How the budget was set, for the message: "the WASM heap allows 3.2 GB (75% of its 4.3 GB maximum)". */
  what: string;
  backend: string;
}

/** The budget of a backend in this process. `totalMemory` for tests (default os.totalmem()). */
export function memoryBudget(backend: string = tf.getBackend(), totalMemory = os.totalmem()): MemoryBudget {
  if (backend === 'wasm') {
    const bytes = WASM_HEAP_BYTES * WASM_HEAP_RUN_SHARE;
    return {
      bytes,
      backend,
      what: `the WASM heap allows ${formatGB(bytes)} (${Math.round(WASM_HEAP_RUN_SHARE * 100)}% of its ${formatGB(WASM_HEAP_BYTES)} maximum)`,
    };
  }
  const bytes = totalMemory * DEVICE_MEMORY_SHARE;
  return {
    bytes,
    backend,
    what: `the ${backend} backend may use ${formatGB(bytes)} (${Math.round(DEVICE_MEMORY_SHARE * 100)}% of this machine's ${formatGB(totalMemory)})`,
  };
}

/** The model's name as a person wrote it, with its shape: "gpt2-folder (124.4 M parameters)". */
function modelLabel(name: string, c: LMConfig): string {
  return `${name} (${(paramCount(c) / 1e6).toFixed(1)} M parameters)`;
}

/** What a run of `cfg` builds: LoRA and the value model from the config when it has those keys. */

function refuse(subject: string, e: MemoryEstimate, budget: MemoryBudget, remedies: string[]): UserError {
  const fixed = fixedBytes(e);
  const need =
    fixed > budget.bytes
      ? `≈ ${formatGB(fixed)} of weights, gradients and optimiser state alone (in all ${formatEstimate(e)})`
      : `${formatEstimate(e)}, with the activations of its batch`;
  return new UserError(`${subject} needs ${need}; ${budget.what}. ${remedies.join(' ')}`.trim());
}

/** The largest batch size (a multiple of miniBatches, ≤ the configured one) whose estimate fits, or 0. */
function largestFittingBatch(
  config: LMConfig,
  cfg: TrainConfig,
  promptLength: number,
  opts: RunMemoryOptions,
  budget: number,
  vocabChunk: VocabChunking,
): number {
  for (let b = cfg.batchSize - cfg.miniBatches; b >= cfg.miniBatches; b -= cfg.miniBatches) {
    const shape = runShapeOf(config, { ...cfg, batchSize: b }, promptLength, opts, vocabChunk);
    if (estimateRunMemory(config, shape, opts).total <= budget) return b;
  }
  return 0;
}

/**
 * `train`: refuse a run that cannot fit, from the model's config.json, the task's prompts and the config alone.
 * Returns the estimate (printed by the caller, or ignored).
 */
export async function preflightTrain(
  cfg: TrainConfig,
  res: Resources,
  budget: MemoryBudget = memoryBudget(),
): Promise<MemoryEstimate> {
  const files = res.modelFiles(cfg.model);
  const config = await readConfig(files);
  // The prompts set the query length (the trainer pads them to a multiple of 8); the tokenizer needs no weights.
  const { prompts, taskReward } = await resolvePrompts(cfg, res);
  const tok = await tokenizerForFolder(files, config);
  const longest = Math.max(1, ...prompts.map((p) => encodePrompt(tok, p, cfg.chatTemplate).length));
  const promptLength = bucket(longest, Math.max(1, config.n_positions - cfg.responseLength));
  const spec: unknown = cfg.reward ?? taskReward;
  const rewardModel = !!spec && typeof spec === 'object' && 'model' in spec;
  // On WASM: what the heap will reach (shared tape copies, XNNPACK's packed weights), as the budget counts it.
  const onHeap = (o: RunMemoryOptions): RunMemoryOptions =>
    budget.backend === 'wasm'
      ? { ...o, heap: 'wasm', fusedBlocks: wasmFusedBlocksHere() }
      : budget.backend === 'webgpu'
        ? { ...o, ...WEBGPU_MEMORY_OPTIONS }
        : o;
  const opts = onHeap(runMemoryOptions(cfg, rewardModel));
  const vocabChunk = vocabChunking(config.vocab_size, budget.backend);
  // On WebGPU the device's plan (the whole minibatch; smaller only when the device runs out: core/ppo/gpu-plan.ts).
  const device = budget.backend === 'webgpu' ? currentPlanDevice() : undefined;
  const run = runShapeOf(config, cfg, promptLength, opts, vocabChunk, device);
  const e = estimateRunMemory(config, run, opts);
  if (e.total <= budget.bytes) return e;
  // That plan falls back to smaller micro-batches when the device runs out: refused only if even the smallest won't fit.
  if (device && estimateRunMemory(config, deviceFallbackFloor(run, cfg), opts).total <= budget.bytes)
    return e;

  const remedies: string[] = [];
  const fit = fixedBytes(e) <= budget.bytes ? fittingMicroBatch(config, run, opts, budget.bytes) : null;
  if (fit) {
    remedies.push(`${microBatchRemedy(fit, run)}.`);
  } else if (fixedBytes(e) <= budget.bytes) {
    const b = largestFittingBatch(config, cfg, promptLength, opts, budget.bytes, vocabChunk);
    remedies.push(
      b > 0
        ? `batchSize ${b} would fit (or lower responseLength, or raise miniBatches from ${cfg.miniBatches}: the activations grow with batchSize / miniBatches).`
        : `Lower responseLength or raise miniBatches (now ${cfg.miniBatches}, ${derived(cfg).miniBatchSize} sequences each).`,
    );
  } else {
    const full = opts.lora === undefined;
    if (full && 'lora' in cfg) {
      // As buildTrainer would build it: a shared value model on the same base (valueModel's default).
      const withLora = estimateRunMemory(
        config,
        run,
        onHeap(
          runMemoryOptions(
            { ...cfg, lora: 8, loraTargets: [...LORA_TARGETS], valueModel: 'shared' },
            rewardModel,
          ),
        ),
      );
      remedies.push(
        `Use LoRA (\`"lora": 8\`: one frozen base, Adam on the adapters only, ≈ ${formatGB(withLora.total)})` +
          (withLora.total <= budget.bytes ? '' : ' with a smaller batch') +
          ',',
      );
    }
    if (opts.valueModel === 'separate' && 'algorithm' in cfg) {
      const critic = estimateRunMemory(config, run, { ...opts, valueModel: 'none' });
      remedies.push(
        `a critic-free algorithm (\`"algorithm": "grpo"\`: no value model, ≈ ${formatGB(critic.total)}),`,
      );
    }
    if (budget.backend === 'wasm') {
      const cpu = memoryBudget('cpu');
      remedies.push(
        `\`--backend cpu\` (not bound by the WASM heap; ${cpu.what}${e.total <= cpu.bytes ? ': it fits' : ': too small too'}),`,
      );
    }
    remedies.push('or a smaller model (e.g. distilbert/distilgpt2 or tiny).');
    if (remedies.length > 1) remedies[0] = remedies[0].replace(/^./, (ch) => ch.toUpperCase());
    else remedies[0] = 'Choose a smaller model (e.g. distilbert/distilgpt2 or tiny).';
  }
  const how = opts.lora ? `with LoRA r=${opts.lora.r}` : 'with full copies';
  throw refuse(`Training ${modelLabel(cfg.model, config)} ${how}`, e, budget, remedies);
}

/** `train --resume CKPT`: the checkpoint's own config (trainer_state.json) and model shape (config.json). */
export async function preflightResume(
  dir: string,
  res: Resources,
  budget: MemoryBudget = memoryBudget(),
): Promise<MemoryEstimate | null> {
  const files = nodeFiles(dir);
  const raw = await files.read('trainer_state.json');
  if (!raw) return null; // restoreTrainer says what is missing
  let state: { config?: unknown };
  try {
    state = JSON.parse(new TextDecoder().decode(raw)) as { config?: unknown };
  } catch {
    return null;
  }
  let cfg: TrainConfig;
  try {
    cfg = validateConfig(state.config, `${dir}/trainer_state.json config`);
  } catch {
    return null; // restoreTrainer reports a broken state in its own words
  }
  return preflightTrain(
    cfg,
    { ...res, modelFiles: (name) => (name === cfg.model ? files : res.modelFiles(name)) },
    budget,
  );
}

/**
 * One entry point for `train` (one line in src/cli/train.ts, after the backend is set): a fresh run's config file
 * or a checkpoint to resume. Reads JSON and config.json only.
 */
export async function preflightTrainCommand(
  o: { cfgPath?: string; resume?: string },
  res: Resources,
  budget: MemoryBudget = memoryBudget(),
): Promise<void> {
  if (o.resume) {
    await preflightResume(o.resume, res, budget);
    return;
  }
  if (!o.cfgPath) return;
  const cfg = validateConfig(await readJsonFile(o.cfgPath, 'config'), o.cfgPath);
  if (!(cfg.model in PRESETS)) await assertFolder(resolveModel(cfg.model));
  await preflightTrain(cfg, res, budget);
}

/** `generate`: one model's weights, the KV cache for the prompt and the new tokens. */
export async function preflightGenerate(
  model: string,
  o: { prompt: string; maxNewTokens: number },
  budget: MemoryBudget = memoryBudget(),
): Promise<MemoryEstimate> {
  const modelFiles = nodeFiles(resolveModel(model));
  const config = await readConfig(modelFiles);
  const promptLength = Math.max(1, (await tokenizerForFolder(modelFiles, config)).encode(o.prompt).length);
  const tensors = estimateGenerateMemory(
    config,
    { batchSize: 1, promptLength, maxNewTokens: o.maxNewTokens },
    { inPlaceCache: budget.backend === 'webgpu' },
  );
  const e = budget.backend === 'wasm' ? withPackedWeights(tensors, config) : tensors;
  if (e.total > budget.bytes) {
    const remedies =
      budget.backend === 'wasm'
        ? 'Use `--backend cpu`, fewer --max-new-tokens, or a smaller model.'
        : 'Use fewer --max-new-tokens or a smaller model.';
    throw refuse(`Generating with ${modelLabel(model, config)}`, e, budget, [remedies]);
  }
  return e;
}

/** `sft` and `train-reward`: one trainable model over `sequences` sequences of `seqLen` tokens. */
export function preflightSequenceTraining(
  what: string,
  model: string,
  config: LMConfig,
  o: { sequences: number; seqLen: number; head: 'lm' | 'scalar' },
  budget: MemoryBudget = memoryBudget(),
): MemoryEstimate {
  const tensors = estimateSequenceTrainingMemory(config, o);
  const e = budget.backend === 'wasm' ? withPackedWeights(tensors, config) : tensors;
  if (e.total > budget.bytes) {
    const remedies = [
      fixedBytes(e) <= budget.bytes ? `Lower batchSize${o.head === 'lm' ? ' or seqLen' : ''}, ` : '',
      budget.backend === 'wasm' ? 'use `--backend cpu`, ' : '',
      'or choose a smaller model.',
    ];
    throw refuse(`${what} ${modelLabel(model, config)}`, e, budget, [
      remedies.join('').replace(/^./, (c) => c.toUpperCase()),
    ]);
  }
  return e;
}

/** `sft` from a model folder (an `init` config is checked the same way by the caller, before building it). */
export async function preflightSft(
  model: string,
  o: { batchSize: number; seqLen: number },
  budget: MemoryBudget = memoryBudget(),
): Promise<MemoryEstimate> {
  const modelFiles = nodeFiles(resolveModel(model));
  const config = await readConfig(modelFiles);
  return preflightSequenceTraining(
    'SFT of',
    model,
    config,
    { sequences: o.batchSize, seqLen: o.seqLen + 1, head: 'lm' },
    budget,
  );
}

/**
 * `train-reward`: the scalar model over 2 · batchSize sequences (chosen and rejected) as long as the longest
 * pair (prompt + response + EOS, padded to a multiple of 8, at most n_positions).
 */
export async function preflightTrainReward(
  model: string,
  o: { batchSize: number; pairs: { prompt: string; chosen: string; rejected: string }[] },
  budget: MemoryBudget = memoryBudget(),
): Promise<MemoryEstimate> {
  const modelFiles = nodeFiles(resolveModel(model));
  const config = await readConfig(modelFiles);
  const tok = await tokenizerForFolder(modelFiles, config);
  let longest = 1;
  for (const p of o.pairs) {
    const q = tok.encode(p.prompt).length;
    longest = Math.max(longest, q + tok.encode(p.chosen).length + 1, q + tok.encode(p.rejected).length + 1);
  }
  const seqLen = bucket(longest, config.n_positions);
  return preflightSequenceTraining(
    'Training a reward model on',
    model,
    config,
    { sequences: 2 * o.batchSize, seqLen, head: 'scalar' },
    budget,
  );
}
