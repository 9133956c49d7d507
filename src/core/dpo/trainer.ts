/**
 * DPO training (contracts §9; docs/dpo.md): a policy trained on preference pairs against a fixed reference — the
 * base with its adapters off under LoRA (one copy of the base weights), else a frozen copy of the starting
 * weights. The reference's summed log-probabilities of every pair's chosen and rejected completions are computed
 * once when the run is built (or restored) and cached. Each step draws `batchSize` training pairs (a seeded
 * shuffle, reshuffled each pass), runs the policy over them in micro-batches (gradients summed, one clipped Adam
 * step: ppo/update.ts), and records the loss and TRL's metrics of that forward pass. Held-out pairs are evaluated
 * every `evalEvery` steps and at the last step (no random draw: evaluation never touches the training stream).
 * Checkpoints (dpo_state.json beside the model files) resume exactly.
 */
import * as tf from '@tensorflow/tfjs-core';
import type { CausalLM } from '../model/causal-lm';
import {
  loadLM,
  configBytes,
  lmSafetensorsStream,
  type ModelFiles,
  type ModelLoadOptions,
} from '../model/folder';
import { LoraAdapters } from '../model/lora';
import { adapterFiles, readAdapterSet } from '../model/peft';
import { readSafetensors, writeSafetensors, type FileBody, type NamedTensor } from '../model/safetensors';
import type { Tokenizer } from '../tokenizer/types';
import { FusedAdamOptimizer } from '../optim/fused-adam';
import { jointGuardedStep } from '../ppo/update';
import { logprobsFromLogits } from '../ppo/losses';
import { Rng } from '../base/rng';
import { UserError } from '../../common/errors';
import { allFinite } from '../optim/optim';
import { dpoLoss, DPO_METRICS, type DpoMetric } from './loss';
import { batchOf, readPairs, splitIndices, tokenizePairs, type TokenizedPair } from './data';
import { validateDpoConfig, type DpoConfig } from '../../common/config/dpo';
import { forwardShareOf, prefixShare, responseHidden, sharedPrefixDefault } from '../model/shared-prefix';

export const DPO_STATE_FILE = 'dpo_state.json';
export const DPO_FORMAT = 'ppo-playground-dpo/1';

/** One metrics.jsonl line of a DPO run. */
export type DpoStepMetrics = { step: number; loss: number; gradNorm: number; timeStep: number } & Record<
  DpoMetric,
  number
> &
  Partial<Record<'eval/loss' | 'eval/rewards/accuracies' | 'eval/rewards/margins', number>>;

interface DpoState {
  format: string;
  step: number;
  config: DpoConfig;
  rng: number[];
  order: number[];
  cursor: number;
  history: DpoStepMetrics[];
}

/**
 * Summed log-probabilities (temperature 1) of each completion of a batch: [2k] (chosen of each pair, then rejected).
 * `share`: a pair's chosen and rejected rows (and any pairs with the same prompt) run their prompt once
 * (model/shared-prefix.ts, docs/engine.md "A group's prompt, once").
 */
export function completionLogps(model: CausalLM, b: ReturnType<typeof batchOf>, share = true): tf.Tensor1D {
  const shared = share ? prefixShare(b.ids, b.attn, b.n, b.T, b.Tq) : null;
  return tf.tidy(() => {
    const ids = tf.tensor2d(b.ids, [b.n, b.T], 'int32');
    const attn = tf.tensor2d(b.attn, [b.n, b.T], 'int32');
    const h = responseHidden(model, ids, attn, b.Tq, b.R, {
      share: shared ? forwardShareOf(shared) : null,
    });
    const lp = logprobsFromLogits(model.lmHead(h), tf.tensor1d(b.tokens, 'int32'), 1);
    return tf.sum(tf.mul(tf.reshape(lp, [b.n, b.R]), tf.tensor2d(b.mask, [b.n, b.R])), 1) as tf.Tensor1D;
  });
}

export interface DpoData {
  /** The preference JSONL text and its name (for messages). */
  text: string;
  source: string;
}

export class DpoTrainer {
  readonly opt: FusedAdamOptimizer;
  step = 0;
  history: DpoStepMetrics[] = [];
  rng: Rng;
  order: number[] = [];
  cursor = 0;
  /** Cached reference log-probabilities per pair (summed over the completion's tokens). */
  readonly refTrain: { chosen: number[]; rejected: number[] } = { chosen: [], rejected: [] };
  readonly refHeld: { chosen: number[]; rejected: number[] } = { chosen: [], rejected: [] };
  /**
   * Whether a pair's chosen and rejected completions run their common prompt once (sharedPrefixDefault: true
   * unless PPO_SHARED_PREFIX=0). The reference's cached log-probabilities are computed as the run is built.
   */
  sharedPrefix = sharedPrefixDefault();

  private constructor(
    readonly cfg: DpoConfig,
    readonly policy: CausalLM,
    readonly ref: CausalLM,
    readonly tokenizer: Tokenizer,
    readonly train: TokenizedPair[],
    readonly held: TokenizedPair[],
  ) {
    this.opt = new FusedAdamOptimizer(cfg.learningRate);
    this.rng = new Rng(cfg.seed);
  }

  /**
   * A new run from the model in `files` (its starting weights) and the pairs in `data`; `load` passes the
   * backend's load options (the worker's `maxBindingBytes` on WebGPU).
   */
  static async build(
    cfg: DpoConfig,
    files: ModelFiles,
    data: DpoData,
    load: ModelLoadOptions = {},
  ): Promise<DpoTrainer> {
    let policy: CausalLM;
    let ref: CausalLM;
    let tokenizer: Tokenizer;
    if (cfg.lora > 0) {
      const lm = await loadLM(files, { ...load, trainable: false, label: 'base' });
      tokenizer = lm.tokenizer;
      ref = lm.model;
      policy = ref.withLora(LoraAdapters.create(ref.config, cfg, cfg.seed, 'policy'), 'policy');
    } else {
      const lm = await loadLM(files, { ...load, trainable: true, label: 'policy' });
      policy = lm.model;
      tokenizer = lm.tokenizer;
      ref = policy.clone(false, 'ref');
    }
    return DpoTrainer.assemble(cfg, policy, ref, tokenizer, data);
  }

  private static async assemble(
    cfg: DpoConfig,
    policy: CausalLM,
    ref: CausalLM,
    tokenizer: Tokenizer,
    data: DpoData,
  ): Promise<DpoTrainer> {
    try {
      const pairs = tokenizePairs(
        readPairs(data.text, data.source),
        tokenizer,
        policy.config.n_positions,
        data.source,
      );
      const split = splitIndices(pairs.length, cfg.heldOut, cfg.seed);
      const t = new DpoTrainer(
        cfg,
        policy,
        ref,
        tokenizer,
        split.train.map((i) => pairs[i]),
        split.heldOut.map((i) => pairs[i]),
      );
      await t.referenceLogps(t.train, t.refTrain);
      await t.referenceLogps(t.held, t.refHeld);
      return t;
    } catch (e) {
      if (policy !== ref) policy.dispose();
      ref.dispose();
      throw e;
    }
  }

  /** The reference's summed log-probabilities of every pair's completions, once (cached). */
  private async referenceLogps(pairs: TokenizedPair[], into: { chosen: number[]; rejected: number[] }) {
    const chunk = Math.max(1, this.cfg.microBatchSize || this.cfg.batchSize);
    for (let s = 0; s < pairs.length; s += chunk) {
      const part = pairs.slice(s, s + chunk);
      const lp = completionLogps(this.ref, batchOf(part, this.tokenizer.padId), this.sharedPrefix);
      const host = await lp.data();
      lp.dispose();
      into.chosen.push(...host.slice(0, part.length));
      into.rejected.push(...host.slice(part.length));
    }
  }

  /** The next batch's training-pair indices: a seeded shuffle, reshuffled each pass. */
  private nextBatch(): number[] {
    const out: number[] = [];
    while (out.length < this.cfg.batchSize) {
      if (this.cursor >= this.order.length) {
        this.order = this.rng.permutation(this.train.length);
        this.cursor = 0;
      }
      out.push(this.order[this.cursor++]);
    }
    return out;
  }

  /** One DPO step; `evaluate` adds the held-out metrics (after the update). */
  async trainStep(evaluate: boolean): Promise<DpoStepMetrics> {
    const t0 = performance.now();
    const cfg = this.cfg;
    const rows = this.nextBatch();
    const mb = cfg.microBatchSize || cfg.batchSize;
    const micros = Math.ceil(rows.length / mb);
    const res = await jointGuardedStep<DpoMetric>(
      [
        {
          optimizer: this.opt,
          vars: this.policy.trainableVariables(),
          objective: (k) => {
            const idx = rows.slice(k * mb, (k + 1) * mb);
            const b = batchOf(
              idx.map((i) => this.train[i]),
              this.tokenizer.padId,
            );
            const lp = completionLogps(this.policy, b, this.sharedPrefix);
            const m = idx.length;
            const out = dpoLoss(
              tf.slice(lp, [0], [m]),
              tf.slice(lp, [m], [m]),
              idx.map((i) => this.refTrain.chosen[i]),
              idx.map((i) => this.refTrain.rejected[i]),
              {
                beta: cfg.beta,
                loss: cfg.dpoLoss,
                labelSmoothing: cfg.labelSmoothing,
                chosenTokens: idx.map((i) => this.train[i].chosen.length),
                rejectedTokens: idx.map((i) => this.train[i].rejected.length),
                pairs: rows.length,
              },
            );
            return { loss: out.loss, stats: out.metrics };
          },
        },
      ],
      cfg.maxGradNorm,
      { microBatches: micros },
    );
    if (!res.applied)
      throw new UserError(
        `DPO step ${this.step + 1}: the loss or gradient is not finite (NaN/Inf); lower learningRate or beta.`,
      );
    this.step++;
    const metrics = {
      step: this.step,
      loss: res.losses[0],
      ...Object.fromEntries(DPO_METRICS.map((k) => [k, res.stats[k]])),
      gradNorm: res.gradNorms[0],
      timeStep: 0,
    } as DpoStepMetrics;
    if (evaluate) Object.assign(metrics, await this.evaluate());
    metrics.timeStep = (performance.now() - t0) / 1000;
    this.history.push(metrics);
    return metrics;
  }

  /** The held-out pairs' loss, preference accuracy and margin under the current policy. */
  async evaluate(): Promise<
    Record<'eval/loss' | 'eval/rewards/accuracies' | 'eval/rewards/margins', number>
  > {
    const cfg = this.cfg;
    const chunk = Math.max(1, cfg.microBatchSize || cfg.batchSize);
    let loss = 0;
    let acc = 0;
    let margin = 0;
    for (let s = 0; s < this.held.length; s += chunk) {
      const part = this.held.slice(s, s + chunk);
      const m = part.length;
      const out = tf.tidy(() => {
        const lp = completionLogps(this.policy, batchOf(part, this.tokenizer.padId), this.sharedPrefix);
        const r = dpoLoss(
          tf.slice(lp, [0], [m]),
          tf.slice(lp, [m], [m]),
          this.refHeld.chosen.slice(s, s + m),
          this.refHeld.rejected.slice(s, s + m),
          {
            beta: cfg.beta,
            loss: cfg.dpoLoss,
            labelSmoothing: cfg.labelSmoothing,
            chosenTokens: part.map((p) => p.chosen.length),
            rejectedTokens: part.map((p) => p.rejected.length),
            pairs: this.held.length,
          },
        );
        return tf.stack([r.loss, r.metrics['rewards/accuracies'], r.metrics['rewards/margins']]);
      });
      const h = await out.data();
      out.dispose();
      loss += h[0];
      acc += h[1];
      margin += h[2];
    }
    return { 'eval/loss': loss, 'eval/rewards/accuracies': acc, 'eval/rewards/margins': margin };
  }

  /** The checkpoint's files (model weights streamed one tensor at a time: write them before the next step). */
  async checkpointSources(): Promise<Map<string, FileBody>> {
    if (!(await allFinite(this.policy.trainableVariables())))
      throw new UserError(`not writing a checkpoint at step ${this.step}: the weights hold NaN/Inf values.`);
    const files = new Map<string, FileBody>();
    files.set('config.json', configBytes(this.policy.config));
    files.set('model.safetensors', lmSafetensorsStream(this.policy)); // merged under LoRA
    if (this.policy.lora) {
      for (const [k, v] of await adapterFiles(this.policy.lora, this.cfg.model)) files.set(k, v);
    }
    if (this.step > 0) files.set('ref_model.safetensors', lmSafetensorsStream(this.ref, { keepF16: true }));
    const opt = await adamTensors(this.opt, this.policy.trainableVariables());
    if (opt.length) files.set('optimizer.safetensors', writeSafetensors(opt, { format: DPO_FORMAT }));
    const state: DpoState = {
      format: DPO_FORMAT,
      step: this.step,
      config: this.cfg,
      rng: this.rng.state(),
      order: this.order,
      cursor: this.cursor,
      history: this.history,
    };
    files.set(DPO_STATE_FILE, new TextEncoder().encode(JSON.stringify(state) + '\n'));
    return files;
  }

  /** Whether a checkpoint folder is a DPO run's. */
  static async isCheckpoint(files: ModelFiles): Promise<boolean> {
    return (await files.read(DPO_STATE_FILE)) !== null;
  }

  /** Rebuild a run from its checkpoint so that the next step continues it exactly (`load`: as build's). */
  static async restore(files: ModelFiles, data: DpoData, load: ModelLoadOptions = {}): Promise<DpoTrainer> {
    const raw = await files.read(DPO_STATE_FILE);
    if (!raw) throw new UserError(`${files.label}: no ${DPO_STATE_FILE}; not a DPO checkpoint.`);
    let state: DpoState;
    try {
      state = JSON.parse(new TextDecoder().decode(raw)) as DpoState;
    } catch (e) {
      throw new UserError(`${files.label}/${DPO_STATE_FILE}: not valid JSON (${(e as Error).message}).`);
    }
    if (state.format !== DPO_FORMAT)
      throw new UserError(
        `${files.label}/${DPO_STATE_FILE}: format is ${JSON.stringify(state.format)}, expected "${DPO_FORMAT}".`,
      );
    const cfg = validateDpoConfig(state.config, `${files.label}/${DPO_STATE_FILE} config`);
    const refFile = state.step > 0 ? 'ref_model.safetensors' : 'model.safetensors';
    let policy: CausalLM;
    let ref: CausalLM;
    let tokenizer: Tokenizer;
    if (cfg.lora > 0) {
      const lm = await loadLM(files, { ...load, trainable: false, label: 'base', file: refFile });
      ref = lm.model;
      tokenizer = lm.tokenizer;
      const read = await readAdapterSet(files, ref);
      policy = ref.withLora(read.adapters, 'policy');
    } else {
      const lm = await loadLM(files, { ...load, trainable: true, label: 'policy' });
      policy = lm.model;
      tokenizer = lm.tokenizer;
      ref = (await loadLM(files, { ...load, trainable: false, label: 'ref', file: refFile })).model;
    }
    const t = await DpoTrainer.assemble(cfg, policy, ref, tokenizer, data);
    t.step = state.step;
    t.history = state.history;
    t.rng = Rng.fromState(state.rng);
    t.order = state.order;
    t.cursor = state.cursor;
    const opt = await files.read('optimizer.safetensors');
    if (opt)
      await restoreAdam(
        t.opt,
        t.policy.trainableVariables(),
        readSafetensors(opt, `${files.label}/optimizer.safetensors`),
        files.label,
      );
    return t;
  }

  dispose(): void {
    this.opt.dispose();
    if (this.policy !== this.ref) this.policy.dispose();
    this.ref.dispose();
  }
}

function varName(v: tf.Variable): string {
  return v.name.slice(v.name.indexOf('/') + 1);
}

/** Adam's step count and moments, named `policy.step`, `policy.m.<var>`, `policy.v.<var>`. */
async function adamTensors(opt: tf.Optimizer, vars: tf.Variable[]): Promise<NamedTensor[]> {
  const weights = await opt.getWeights();
  const [iter, ...moments] = weights;
  const steps = iter ? Float32Array.from(await iter.tensor.data()) : null;
  iter?.tensor.dispose();
  if (weights.length <= 1 || !steps) return [];
  const n = vars.length;
  if (moments.length !== 2 * n)
    throw new Error(`DPO optimizer: ${moments.length} moments for ${n} variables`);
  const out: NamedTensor[] = [{ name: 'policy.step', shape: [1], data: steps }];
  for (let i = 0; i < 2 * n; i++) {
    const t = moments[i].tensor;
    out.push({
      name: `policy.${i < n ? 'm' : 'v'}.${varName(vars[i % n])}`,
      shape: t.shape,
      data: (await t.data()) as Float32Array,
    });
  }
  return out;
}

async function restoreAdam(
  opt: tf.Optimizer,
  vars: tf.Variable[],
  file: ReturnType<typeof readSafetensors>,
  label: string,
): Promise<void> {
  const step = file.tensors.get('policy.step');
  if (!step) return;
  const weights: { name: string; tensor: tf.Tensor }[] = [
    { name: 'iter', tensor: tf.scalar(step.data[0], 'int32') },
  ];
  for (const kind of ['m', 'v']) {
    for (const v of vars) {
      const t = file.tensors.get(`policy.${kind}.${varName(v)}`);
      if (!t) {
        tf.dispose(weights.map((w) => w.tensor));
        throw new UserError(
          `${label}/optimizer.safetensors: tensor "policy.${kind}.${varName(v)}" is missing.`,
        );
      }
      weights.push({ name: varName(v), tensor: tf.tensor(t.data, t.shape) });
    }
  }
  await opt.setWeights(weights);
  tf.dispose(weights.map((w) => w.tensor));
}
