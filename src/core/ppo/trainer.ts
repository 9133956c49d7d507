/**
 * One RLHF step, top to bottom in the order of docs/engine.md:
 *   1 sample (groupSize samples per prompt, one batched generate call) → 2 truncate at the stop token →
 *   3 forward policy/reference(/value) over query+response → 4 score → 5–6 advantages: PPO's per-token
 *   KL-penalised rewards, whitening and GAE, or a critic-free algorithm's (GRPO, RLOO, REINFORCE++: advantages.ts)
 *   → 7 epochs over shuffled minibatches (clipped surrogate, one joint loss, one gradient clip) → 8 KL controller
 *   → 9 metrics. Critic-free runs have no value model, no value optimiser and no value forward. A GRPO step with one
 *   epoch of one minibatch takes the policy's old log-probs in 7 from the update's own forward instead of in 3
 *   (oldLogprobsFromUpdate: the same numbers, one forward less).
 * `b*` names are whole-batch arrays, `mb*` names minibatch tensors (CleanRL style).
 */
import * as tf from '@tensorflow/tfjs-core';
import type { TrainConfig } from '../../common/config';
import { derived } from '../../common/config';
import type { CausalLM } from '../model/causal-lm';
import type { ScalarModel } from '../model/heads';
import { generateInMicroBatches, type GenerateResult } from '../model/sampling';
import type { Tokenizer } from '../tokenizer/types';
import { encodePrompt, stopIdsOf } from '../tokenizer';
import type { RewardFn, Sample } from '../reward/functions';
import { scoreSamples } from '../reward/module';
import { Rng } from '../base/rng';
import { FusedAdamOptimizer, type RunOptimizer } from '../optim/fused-adam';
import { REWARD_STATS_FILE } from '../reward/reward-model';
import {
  gae,
  maskedMean,
  maskedVar,
  maskedWhiten,
  perTokenRewards,
  explainedVariance,
  type PerTokenRewards,
} from './math';
import {
  broadcastToTokens,
  groupIds,
  groupStats,
  grpoAdvantages,
  reinforcePlusPlus,
  rlooAdvantages,
} from './advantages';
import {
  clipFractions,
  klTermLoss,
  policyLoss,
  valueLoss,
  entropyFromLogits,
  logprobsFromLogits,
  maskedMeanT,
  type Denominators,
  ratioLevelOf,
} from './losses';
import {
  estimateRunMemory,
  runMemoryOptions,
  runShapeOf,
  type MemoryEstimate,
  type RunShape,
  type StepPlan,
  WEBGPU_MEMORY_OPTIONS,
} from '../model/size';
import { chunkedTokenLogprobs } from './chunked-logprob';
import {
  currentPlanDevice,
  describePlan,
  fallbackPlan,
  planNotice,
  recordingsDroppedNotice,
  webgpuDeviceErrors,
  type DeviceCheck,
  type DeviceErrors,
  type DevicePhase,
  type PlanInForce,
  type TrainerDevice,
} from './gpu-plan';
import { heapExhaustedError } from '../model/oom';
import type { PlanDevice, VocabChunking } from '../model/size';

/** Vocabulary entries per chunk of the update's log-prob and entropy (ppo/chunked-logprob.ts). */
export const VOCAB_CHUNK = 8192;
/**
 * On WebGPU the fused log-prob kernels (one dispatch a row) beat the chunked ops (dozens of dispatches a chunk)
 * while the [tokens, V] logits are small; above this many bytes of logits the update chunks there too.
 */
export const WEBGPU_WHOLE_LOGITS_BYTES = 128e6;

/**
 * How the update chunks a V vocabulary on `backend`, as the estimate counts it (model/size.ts RunShape): chunks of
 * VOCAB_CHUNK where V is larger, and on WebGPU only for a micro-batch whose logits exceed WEBGPU_WHOLE_LOGITS_BYTES.
 */
export function vocabChunking(V: number, backend: string = tf.getBackend()): VocabChunking {
  if (V <= VOCAB_CHUNK) return { vocabChunk: 0 };
  return backend === 'webgpu'
    ? { vocabChunk: VOCAB_CHUNK, vocabChunkOverBytes: WEBGPU_WHOLE_LOGITS_BYTES }
    : { vocabChunk: VOCAB_CHUNK };
}

/** Whether the update takes the log-prob and entropy over vocabulary chunks for `tokens` rows of a V vocabulary. */
export function chunksVocabulary(tokens: number, V: number, backend: string = tf.getBackend()): boolean {
  const rule = vocabChunking(V, backend);
  if (!rule.vocabChunk) return false;
  return rule.vocabChunkOverBytes === undefined || tokens * V * 4 > rule.vocabChunkOverBytes;
}
import {
  klControllerFromState,
  liveKlController,
  makeKlController,
  type KlController,
  type KlControllerState,
} from './kl';
import { stepMetrics, type MinibatchStats, type StepMetrics } from '../../common/metrics';
import {
  jointGuardedStepDeferred,
  microGrads,
  readJointSteps,
  type MicroGrads,
  type JointStepResult,
  type Objective,
  type PendingJointStep,
  type UpdatePart,
} from './update';
import type { Rollout } from './rollout';
import { HEALTH_HISTORY, healthAlerts, type HealthAlert } from './health';
import { UserError } from '../../common/errors';
import type { EvalRecord } from '../../common/eval-record';
import { maybeYield } from '../base/yield';
import { GradReplays, type HostTensor } from './update-replay';
import { decodeReplayCount } from '../model/decode-replay';
import { wasmFusedBlocksHere } from '../kernels/wasm-activations';
import {
  forwardShare,
  forwardShareOf,
  prefixShare,
  responseHidden,
  SHARE_MAPS,
  shareMapShape,
  sharedPrefixDefault,
  type ForwardShare,
  type ShareMapName,
} from '../model/shared-prefix';

/**
 * Where scores come from: a function of the text, or a learned reward model read at the last real token.
 * `mean`: the mean its reward_stats.json records (subtracted with rewardModelCenter); null or absent = unknown.
 */
export type RewardSource =
  | { kind: 'fn'; fn: RewardFn; label: string }
  | { kind: 'model'; model: ScalarModel; label: string; mean?: number | null };

/** One minibatch's tensors in step 7. */
interface Minibatch {
  ids: tf.Tensor2D;
  attn: tf.Tensor2D;
  tokens: tf.Tensor1D;
  mask: tf.Tensor2D;
  /**
   * The log-probs at sampling time, from scoring's policy forward; absent on a step whose old log-probs come from
   * the update's own forward (Trainer.oldLogprobsFromUpdate): then `keepOld` receives them, [n, R], kept.
   */
  oldLogprobs?: tf.Tensor2D;
  keepOld?: (old: tf.Tensor2D) => void;
  advantages: tf.Tensor2D;
  /** PPO only (the value loss). */
  returns?: tf.Tensor2D;
  oldValues?: tf.Tensor2D;
  /** GRPO with klCoef > 0 only (the k3 loss term). */
  refLogprobs?: tf.Tensor2D;
  /** The whole minibatch's counts when these tensors are one of its micro-batches (losses.ts Denominators). */
  denominators?: Denominators;
  /** Rows sharing their query: the policy's trunk runs its positions once (model/shared-prefix.ts). */
  share?: ForwardShare;
}

/** `rows` reordered so that rows holding the same query are adjacent, in the order each query first appears. */
export function groupedRows(rows: readonly number[], queries: readonly number[][]): number[] {
  const first = new Map<string, number>();
  const at = rows.map((r, k) => {
    const key = queries[r].join(',');
    if (!first.has(key)) first.set(key, k);
    return { r, k, g: first.get(key)! };
  });
  return at.sort((a, b) => a.g - b.g || a.k - b.k).map((x) => x.r);
}

/** A step's distinct queries and its largest group (prefixShare's pad); undefined where none repeats. */
export type SharePad = { groups: number; groupMax: number } | undefined;

/** The SharePad of a step's queries (one per row). */
export function sharePadOf(queries: number[][]): SharePad {
  const count = new Map<string, number>();
  for (const q of queries) {
    const key = q.join(',');
    count.set(key, (count.get(key) ?? 0) + 1);
  }
  if (count.size === queries.length) return undefined;
  return { groups: count.size, groupMax: Math.max(...count.values()) };
}

/**
 * A replayed update's pad for minibatches of n rows: `pad` where a share padded to it runs at most 0.9 of the full
 * layout's rows (min(n, groups)·Tq + n·R against n·(Tq + R)), else 'off' (no share at all: one shape either way).
 */
export function paddedShareWorth(pad: SharePad, n: number, Tq: number, R: number): SharePad | 'off' {
  if (!pad) return 'off';
  return Math.min(n, pad.groups) * Tq + n * R <= 0.9 * n * (Tq + R) ? pad : 'off';
}

/**
 * `f()` cut off from autodiff: run as the forward of a custom gradient whose only input is a constant, so tfjs
 * records none of its ops on the tape (a custom gradient's forward runs at kernel depth 1, tape off) and no
 * gradient flows into it or through it — a stop-gradient without a backward of its own.
 */
function detached<T extends tf.Tensor>(f: () => T): T {
  const op = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const x = args[0] as tf.Tensor;
    return { value: tf.tidy(f), gradFunc: () => tf.zerosLike(x) };
  });
  return tf.tidy(() => (op as (x: tf.Tensor) => T)(tf.scalar(0)));
}

/** `rows` cut into consecutive slices of at most `size` (the micro-batches of a minibatch, or of the batch). */
export function microSlices<T>(rows: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let s = 0; s < rows.length; s += size) out.push(rows.slice(s, s + size));
  return out;
}
type PolicyStat =
  | 'policyLoss'
  | 'clipFrac'
  | 'approxKl'
  | 'ratioMean'
  | 'ratioMax'
  | 'logRatioClampFrac'
  | 'entropy'
  | 'clipFracLow'
  | 'clipFracHigh';
type ValueStat = 'valueLoss' | 'valueClipFrac';

export interface PpoModels {
  policy: CausalLM;
  ref: CausalLM;
  /** null for the critic-free algorithms (grpo, rloo, reinforce++): no value model at all. */
  value: ScalarModel | null;
  reward: RewardSource;
}

/**
 * Free every model of a run exactly once: the policy (a LoRA view frees only its adapters), the reference (with
 * LoRA the shared base itself), the base of any view, the value model (on a shared base: its adapters and head)
 * and the learned reward models of `models.reward` and of `otherRewards` (e.g. a reward swapped out for a
 * preference run). Objects met twice (the base is the reference) are freed once. The optimisers are the
 * trainer's: PpoTrainer.disposeOptimizers().
 */
export function disposeModels(models: PpoModels, otherRewards: readonly RewardSource[] = []): void {
  const freed = new Set<object>();
  const free = (m: { dispose(): void }) => {
    if (freed.has(m)) return;
    freed.add(m);
    m.dispose();
  };
  if (models.value) free(models.value);
  free(models.policy);
  free(models.ref);
  free(models.policy.base);
  if (models.value) free(models.value.trunkModel.base);
  for (const r of [models.reward, ...otherRewards]) if (r.kind === 'model') free(r.model);
}

/**
 * The alert a step raises when the device ran out of memory and the step's work was redone with smaller
 * micro-batches (src/core/ppo/gpu-plan.ts): once, on that step; the run goes on with the smaller plan.
 */
export interface PlanAlert {
  id: 'device-out-of-memory';
  step: number;
  message: string;
  advice: string;
}

/** Thrown by a device check (PpoTrainer.onDevice) to end the work it guards: the device ran out. */
class RanOut extends Error {
  constructor(readonly why: string) {
    super(`the device ran out of memory: ${why}`);
  }
}

export interface StepResult {
  metrics: StepMetrics;
  rollout: Rollout;
  /** The health alerts of src/core/ppo/health.ts, and the trainer's own (non-finite, reward-uncentred, PlanAlert). */
  alerts: (HealthAlert | PlanAlert)[];
  /** The plan the next step runs with: this step's, or the smaller one it fell back to (gpu-plan.ts). */
  plan: PlanInForce;
  /** Ratio statistics of the very first minibatch of the first epoch (must be exactly 1). */
  firstMinibatch: { ratioMean: number; ratioMax: number; approxKl: number; clipFrac: number };
  /** Minibatch updates skipped this step because the loss or a gradient was NaN/Inf. */
  skippedUpdates: number;
  /** Three steps in a row had skipped updates: the run loop should pause. */
  shouldPause: boolean;
  /**
   * Held-out evaluation after this step (src/core/ppo/eval.ts), set by the session on evaluation steps; its three
   * metrics are on `metrics` too.
   */
  eval?: EvalRecord;
}

/** What the trainer is doing now; the worker's protocol re-exports this type (src/worker/protocol.ts). */
export type Phase = 'generating' | 'scoring' | 'updating' | 'idle';

/**
 * Where the trainer reads its config: a run's one owner of it, the training session (src/core/run/session.ts), which
 * takes live changes and validates them. The trainer reads it once at the start of each step and keeps no copy, so
 * a change made between steps reaches the next step and never a step in flight.
 */
export type ConfigSource = () => TrainConfig;

/**
 * What a run has done so far, as a value: a trainer is built with it (a resumed run; any field left out starts
 * fresh) and gives it back with `state()`; checkpoints save it (core/run/checkpoint.ts trainer_state.json).
 */
export interface TrainerProgress {
  /** Steps completed. */
  step: number;
  kl: KlControllerState;
  rng: number[];
  /** The current pass over the shuffled prompts and the position in it. */
  promptOrder: number[];
  promptCursor: number;
  history: StepMetrics[];
  /** Consecutive steps with skipped (non-finite) updates. */
  badSteps: number;
  /** The reward model's recorded mean score; null = none recorded. */
  rewardMean: number | null;
  /**
   * The smaller plan the run fell back to after the device ran out of memory, with the key (the live keys and
   * the device it was made for) it holds for; null = none. A resumed run on the same device and config starts
   * there instead of running out again; on another device or config the key differs and the plan is made afresh.
   */
  devicePlan: DevicePlan | null;
}

/** A plan the run fell back to (TrainerProgress.devicePlan): for the config and device `key` names. */
export interface DevicePlan {
  key: string;
  plan: StepPlan;
}

/**
 * How far a phase of a long step has come: samples generated or scored of the batch, minibatch updates made of the
 * step's (epochs × minibatches).
 */
export interface PhaseProgress {
  phase: Exclude<Phase, 'idle'>;
  done: number;
  total: number;
  unit: 'samples' | 'updates';
}

/** What the trainer tells its owner while a step runs (given at construction). */
export interface TrainerEvents {
  /** The phase changed (generating → scoring → updating → idle); called synchronously, inside the step. */
  phase?(phase: Phase): void;
  /** Work done inside the phase: after each generation slice, scoring micro-batch and minibatch update. */
  progress?(p: PhaseProgress): void;
}

/** The config keys the KL controller is built from (a live change of any of them rebuilds it). */
type KlKeys = Pick<TrainConfig, 'klCoef' | 'adaptiveKl' | 'targetKl' | 'klHorizon'>;
const klKeys = (c: TrainConfig): KlKeys => ({
  klCoef: c.klCoef,
  adaptiveKl: c.adaptiveKl,
  targetKl: c.targetKl,
  klHorizon: c.klHorizon,
});
const sameKlKeys = (a: KlKeys, b: KlKeys): boolean =>
  a.klCoef === b.klCoef &&
  a.adaptiveKl === b.adaptiveKl &&
  a.targetKl === b.targetKl &&
  a.klHorizon === b.klHorizon;

/** A step's setting (PpoTrainer.beginStep): its sizes, read once, and the plan it runs with. */
interface StepSetting {
  cfg: TrainConfig;
  B: number;
  R: number;
  G: number;
  mbSize: number;
  stepNo: number;
  /** β of this step (the KL controller's value at its start). */
  klCoef: number;
  T0: number;
  /** The plan in force: the step's, or the smaller one it fell back to. */
  plan: StepPlan;
  /** The first phase that ran out this step, and the plan it ran with (for the step's one alert). */
  fellBack: { phase: Exclude<DevicePhase, 'apply'>; from: PlanInForce } | null;
  /** The phase in which the device first ran out while the update's recordings were held (they were freed). */
  droppedRecordings: Exclude<DevicePhase, 'apply'> | null;
  /** The device ran out in `phase`: free, and take the smaller plan (or end the step when none is left). */
  fallBack(phase: Exclude<DevicePhase, 'apply'>, why: string): Promise<void>;
  /** `work` with the plan in force, redone with a smaller one for as long as the device runs out. */
  withFallback<T>(phase: 'generate' | 'score', work: () => Promise<T>, free?: (out: T) => void): Promise<T>;
}

/** Steps 1–2's results: the prompts drawn, the sampled responses, padded, their masks and stop flags. */
interface StepRollout {
  idx: number[];
  groups: number[];
  queries: number[][];
  stop: number[] | null;
  gen: GenerateResult;
  replays0: number;
  tGen: number;
  bResponses: number[][];
  bMask: number[][];
  stopped: boolean[];
}

/** Steps 3–4's results: per-token numbers of the models (old log-probs empty while oldFromUpdate) and scores. */
interface StepScores {
  oldFromUpdate: boolean;
  Tq: number;
  bLogprobs: number[][];
  bRefLogprobs: number[][];
  bValues: number[][] | null;
  scores: number[];
  penalised: number[];
  promptTexts: string[];
  responseTexts: string[];
  tScore: number;
}

/** Steps 5–6: rewards and advantages of a step (PpoTrainer.advantages). */
interface Advantages {
  rewards: number[][];
  advantages: number[][];
  rawAdvantages: number[][];
  returns: number[][] | null;
  ptr: PerTokenRewards;
}

/** Step 7's results. */
interface StepUpdate {
  minibatches: MinibatchStats[];
  epochsRun: number;
  skippedUpdates: number;
  tUpd: number;
}

const now = (): number => performance.now();
const mean = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

/** Round up to a multiple of 8 so query lengths fall into a few shape buckets (WebGPU buffer reuse). */
export function bucket(n: number, cap: number): number {
  return Math.min(cap, Math.ceil(n / 8) * 8);
}

export class PpoTrainer {
  /** The run's config, read from its owner (see ConfigSource). */
  private readonly config: ConfigSource;
  private readonly events: TrainerEvents;
  /** The KL keys the controller was last built from (a live change of them rebuilds it at the next step). */
  private klFrom: KlKeys;
  readonly models: PpoModels;
  readonly tokenizer: Tokenizer;
  readonly prompts: string[];
  readonly promptTokens: number[][];
  /** The longest prompt in tokens (what the memory estimate of a micro-batch assumes). */
  readonly longestPrompt: number;
  policyOpt: RunOptimizer;
  /** null without a value model (critic-free algorithms). */
  valueOpt: RunOptimizer | null;
  // The run's progress (TrainerProgress): given to the constructor, read back with state(), changed only here.
  private _kl: KlController;
  private _rng: Rng;
  private _step: number;
  private promptOrder: number[];
  private promptCursor: number;
  private _history: StepMetrics[];
  private _badSteps: number;
  private _rewardMean: number | null;
  /** The 'reward-uncentred' alert was raised already. */
  private saidUncentred = false;
  /**
   * On a GRPO step with `ppoEpochs` 1 and one minibatch, take the old log-probs from the update's own forward
   * (scoring's computation on its hidden states, detached) instead of a policy forward in scoring: the same numbers,
   * one trunk forward less a step (issue #24). false: the separate forward, as every other step does (tests).
   */
  oldLogprobsFromUpdate = true;
  /**
   * Rows of a forward that hold the same query (GRPO's and RLOO's groups) run its positions through the policy's and
   * the reference's trunk once (model/shared-prefix.ts): the same log-probs up to the order of the matmuls' sums,
   * fewer rows for every block. false: every row in full (tests, a bench's comparison).
   */
  sharedPrefix = sharedPrefixDefault();
  /** Whether the last step took its old log-probs from the update's forward (oldLogprobsFromUpdate applied). */
  lastStepOldLogprobsFromUpdate = false;
  /**
   * On WebGPU, record a whole-minibatch update's forward and backward once and replay it (src/core/ppo/update-replay.ts,
   * issue #31), with config key `updateReplay` on too. false: every minibatch through tfjs; set false by the run
   * itself after the device ran out of memory while recordings were held.
   */
  updateReplay = true;
  /** The update's recordings (WebGPU): how many were made and replayed, for tests and benchmarks. */
  readonly gradReplays = new GradReplays();
  /** The device's error scopes (src/core/ppo/gpu-plan.ts): WebGPU's by default, nothing elsewhere. */
  private readonly deviceErrors: DeviceErrors;
  /** The device the plan is made for (WebGPU and its buffer limit, or none: the budget plan). */
  private readonly planDevice: () => PlanDevice | undefined;
  /**
   * The smaller plan the run fell back to after the device ran out of memory, for the config and device it was
   * made with (`key`, planKey): kept for the rest of the run, dropped when those change (a new plan then).
   */
  private fallback: DevicePlan | null;
  /** The device-out-of-memory alerts of work outside a step (held-out evaluation), until the session takes them. */
  private outOfStepNotices: PlanAlert[] = [];

  /**
   * `config`: where the run's config is read, at the start of each step: the session's (TrainingSession, the one
   * place a running config changes), or `() => cfg` for a trainer used on its own (tests, benchmarks). `events`: the phase callback of the owner (the session). `device`: the device's error
   * scopes and the device the plan is for (defaults: WebGPU's, src/core/ppo/gpu-plan.ts).
   */
  constructor(
    config: ConfigSource,
    models: PpoModels,
    tokenizer: Tokenizer,
    prompts: string[],
    events: TrainerEvents = {},
    device: TrainerDevice = {},
    resume?: Partial<TrainerProgress>,
  ) {
    if (prompts.length === 0)
      throw new UserError('training needs at least one prompt; the prompt list is empty.');
    this.config = config;
    this.events = events;
    this.deviceErrors = device.errors ?? webgpuDeviceErrors();
    this.planDevice = device.planDevice ?? currentPlanDevice;
    const cfg = this.config();
    this.klFrom = klKeys(cfg);
    this.models = models;
    this.tokenizer = tokenizer;
    this.prompts = prompts;
    const maxPrompt = models.policy.config.n_positions - cfg.responseLength;
    this.promptTokens = prompts.map((p, i) => {
      let ids = encodePrompt(tokenizer, p, cfg.chatTemplate);
      if (ids.length === 0) ids = [models.policy.config.bos_token_id];
      if (ids.length > maxPrompt) {
        throw new UserError(
          `prompt ${i} ("${p.slice(0, 40)}…") is ${ids.length} tokens; with responseLength ${cfg.responseLength} ` +
            `it must be at most ${maxPrompt} (the model's n_positions is ${models.policy.config.n_positions}).`,
        );
      }
      return ids;
    });
    this.longestPrompt = Math.max(...this.promptTokens.map((p) => p.length));
    // Adam with one fused kernel per variable (src/core/optim/fused-adam.ts): the same state and update as
    // tf.train.adam (tests/perf-adam.test.ts, tests/trainer.test.ts), ~14× fewer kernels per step.
    this.policyOpt = new FusedAdamOptimizer(cfg.learningRate);
    if ((models.value !== null) !== derived(cfg).hasValueModel) {
      throw new Error(
        `PpoTrainer: algorithm "${cfg.algorithm}" ${derived(cfg).hasValueModel ? 'needs a value model' : 'is critic-free and takes no value model'}`,
      );
    }
    this.valueOpt = models.value ? new FusedAdamOptimizer(cfg.valueLearningRate) : null;
    // A fresh run's progress, or the one it resumes (a checkpoint's; an order that no longer fits the prompts, a
    // task file changed since the save, starts a fresh shuffle).
    const p = resume ?? {};
    this._step = p.step ?? 0;
    this._kl = p.kl ? klControllerFromState(p.kl) : makeKlController(cfg);
    this._rng = p.rng ? Rng.fromState(p.rng) : new Rng(cfg.seed);
    const order = p.promptOrder ?? [];
    const cursor = p.promptCursor ?? 0;
    const orderFits = order.every((i) => i < prompts.length) && cursor <= order.length;
    this.promptOrder = orderFits ? [...order] : [];
    this.promptCursor = orderFits ? cursor : 0;
    this._history = p.history ? [...p.history] : [];
    this._badSteps = p.badSteps ?? 0;
    this.fallback = p.devicePlan ? { key: p.devicePlan.key, plan: { ...p.devicePlan.plan } } : null;
    this._rewardMean =
      p.rewardMean !== undefined
        ? p.rewardMean
        : models.reward.kind === 'model'
          ? (models.reward.mean ?? null)
          : null;
  }

  /** The run's progress as a value (what a checkpoint saves and a resumed trainer is built with). */
  state(): TrainerProgress {
    return {
      step: this._step,
      kl: this._kl.state(),
      rng: this._rng.state(),
      promptOrder: [...this.promptOrder],
      promptCursor: this.promptCursor,
      history: [...this._history],
      badSteps: this._badSteps,
      rewardMean: this._rewardMean,
      devicePlan: this.fallback ? { key: this.fallback.key, plan: { ...this.fallback.plan } } : null,
    };
  }

  /** Steps completed (the next step is `step + 1`). */
  get step(): number {
    return this._step;
  }
  /** The KL controller in force (its coefficient, and for an adaptive one its target and horizon). */
  get kl(): KlController {
    return this._kl;
  }
  /** The run's random stream (sampling, prompt order, minibatch shuffles). */
  get rng(): Rng {
    return this._rng;
  }
  /** Every completed step's metrics, oldest first. */
  get history(): readonly StepMetrics[] {
    return this._history;
  }
  /** Consecutive steps with skipped (non-finite) updates (checkpointed; 3 → shouldPause). */
  get badSteps(): number {
    return this._badSteps;
  }
  /** The reward model's recorded mean score (reward_stats.json), subtracted with rewardModelCenter; null = none. */
  get rewardMean(): number | null {
    return this._rewardMean;
  }

  /** The run's config now (the next step runs with it). */
  get cfg(): TrainConfig {
    return this.config();
  }

  /**
   * At the start of a step: the live keys that live outside the config (the optimisers' learning rates, the KL
   * controller) follow the config the step runs with. The KL controller is rebuilt only when one of its keys
   * changed (an adaptive controller keeps its coefficient unless klCoef itself was changed).
   */
  private followConfig(cfg: TrainConfig): void {
    this.policyOpt.setLearningRate(cfg.learningRate);
    this.valueOpt?.setLearningRate(cfg.valueLearningRate);
    const keys = klKeys(cfg);
    if (!sameKlKeys(keys, this.klFrom)) {
      this._kl = liveKlController(this._kl, this.klFrom, keys);
      this.klFrom = keys;
    }
  }

  /**
   * The step `s` enters phase `p`. When its plan splits the batch (a memory-bounded plan: set micro-batches, or the
   * smaller plan after the device ran out), what the last phase left in the backend's pool goes back to the device
   * first (DeviceErrors.trim), so that the step holds about its largest phase, not the sum of its phases' slices.
   */
  private phase(p: Phase, s?: StepSetting): void {
    if (s && (s.plan.microBatchSize < s.mbSize || s.plan.generateMicroBatchSize < s.B))
      this.deviceErrors.trim?.();
    this.events.phase?.(p);
  }

  /**
   * How a step with `cfg` runs (model/size.ts resolveStepPlan): the micro-batch (`microBatchSize`, or for 0 the
   * largest that keeps each phase's working tensors under a modest budget; on WebGPU the whole minibatch, inside
   * the device's buffer limits) and whether the update recomputes; after the device ran out of memory, the smaller
   * plan the run fell back to (src/core/ppo/gpu-plan.ts).
   */
  stepPlan(cfg: TrainConfig = this.cfg): StepPlan {
    const shape = this.runShape(cfg);
    return {
      microBatchSize: shape.microBatchSize!,
      recompute: !!shape.recompute,
      generateMicroBatchSize: shape.generateMicroBatchSize ?? shape.microBatchSize!,
    };
  }

  /** The pre-flight memory estimate of a step with `cfg` as this trainer runs it (model/size.ts). */
  memoryEstimate(cfg: TrainConfig = this.cfg): MemoryEstimate {
    // On WASM the blocks' layer norms and gelu_new hold less (kernels/wasm-activations.ts); the plan is unchanged.
    const opts = {
      ...runMemoryOptions(cfg, this.models.reward.kind === 'model'),
      fusedBlocks: tf.getBackend() === 'wasm' && wasmFusedBlocksHere(),
      ...(tf.getBackend() === 'webgpu' ? WEBGPU_MEMORY_OPTIONS : {}),
    };
    return estimateRunMemory(this.models.policy.config, this.runShape(cfg), opts);
  }

  private runShape(cfg: TrainConfig): RunShape {
    const { policy, reward } = this.models;
    const V = policy.config.vocab_size;
    const shape = runShapeOf(
      policy.config,
      cfg,
      this.longestPrompt,
      runMemoryOptions(cfg, reward.kind === 'model'),
      vocabChunking(V),
      this.planDevice(),
    );
    const f = this.fallback;
    // The recordings dropped after the device ran out: the update runs through tfjs from then on.
    if (!this.updateReplay) shape.updateRecorded = false;
    if (!f || f.key !== this.planKey(cfg)) return shape;
    return {
      ...shape,
      microBatchSize: f.plan.microBatchSize,
      generateMicroBatchSize: f.plan.generateMicroBatchSize,
      recompute: f.plan.recompute,
    };
  }

  /** What a plan depends on that can change during a run: the live keys and the device. */
  private planKey(cfg: TrainConfig): string {
    const d = this.planDevice();
    return JSON.stringify([
      cfg.batchSize,
      cfg.miniBatches,
      cfg.microBatchSize,
      cfg.recompute,
      cfg.responseLength,
      d?.backend ?? tf.getBackend(),
      d?.maxBufferBytes ?? null,
    ]);
  }

  /** The plan in force, with why (the device's, the budget's, set, or after the device ran out) for its words. */
  planInForce(cfg: TrainConfig = this.cfg): PlanInForce {
    const plan = this.stepPlan(cfg);
    const fellBack = this.fallback !== null && this.fallback.key === this.planKey(cfg);
    return {
      ...plan,
      reason: fellBack
        ? 'out-of-memory'
        : cfg.microBatchSize > 0
          ? 'set'
          : this.planDevice()
            ? 'device'
            : 'budget',
      backend: tf.getBackend(),
      batchSize: cfg.batchSize,
      miniBatchSize: derived(cfg).miniBatchSize,
    };
  }

  /** The plan in force in words ("whole batch (16) on WebGPU, recompute off"; gpu-plan.ts describePlan). */
  planText(cfg: TrainConfig = this.cfg): string {
    return describePlan(this.planInForce(cfg));
  }

  /**
   * `work` inside the device's error scope (src/core/ppo/gpu-plan.ts): `{ out }`, or `{ ranOut }` with the
   * device's words when it ran out of memory (reported by the scope, or thrown as an allocation failure), after
   * `free(out)` when the work had finished. `settle` (for work that commits something at its end, the update's
   * optimiser step) checks the scope early: it throws when the device ran out, and a failure after it is thrown on.
   */
  private async onDevice<T>(
    check: DeviceCheck,
    work: (settle: () => Promise<void>) => Promise<T>,
    free: (out: T) => void = () => undefined,
  ): Promise<{ out: T } | { ranOut: string }> {
    const errors = this.deviceErrors;
    errors.push(check);
    let popped = false;
    const settle = async () => {
      popped = true;
      const why = await errors.pop();
      if (why !== null) throw new RanOut(why);
    };
    let out: T;
    try {
      out = await work(settle);
    } catch (e) {
      if (e instanceof RanOut) return { ranOut: e.why };
      if (popped) throw e; // after the check: what the work committed may be half done
      let why: string | null = null;
      try {
        why = await errors.pop();
      } catch {
        /* the work's own error is the one to report */
      }
      why ??= errors.ranOut?.(e) ?? null;
      if (why === null) throw e;
      return { ranOut: why };
    }
    if (!popped) {
      let why: string | null;
      try {
        why = await errors.pop();
      } catch (e) {
        free(out);
        throw e;
      }
      if (why !== null) {
        free(out);
        return { ranOut: why };
      }
    }
    return { out };
  }

  /**
   * Work outside a step (the held-out evaluation's generation and forwards) with the plan in force, inside the
   * device's error scope: when the device runs out, the work's tensors are freed (`free`, or by the work itself when
   * it throws), and it runs again with the smaller plan fallbackPlan gives, which the run keeps from then on, as a
   * step's fallback does. The alert saying so waits in takeOutOfStepNotices. On a device without error scopes
   * (WASM, CPU) this is `work(plan)`.
   */
  async withDevicePlan<T>(
    phase: 'generate' | 'score',
    rows: number,
    work: (plan: StepPlan) => Promise<T>,
    free?: (out: T) => void,
    purpose = ' for the held-out evaluation',
  ): Promise<T> {
    const cfg = this.cfg;
    let from: PlanInForce | null = null;
    for (;;) {
      // The plan as this work sees it: no slice above its `rows` (so that falling back makes its slices smaller).
      const planned = this.stepPlan(cfg);
      const plan: StepPlan =
        phase === 'generate'
          ? {
              ...planned,
              generateMicroBatchSize: Math.min(planned.generateMicroBatchSize, rows),
              microBatchSize: Math.min(planned.microBatchSize, rows),
            }
          : { ...planned, microBatchSize: Math.min(planned.microBatchSize, rows) };
      const size = phase === 'generate' ? plan.generateMicroBatchSize : plan.microBatchSize;
      const r = await this.onDevice({ phase, size }, () => work(plan), free);
      if ('out' in r) {
        if (from) {
          const step = this.step;
          this.outOfStepNotices.push({
            id: 'device-out-of-memory',
            step,
            ...planNotice(step, phase, from, this.planInForce(cfg), purpose),
          });
        }
        return r.out;
      }
      await this.deviceErrors.release?.();
      const was: PlanInForce = { ...this.planInForce(cfg), ...plan };
      const next = fallbackPlan(plan, phase, cfg);
      if (!next) {
        throw heapExhaustedError(
          { phase, step: this.step },
          `the device said "${r.ranOut}"${purpose} with ${describePlan(was)}, and no smaller plan is left to try`,
        );
      }
      from ??= was;
      this.fallback = { key: this.planKey(cfg), plan: next };
    }
  }

  /** The alerts of withDevicePlan's fallbacks since the last call (the session adds them to the step's). */
  takeOutOfStepNotices(): PlanAlert[] {
    const out = this.outOfStepNotices;
    this.outOfStepNotices = [];
    return out;
  }

  /** The micro-batch of a step with `cfg` (stepPlan). */
  microBatchSize(cfg: TrainConfig = this.cfg): number {
    return this.stepPlan(cfg).microBatchSize;
  }

  /**
   * The ids that end a response: with `stopToken` "eos" every stop id of the tokenizer (for a Hugging Face model
   * generation_config's eos ids and the chat template's end of turn; GPT-2: its EOS), a number: that id; null: none.
   */
  stopIds(cfg: TrainConfig = this.cfg): number[] | null {
    const s = cfg.stopToken;
    if (s === null) return null;
    if (s === 'eos') return stopIdsOf(this.tokenizer);
    return [s];
  }

  private nextPromptIndices(n: number): number[] {
    const out: number[] = [];
    while (out.length < n) {
      if (this.promptCursor >= this.promptOrder.length) {
        this.promptOrder = this._rng.permutation(this.prompts.length);
        this.promptCursor = 0;
      }
      out.push(this.promptOrder[this.promptCursor++]);
    }
    return out;
  }

  /**
   * Batch tensors for rows `rows` of a rollout: ids [n, Tq+R] (query left-padded to Tq, then the response
   * padded on the right) and the attention mask. Response token t is predicted at position Tq − 1 + t.
   * Tq is fixed for the whole step, so every forward of the step has the same shapes. With sharedPrefix, the rows'
   * PrefixShare (model/shared-prefix.ts): padded to `pad` (capped at the rows) where given.
   */
  private batchInputs(
    queries: number[][],
    responses: number[][],
    mask: number[][],
    rows: number[],
    Tq: number,
    R: number,
    pad?: SharePad | 'off',
  ) {
    const T = Tq + R;
    const n = rows.length;
    const ids = new Int32Array(n * T).fill(this.tokenizer.padId);
    const attn = new Int32Array(n * T);
    rows.forEach((i, k) => {
      const q = queries[i];
      const off = k * T + Tq - q.length;
      ids.set(q, off);
      attn.fill(1, off, off + q.length);
      ids.set(responses[i], k * T + Tq);
      attn.set(mask[i], k * T + Tq);
    });
    const share =
      this.sharedPrefix && pad !== 'off'
        ? prefixShare(
            ids,
            attn,
            n,
            T,
            Tq,
            pad && { groups: Math.min(n, pad.groups), groupMax: Math.min(n, pad.groupMax) },
          )
        : null;
    return { ids, attn, Tq, T, n, share };
  }

  /** Policy (or reference) logits at the response-predicting positions: [n·R, V]. */
  private responseLogits(
    model: CausalLM,
    ids: tf.Tensor2D,
    attn: tf.Tensor2D,
    Tq: number,
    R: number,
    share?: ForwardShare | null,
  ): tf.Tensor2D {
    return model.lmHead(responseHidden(model, ids, attn, Tq, R, { share }));
  }

  private responseValues(
    model: ScalarModel,
    ids: tf.Tensor2D,
    attn: tf.Tensor2D,
    Tq: number,
    R: number,
    recompute = false,
  ): tf.Tensor2D {
    const n = ids.shape[0];
    return tf.slice(model.values(ids, attn, { recompute }), [0, Tq - 1], [n, R]) as tf.Tensor2D;
  }

  /**
   * The forwards of held-out evaluation (src/core/ppo/eval.ts): for each response, Σ_t log π(y_t) and
   * Σ_t log π_ref(y_t) over its tokens (log softmax(logits / temperature), `temperature` 0 read as 1), and the
   * learned reward model's score at its last real token (null with a reward function). `responses` are unpadded
   * (at most responseLength tokens each); run in slices of `micro` rows. Reads and changes no training state
   * (no random stream, no optimiser, no step counter).
   */
  async evalForward(
    queries: number[][],
    responses: number[][],
    temperature: number,
    micro: number,
  ): Promise<{ policy: number[]; ref: number[]; rewardModel: number[] | null }> {
    const { policy, ref, reward } = this.models;
    const R = Math.max(1, ...responses.map((r) => r.length));
    const B = queries.length;
    const T = temperature === 0 ? 1 : temperature;
    const padded = responses.map((t) => [
      ...t,
      ...new Array<number>(R - t.length).fill(this.tokenizer.padId),
    ]);
    const mask = responses.map((t) => [
      ...new Array<number>(t.length).fill(1),
      ...new Array<number>(R - t.length).fill(0),
    ]);
    const Tq = bucket(Math.max(...queries.map((q) => q.length)), policy.config.n_positions - R);
    const out = {
      policy: [] as number[],
      ref: [] as number[],
      rewardModel: reward.kind === 'model' ? ([] as number[]) : null,
    };
    const size = micro > 0 ? Math.min(micro, B) : B;
    for (let s = 0; s < B; s += size) {
      const rows = Array.from({ length: Math.min(size, B - s) }, (_, k) => s + k);
      const inp = this.batchInputs(queries, padded, mask, rows, Tq, R, 'off'); // (its forwards run in full)
      const sums = tf.tidy(() => {
        const ids = tf.tensor2d(inp.ids, [inp.n, inp.T], 'int32');
        const attn = tf.tensor2d(inp.attn, [inp.n, inp.T], 'int32');
        const tokens = tf.tensor1d(
          rows.flatMap((i) => padded[i]),
          'int32',
        );
        const m = tf.tensor2d(
          rows.map((i) => mask[i]),
          [inp.n, R],
        );
        const sum = (model: CausalLM) =>
          tf.sum(
            tf.mul(
              tf.reshape(logprobsFromLogits(this.responseLogits(model, ids, attn, inp.Tq, R), tokens, T), [
                inp.n,
                R,
              ]),
              m,
            ),
            1,
          );
        const rm = reward.kind === 'model' ? reward.model.lastTokenValues(ids, attn) : tf.zeros([inp.n]);
        return tf.concat([sum(policy), sum(ref), tf.reshape(rm, [inp.n])]);
      });
      const data = await sums.data();
      await maybeYield(); // a turn for the event loop between slices (src/core/base/yield.ts)
      sums.dispose();
      const n = inp.n;
      out.policy.push(...Array.from(data.subarray(0, n)));
      out.ref.push(...Array.from(data.subarray(n, 2 * n)));
      out.rewardModel?.push(...Array.from(data.subarray(2 * n, 3 * n)));
    }
    return out;
  }

  /** Step 7's policy part of the joint loss: pg − entropyCoef·entropy, and the statistics read back with it. */
  private policyObjective(
    mb: Minibatch,
    Tq: number,
    cfg: TrainConfig,
    plan: StepPlan,
  ): Objective<PolicyStat> {
    const [n, R] = mb.mask.shape;
    const policy = this.models.policy;
    const hidden = responseHidden(policy, mb.ids, mb.attn, Tq, R, {
      recompute: plan.recompute,
      share: mb.share,
    });
    // On a step whose old log-probs come from this forward: scoring's computation (the whole logits, then
    // logprobsFromLogits) on these same hidden states, detached — the numbers scoring's own policy forward gives.
    let oldLogprobs = mb.oldLogprobs;
    if (!oldLogprobs) {
      oldLogprobs = detached(
        () =>
          tf.reshape(logprobsFromLogits(policy.lmHead(hidden), mb.tokens, cfg.temperature), [
            n,
            R,
          ]) as tf.Tensor2D,
      );
      mb.keepOld?.(tf.keep(tf.clone(oldLogprobs)));
    }
    const denom = mb.denominators;
    const flatMask = tf.reshape(mb.mask, [-1]);
    let lpFlat: tf.Tensor1D;
    let entropy: tf.Scalar;
    if (chunksVocabulary(n * R, policy.config.vocab_size)) {
      // The log-prob and entropy over vocabulary chunks: no [n·R, V] logits, forward or backward.
      const blocks = policy.lmHeadBlocks();
      const out = chunkedTokenLogprobs(hidden, blocks, mb.tokens, {
        temperature: cfg.temperature,
        chunkRows: VOCAB_CHUNK,
        entropy: true,
        // With entropyCoef 0 the entropy is only measured (not differentiated), as below.
        entropyGrad: cfg.entropyCoef !== 0,
        weightGrad: blocks.some((w) => (w as tf.Variable).trainable),
      });
      lpFlat = out.logprobs;
      entropy = maskedMeanT(out.entropy!, flatMask, denom?.tokens);
    } else {
      const logits = policy.lmHead(hidden);
      lpFlat = logprobsFromLogits(logits, mb.tokens, cfg.temperature);
      entropy = entropyFromLogits(logits, flatMask, cfg.temperature, denom?.tokens);
    }
    const lp = tf.reshape(lpFlat, [n, R]);
    // The surrogate's per-token losses aggregated by lossAggregation; GRPO adds klCoef·k3 per token (its KL
    // term), aggregated the same way.
    const pl = policyLoss(lp, oldLogprobs, mb.advantages, mb.mask, cfg.clipRange, cfg.logRatioClamp, {
      aggregation: cfg.lossAggregation,
      responseLength: R,
      denominators: denom,
      // RLOO: one ratio per sequence, TRL RLOOTrainer's loss (losses.ts sequencePolicyLoss).
      ratioLevel: ratioLevelOf(cfg.algorithm),
    });
    const clip = clipFractions(
      lp,
      oldLogprobs,
      mb.advantages,
      mb.mask,
      cfg.clipRange,
      denom,
      ratioLevelOf(cfg.algorithm),
    );
    let loss = pl.loss;
    if (mb.refLogprobs) {
      const k3 = klTermLoss(lp, mb.refLogprobs, mb.mask, cfg.lossAggregation, R, denom);
      loss = tf.add(loss, tf.mul(this.kl.value, k3)) as tf.Scalar;
    }
    // With entropyCoef 0 the entropy is only measured: it stays out of the loss, so it is not differentiated.
    if (cfg.entropyCoef !== 0) loss = tf.sub(loss, tf.mul(cfg.entropyCoef, entropy)) as tf.Scalar;
    const { clipFrac, approxKl, ratioMean, ratioMax, logRatioClampFrac } = pl;
    return {
      loss,
      stats: {
        policyLoss: pl.loss,
        clipFrac,
        approxKl,
        ratioMean,
        ratioMax,
        logRatioClampFrac,
        entropy,
        clipFracLow: clip.low,
        clipFracHigh: clip.high,
      },
    };
  }

  /** Step 7's value part of the joint loss: vfCoef·(clipped value loss). */
  private valueObjective(
    value: ScalarModel,
    mb: Minibatch,
    Tq: number,
    cfg: TrainConfig,
    plan: StepPlan,
  ): Objective<ValueStat> {
    const v = this.responseValues(value, mb.ids, mb.attn, Tq, mb.mask.shape[1], plan.recompute);
    const vl = valueLoss(v, mb.oldValues!, mb.returns!, mb.mask, cfg.clipRangeValue, mb.denominators);
    return {
      loss: tf.mul(cfg.vfCoef, vl.loss) as tf.Scalar,
      stats: { valueLoss: vl.loss, valueClipFrac: vl.clipFrac },
    };
  }

  /** Run one PPO step: the numbered steps of docs/engine.md, each a method below. */
  async trainStep(): Promise<StepResult> {
    // The config of this whole step, read once: a live change made while it runs waits for the next step.
    const s = await this.beginStep(this.cfg);
    // 1–2. Sample responses; cut them after the stop token.
    const roll = await this.rollout(s);
    // 3–4. Forwards over query + response; scores.
    const sc = await this.score(s, roll);
    // 5–6. Rewards and advantages (docs/formats.md §4 and §7). `rawAdv` is before any whitening (its metrics).
    // With oldFromUpdate (GRPO) the advantages are the group-centred scores, which need no log-probs: the
    // reference's stand in for them here, and the rewards and KL statistics are made again after the update.
    const advantagesFrom = (old: number[][]) =>
      this.advantages(s.cfg, sc.penalised, old, sc.bRefLogprobs, roll.bMask, sc.bValues, s.klCoef, s.G);
    let adv = advantagesFrom(sc.oldFromUpdate ? sc.bRefLogprobs : sc.bLogprobs);

    // 7. The update: epochs over shuffled minibatches (with oldFromUpdate it gives the old log-probs, and the
    //    advantages are made again from them).
    const upd = await this.update(s, roll, sc, adv);
    if (sc.oldFromUpdate) adv = advantagesFrom(sc.bLogprobs);
    // 8. KL controller (adaptive: Ziegler et al.), with the batch's mean summed k1.
    this.kl.update(mean(adv.ptr.k1Sum), s.B);
    this._step = s.stepNo;

    // 9. Metrics, health alerts and the rollout.
    return this.finishStep(s, roll, sc, adv, upd);
  }

  /**
   * A step's setting, read once at its start (a live change made while it runs waits for the next step): its
   * sizes, and the plan it runs with, which `fallBack` makes smaller when the device runs out of memory.
   */
  private async beginStep(cfg: TrainConfig): Promise<StepSetting> {
    this.followConfig(cfg);
    const d = derived(cfg);
    const B = cfg.batchSize;
    const stepNo = this.step + 1;
    // Micro-batches: generation, scoring and each minibatch's update run over slices of this many samples
    // (docs/engine.md, "Memory"); the results do not depend on it. When the device runs out of memory in a phase,
    // that phase's work is freed and redone with the smaller plan fallbackPlan gives (src/core/ppo/gpu-plan.ts),
    // before anything of it is used or applied; the run keeps that plan.
    // A device that ran out before starts each step with tfjs's pool of free buffers given back (sized for the last
    // step's slices, it would keep what the smaller plan needs from the device).
    if (this.fallback?.key === this.planKey(cfg)) await this.deviceErrors.release?.();
    // updateReplay turned off (a live change): what the update's recordings hold goes back now.
    if (!cfg.updateReplay) this.gradReplays.dispose();
    const s: StepSetting = {
      cfg,
      B,
      R: cfg.responseLength,
      G: d.groupSize,
      mbSize: d.miniBatchSize,
      stepNo,
      klCoef: this.kl.value,
      T0: now(),
      plan: this.stepPlan(cfg),
      fellBack: null,
      droppedRecordings: null,
      fallBack: async (phase, why) => {
        // The update's recordings hold about its transient peak from one step to the next (update-replay.ts; the
        // estimate counts it: model/size.ts RunShape.updateRecorded): the first time the device runs out while any
        // are held, they go and the update runs through tfjs from then on, at the same plan.
        const recorded = this.gradReplays.size > 0;
        this.gradReplays.dispose();
        await this.deviceErrors.release?.();
        if (recorded && this.updateReplay && cfg.updateReplay) {
          this.updateReplay = false;
          s.droppedRecordings ??= phase;
          return;
        }
        const from = this.planInForce(cfg);
        const next = fallbackPlan(s.plan, phase, cfg);
        if (!next) {
          throw heapExhaustedError(
            { phase, step: stepNo },
            `the device said "${why}" with ${describePlan(from)}, and no smaller plan is left to try`,
          );
        }
        s.fellBack ??= { phase, from };
        s.plan = next;
        this.fallback = { key: this.planKey(cfg), plan: next };
      },
      withFallback: async <T>(
        phase: 'generate' | 'score',
        work: () => Promise<T>,
        free?: (out: T) => void,
      ) => {
        for (;;) {
          const size = phase === 'generate' ? s.plan.generateMicroBatchSize : s.plan.microBatchSize;
          const r = await this.onDevice({ phase, size: Math.min(size, B) }, work, free);
          if ('out' in r) return r.out;
          await s.fallBack(phase, r.ranOut);
        }
      },
    };
    return s;
  }

  /** Steps 1–2: sample the responses and cut them after the stop token. */
  private async rollout(s: StepSetting): Promise<StepRollout> {
    // 1. Sample responses: B / G prompts, each repeated G times in ONE batched generate call (sample i belongs to
    //    group ⌊i / G⌋), pure sampling unless top-k/top-p are set. G = 1 is PPO's one sample per prompt.
    this.phase('generating', s);
    const { cfg, B, R, G } = s;
    const policy = this.models.policy;
    const idx = this.nextPromptIndices(B / G).flatMap((i) => new Array<number>(G).fill(i));
    const groups = groupIds(B, G);
    const queries = idx.map((i) => this.promptTokens[i]);
    const stop = this.stopIds(cfg);
    // One random stream per sample, seeded from the run's: a sample's tokens do not depend on the micro-batch
    // (and generation redone after the device ran out draws the same tokens from fresh streams of the same seeds).
    const rowSeeds = idx.map(() => this.rng.seed());
    const replays0 = decodeReplayCount();
    const gen = await s.withFallback('generate', () =>
      generateInMicroBatches(
        policy,
        queries,
        {
          maxNewTokens: R,
          temperature: cfg.temperature,
          topK: cfg.topK,
          topP: cfg.topP,
          stopToken: stop,
          padId: this.tokenizer.padId,
          rng: rowSeeds.map((seed) => new Rng(seed)),
          replay: cfg.decodeReplay,
          sharePrompts: this.sharedPrefix,
        },
        s.plan.generateMicroBatchSize,
        (done, total) => this.events.progress?.({ phase: 'generating', done, total, unit: 'samples' }),
      ),
    );
    const tGen = now();

    // 2. Truncate after the stop token: later positions are PAD and do not count.
    const bResponses = gen.tokens.map((t) => [...t, ...new Array(R - t.length).fill(this.tokenizer.padId)]);
    const bMask = gen.tokens.map((t) => [...new Array(t.length).fill(1), ...new Array(R - t.length).fill(0)]);
    const stopped = gen.tokens.map((t) => stop !== null && stop.includes(t[t.length - 1]));
    return { idx, groups, queries, stop, gen, replays0, tGen, bResponses, bMask, stopped };
  }

  /**
   * Steps 3–4: the policy's (unless the update gives them), the reference's and the value model's per-token
   * numbers over query + response, in micro-batches; then the scores and the missing-EOS penalty.
   */
  private async score(s: StepSetting, roll: StepRollout): Promise<StepScores> {
    // 3. Forward policy, reference and (PPO only) value model over query+response, in minibatch-sized chunks;
    //    one readback each.
    this.phase('scoring', s);
    // A GRPO step with one epoch of one minibatch updates on-policy: the old log-probs are the policy's own at the
    // update's forward, so they are taken from it (detached, scoring's computation on the same hidden states,
    // oldLogprobsFromUpdate) and scoring runs only the reference, as TRL does with num_iterations 1.
    const { cfg, B, R, mbSize } = s;
    const { policy, ref, value, reward } = this.models;
    const { idx, queries, gen, bResponses, bMask, stop, stopped } = roll;
    const oldFromUpdate =
      this.oldLogprobsFromUpdate && cfg.algorithm === 'grpo' && cfg.ppoEpochs === 1 && mbSize >= B;
    this.lastStepOldLogprobsFromUpdate = oldFromUpdate;
    const Tq = bucket(Math.max(...queries.map((q) => q.length)), policy.config.n_positions - R);
    const score = async () => {
      const micro = s.plan.microBatchSize;
      const bLogprobs: number[][] = new Array<number[]>(B);
      const bRefLogprobs: number[][] = [];
      const bValues: number[][] | null = value ? [] : null;
      const bRmScores: number[] = [];
      for (let s = 0; s < B; s += micro) {
        const rows = Array.from({ length: Math.min(micro, B - s) }, (_, k) => s + k);
        const inp = this.batchInputs(queries, bResponses, bMask, rows, Tq, R);
        const outs = tf.tidy(() => {
          const ids = tf.tensor2d(inp.ids, [inp.n, inp.T], 'int32');
          const attn = tf.tensor2d(inp.attn, [inp.n, inp.T], 'int32');
          const tokens = tf.tensor1d(
            rows.flatMap((i) => bResponses[i]),
            'int32',
          );
          const share = inp.share && forwardShareOf(inp.share);
          const lp = oldFromUpdate
            ? tf.zeros([0])
            : logprobsFromLogits(
                this.responseLogits(policy, ids, attn, inp.Tq, R, share),
                tokens,
                cfg.temperature,
              );
          const rlp = logprobsFromLogits(
            this.responseLogits(ref, ids, attn, inp.Tq, R, share),
            tokens,
            cfg.temperature,
          );
          const v = value
            ? tf.reshape(this.responseValues(value, ids, attn, inp.Tq, R), [-1])
            : tf.zeros([0]);
          // 4a. A learned reward model reads its scalar at the last real token.
          const rm = reward.kind === 'model' ? reward.model.lastTokenValues(ids, attn) : tf.zeros([inp.n]);
          return tf.concat([lp, rlp, v, rm]);
        });
        let data: Float32Array;
        try {
          data = (await outs.data()) as Float32Array;
        } finally {
          outs.dispose();
        }
        // Layout of `data`: [policy logprobs n·R (none when oldFromUpdate) | reference logprobs n·R | values n·R
        // (PPO) | reward-model scores n].
        const nR = inp.n * R;
        const pR = oldFromUpdate ? 0 : nR;
        const vR = value ? nR : 0;
        const part = (k: number, from: number) => Array.from(data.subarray(from + k * R, from + (k + 1) * R));
        rows.forEach((i, k) => {
          if (!oldFromUpdate) bLogprobs[i] = part(k, 0);
          bRefLogprobs.push(part(k, pR));
          bValues?.push(part(k, pR + nR));
          bRmScores.push(data[pR + nR + vR + k]);
        });
        this.events.progress?.({ phase: 'scoring', done: s + rows.length, total: B, unit: 'samples' });
      }
      return { bLogprobs, bRefLogprobs, bValues, bRmScores };
    };
    const { bLogprobs, bRefLogprobs, bValues, bRmScores } = await s.withFallback('score', score);

    // 4. Score: the reward function on the decoded text, or the reward model's output (centred on the mean
    //    reward_stats.json recorded, with rewardModelCenter); then the missing-EOS penalty.
    const promptTexts = idx.map((i) => this.prompts[i]);
    const responseTexts = gen.tokens.map((t) => this.tokenizer.decode(t));
    let scores: number[];
    if (reward.kind === 'fn') {
      const samples: Sample[] = idx.map((_, k) => ({
        prompt: promptTexts[k],
        response: responseTexts[k],
        promptTokens: queries[k],
        responseTokens: gen.tokens[k],
      }));
      scores = await scoreSamples(reward.fn, samples, reward.label);
    } else {
      const centre = cfg.rewardModelCenter && this.rewardMean !== null ? this.rewardMean : 0;
      scores = bRmScores.map((x) => x - centre);
    }
    const penalised = scores.map((x, k) => (stop !== null && !stopped[k] ? x - cfg.missingEosPenalty : x));
    const tScore = now();
    return {
      oldFromUpdate,
      Tq,
      bLogprobs,
      bRefLogprobs,
      bValues,
      scores,
      penalised,
      promptTexts,
      responseTexts,
      tScore,
    };
  }

  /**
   * Step 7: the epochs over shuffled minibatches. With `oldFromUpdate` it also fills `sc.bLogprobs` with the old
   * log-probs the update's forward gave (the caller then makes the advantages again from them).
   */
  private async update(
    s: StepSetting,
    roll: StepRollout,
    sc: StepScores,
    adv: Advantages,
  ): Promise<StepUpdate> {
    // 7. Epochs over shuffled minibatches: one joint loss pg − entropyCoef·entropy (+ klCoef·k3 for GRPO)
    //    (+ vfCoef·vloss for PPO), one gradient clip over every trained model, each model's own Adam step. Early
    //    stop (earlyStopKl): after an epoch in which a minibatch's approx KL passed earlyStopApproxKl, the
    //    remaining epochs are skipped. Nothing is read back inside an epoch: each minibatch's NaN/Inf guard and clip
    //    factor are decided on the device (update.ts jointGuardedStepDeferred) and its figures wait on the device
    //    until one readback at the end of the epoch (earlyStopKl needs them there) or of the update.
    const { cfg, B, R, mbSize, stepNo, klCoef } = s;
    const { policy, value } = this.models;
    const { queries, bResponses, bMask } = roll;
    const { oldFromUpdate, Tq, bLogprobs, bRefLogprobs, bValues } = sc;
    const stepSharePad = this.sharedPrefix ? sharePadOf(queries) : undefined;
    const { advantages: bAdvantages, returns: bReturns } = adv;
    this.phase('updating', s);
    const grpoKl = cfg.algorithm === 'grpo' && klCoef > 0;
    const minibatches: MinibatchStats[] = [];
    // oldFromUpdate: each micro-batch's old log-probs as the update's forward made them, by its rows.
    const keptOld: { rows: number[]; old: tf.Tensor2D }[] = [];
    let epochsRun = 0;
    let updatesDone = 0;
    let skippedUpdates = 0;
    let pending: PendingJointStep<PolicyStat | ValueStat>[] = [];
    // Read the waiting minibatches' figures (one readback) into the step's metrics; the largest approx KL among them.
    const readPending = async (): Promise<number> => {
      const read: JointStepResult<PolicyStat | ValueStat>[] = await readJointSteps(pending);
      pending = [];
      let maxApproxKl = -Infinity;
      for (const upd of read) {
        if (!upd.applied) skippedUpdates++;
        const { valueLoss: vl, valueClipFrac: vcf, ...policyStats } = upd.stats;
        minibatches.push({
          ...policyStats,
          gradNorm: upd.gradNorms[0],
          ...(value ? { valueLoss: vl, valueClipFrac: vcf, valueGradNorm: upd.gradNorms[1] } : {}),
        });
        maxApproxKl = Math.max(maxApproxKl, upd.stats.approxKl);
      }
      return maxApproxKl;
    };
    // The optimiser steps of the whole update run inside one device scope of their own: running out there cannot be
    // undone (the weights may be half-updated), so it ends the step (heapExhaustedError; the session stops the run).
    // Each minibatch's gradients run inside a scope nested in it, checked before the optimiser applies them.
    this.deviceErrors.push({ phase: 'apply', size: Math.min(s.plan.microBatchSize, mbSize) });
    let applyScopeOpen = true;
    const closeApplyScope = async () => {
      applyScopeOpen = false;
      const why = await this.deviceErrors.pop();
      if (why !== null) {
        throw heapExhaustedError(
          { phase: 'update', step: stepNo },
          `the device said "${why}" while the optimisers stepped`,
        );
      }
    };
    try {
      for (let epoch = 0; epoch < cfg.ppoEpochs; epoch++) {
        epochsRun++;
        const perm = this.rng.permutation(B);
        for (let at = 0; at < B; at += mbSize) {
          const rows = perm.slice(at, at + mbSize);
          // The minibatch's counts: every micro-batch's share of a mean divides by these (losses.ts Denominators).
          const denominators: Denominators = {
            tokens: rows.reduce((n, i) => n + bMask[i].reduce((a, b) => a + b, 0), 0),
            rows: rows.length,
          };
          // One attempt at this minibatch's update with `attempt`: redone smaller when the device runs out before
          // the optimisers step (nothing of a failed attempt is applied or kept).
          const update = async (attempt: StepPlan, settle: () => Promise<void>) => {
            // A group's rows go to the same micro-batches (a minibatch's gradient is the same sum whatever rows
            // each micro-batch holds): with the share, its prompt then runs once a micro-batch, not once a row.
            const slices = microSlices(groupedRows(rows, queries), Math.min(attempt.microBatchSize, mbSize));
            // A replayed update (below) records one shape: every minibatch's share is padded to the step's
            // groups, so that minibatches drawing different numbers of a prompt's rows replay one recording.
            // Where even the step's largest pad saves little (most queries distinct), no share: the gathers would cost
            // more than the rows they save.
            const replaying =
              cfg.updateReplay && this.updateReplay && slices.length === 1 && GradReplays.available();
            const sharePad = replaying ? paddedShareWorth(stepSharePad, rows.length, Tq, R) : undefined;
            // One micro-batch's inputs as the host has them (what a replay writes into its recorded buffers).
            const hostBatch = (k: number): Record<string, HostTensor> => {
              const mRows = slices[k];
              const inp = this.batchInputs(queries, bResponses, bMask, mRows, Tq, R, sharePad);
              const pick = (m: number[][]): HostTensor => ({
                values: Float32Array.from(mRows.flatMap((i) => m[i])),
                shape: [mRows.length, R],
                dtype: 'float32',
              });
              const h: Record<string, HostTensor> = {
                ids: { values: inp.ids, shape: [inp.n, inp.T], dtype: 'int32' },
                attn: { values: inp.attn, shape: [inp.n, inp.T], dtype: 'int32' },
                tokens: {
                  values: Int32Array.from(mRows.flatMap((i) => bResponses[i])),
                  shape: [mRows.length * R],
                  dtype: 'int32',
                },
                mask: pick(bMask),
                advantages: pick(bAdvantages),
              };
              if (!oldFromUpdate) h.oldLogprobs = pick(bLogprobs);
              if (value) {
                h.returns = pick(bReturns!);
                h.oldValues = pick(bValues!);
              }
              if (grpoKl) h.refLogprobs = pick(bRefLogprobs);
              if (inp.share) {
                for (const name of SHARE_MAPS) {
                  const values = inp.share[name];
                  h[`share_${name}`] = { values, shape: shareMapShape(inp.share, name), dtype: 'int32' };
                }
              }
              return h;
            };
            // The micro-batch's tensors as the objectives read them; `keep` takes the old log-probs of GRPO's
            // update forward.
            const minibatchOf = (
              t: Record<string, tf.Tensor>,
              keep: (old: tf.Tensor2D) => void,
            ): Minibatch => ({
              ids: t.ids as tf.Tensor2D,
              attn: t.attn as tf.Tensor2D,
              tokens: t.tokens as tf.Tensor1D,
              mask: t.mask as tf.Tensor2D,
              ...(oldFromUpdate ? { keepOld: keep } : { oldLogprobs: t.oldLogprobs as tf.Tensor2D }),
              advantages: t.advantages as tf.Tensor2D,
              denominators: slices.length > 1 ? denominators : undefined,
              ...(value ? { returns: t.returns as tf.Tensor2D, oldValues: t.oldValues as tf.Tensor2D } : {}),
              ...(grpoKl ? { refLogprobs: t.refLogprobs as tf.Tensor2D } : {}),
              ...(t.share_response
                ? {
                    share: forwardShare(
                      Object.fromEntries(SHARE_MAPS.map((k) => [k, t[`share_${k}`]])) as Record<
                        ShareMapName,
                        tf.Tensor
                      >,
                    ),
                  }
                : {}),
            });
            // One micro-batch's tensors, made inside the objective (so freed with its forward) and only then.
            const microBatch = (k: number): Minibatch => {
              const h = hostBatch(k);
              const t = Object.fromEntries(
                Object.entries(h).map(([name, x]) => [name, tf.tensor(x.values, x.shape, x.dtype)]),
              );
              return minibatchOf(t, (old) => keptOld.push({ rows: slices[k], old }));
            };
            const policyPart = {
              vars: policy.trainableVariables(),
              objective: (mb: Minibatch) => this.policyObjective(mb, Tq, cfg, attempt),
            };
            const valuePart = value
              ? {
                  vars: value.trainableVariables(),
                  objective: (mb: Minibatch) => this.valueObjective(value, mb, Tq, cfg, attempt),
                }
              : null;
            // On WebGPU, a whole-minibatch update is recorded once and replayed (update-replay.ts): `replayed`
            // gives that part's differentiation from the recording for its key, or null (through tfjs).
            const replays =
              cfg.updateReplay && this.updateReplay && slices.length === 1 && GradReplays.available()
                ? this.gradReplays
                : null;
            const bakedKey = JSON.stringify([
              cfg,
              Tq,
              attempt.recompute,
              oldFromUpdate,
              grpoKl ? this.kl.value : 0,
            ]);
            const replayed =
              (
                name: string,
                part: { vars: tf.Variable[]; objective: (mb: Minibatch) => Objective<string> },
              ) =>
              (k: number): MicroGrads | null => {
                if (!replays) return null;
                const out = replays.run(
                  `${name}|${bakedKey}`,
                  hostBatch(k),
                  (t) => {
                    const kept: tf.Tensor[] = [];
                    const mb = minibatchOf(t, (old) => kept.push(old));
                    const g = microGrads({ vars: part.vars, objective: () => part.objective(mb) }, 0);
                    return { ...g, kept };
                  },
                  part.vars,
                );
                if (!out) return null;
                // The recording's kept old log-probs are copied: its buffers are written again at the next replay.
                for (const old of out.kept) {
                  keptOld.push({ rows: slices[k], old: tf.keep(tf.mul(old, 1)) as tf.Tensor2D });
                  old.dispose();
                }
                return { value: out.value, grads: out.grads, stats: out.stats };
              };
            const parts: UpdatePart<PolicyStat | ValueStat>[] = [
              {
                optimizer: this.policyOpt,
                vars: policyPart.vars,
                objective: (k) => policyPart.objective(microBatch(k)),
                grads: replayed('policy', policyPart),
              },
            ];
            if (valuePart) {
              parts.push({
                optimizer: this.valueOpt!,
                vars: valuePart.vars,
                objective: (k) => valuePart.objective(microBatch(k)),
                grads: replayed('value', valuePart),
              });
            }
            return jointGuardedStepDeferred<PolicyStat | ValueStat>(parts, cfg.maxGradNorm, {
              microBatches: slices.length,
              maxStats: ['ratioMax'],
              beforeApply: settle,
            });
          };
          await maybeYield(); // a turn for the event loop between minibatches (src/core/base/yield.ts)
          for (;;) {
            const attempt = s.plan;
            const kept = keptOld.length;
            const r = await this.onDevice(
              { phase: 'update', size: Math.min(attempt.microBatchSize, mbSize) },
              (settle) => update(attempt, settle),
              (p) => tf.dispose(p.values),
            );
            if ('out' in r) {
              pending.push(r.out);
              this.events.progress?.({
                phase: 'updating',
                done: ++updatesDone,
                total: cfg.ppoEpochs * Math.ceil(B / mbSize),
                unit: 'updates',
              });
              break;
            }
            // The failed attempt's old log-probs (oldFromUpdate) go with it.
            tf.dispose(keptOld.splice(kept).map((k) => k.old));
            await s.fallBack('update', r.ranOut);
          }
        }
        if (cfg.earlyStopKl && (await readPending()) > cfg.earlyStopApproxKl) break;
      }
      await readPending();
      await closeApplyScope();
    } finally {
      // Figures still waiting when something threw: freed (nothing else holds them).
      tf.dispose(pending.map((p) => p.values));
      if (applyScopeOpen) {
        // Something threw: the scope is closed all the same (what it says then adds nothing to that error).
        applyScopeOpen = false;
        await this.deviceErrors.pop().catch(() => null);
      }
    }
    if (oldFromUpdate) {
      // One readback for every slice's old log-probs (in the order they were kept).
      const joined = keptOld.length === 1 ? keptOld[0].old : tf.concat(keptOld.map((k) => k.old));
      let data: Float32Array;
      try {
        data = (await joined.data()) as Float32Array;
      } finally {
        tf.dispose([joined, ...keptOld.map((k) => k.old)]);
      }
      let at = 0;
      for (const { rows } of keptOld) {
        rows.forEach((i, k) => (bLogprobs[i] = Array.from(data.subarray((at + k) * R, (at + k + 1) * R))));
        at += rows.length;
      }
      if (keptOld.reduce((n, k) => n + k.rows.length, 0) !== B)
        throw new Error(
          `trainStep: the update's forward gave old log-probs for ${keptOld.length} slices, not all ${B} samples`,
        );
    }
    return { minibatches, epochsRun, skippedUpdates, tUpd: now() };
  }

  /** Step 9: the metrics, the health alerts and the rollout, from what the step made. */
  private finishStep(
    s: StepSetting,
    roll: StepRollout,
    sc: StepScores,
    adv: Advantages,
    upd: StepUpdate,
  ): StepResult {
    const { cfg, G, stepNo, klCoef, T0 } = s;
    const { value, reward } = this.models;
    const { groups, queries, replays0, tGen, bResponses, bMask, stopped } = roll;
    const { bLogprobs, bRefLogprobs, bValues, scores, penalised, promptTexts, responseTexts, tScore } = sc;
    const { minibatches, epochsRun, skippedUpdates, tUpd } = upd;
    const { rewards: bRewards, ptr, advantages: bAdvantages, returns: bReturns } = adv;
    const gs = groupStats(scores, G);
    const metrics = stepMetrics({
      step: stepNo,
      scores,
      penalisedScores: penalised,
      rewardStd: gs.rewardStd,
      // Counted on the scores that enter the advantages: an all-equal group there gives A = 0.
      fracRewardZeroStd: groupStats(penalised, G).fracRewardZeroStd,
      hasValueModel: value !== null,
      k1Sum: ptr.k1Sum,
      nonScoreSum: ptr.nonScoreSum,
      klCoef,
      minibatches,
      epochsRun,
      explainedVariance: bValues && bReturns ? explainedVariance(bValues, bReturns, bMask) : null,
      advantageMean: maskedMean(adv.rawAdvantages, bMask),
      advantageStd: Math.sqrt(maskedVar(adv.rawAdvantages, bMask)),
      returnMean: bReturns ? maskedMean(bReturns, bMask) : null,
      counted: bMask.map((m) => m.reduce((a, b) => a + b, 0)),
      stopped,
      learningRate: cfg.learningRate,
      valueLearningRate: cfg.valueLearningRate,
      decodeReplays: decodeReplayCount() - replays0,
      timeGenerate: (tGen - T0) / 1000,
      timeScore: (tScore - tGen) / 1000,
      timeUpdate: (tUpd - tScore) / 1000,
    });
    const previous = this.history.slice(-HEALTH_HISTORY);
    this._history.push(metrics);
    this.phase('idle', s);
    this._badSteps = skippedUpdates > 0 ? this._badSteps + 1 : 0;
    const alerts: (HealthAlert | PlanAlert)[] = healthAlerts(metrics, cfg.targetKl, previous);
    const planNow = this.planInForce(cfg);
    if (s.fellBack) {
      // Said once, on the step that fell back (the plan stays smaller for the rest of the run).
      const { phase, from } = s.fellBack;
      alerts.push({ id: 'device-out-of-memory', step: stepNo, ...planNotice(stepNo, phase, from, planNow) });
    } else if (s.droppedRecordings) {
      alerts.push({
        id: 'device-out-of-memory',
        step: stepNo,
        ...recordingsDroppedNotice(stepNo, s.droppedRecordings, planNow),
      });
    }
    if (skippedUpdates > 0) {
      alerts.unshift({
        id: 'non-finite',
        step: stepNo,
        message:
          `${skippedUpdates} update(s) this step had a NaN/Inf loss or gradient and were skipped; the weights are unchanged by them.` +
          (this.badSteps >= 3 ? ' Three steps in a row: pausing.' : ''),
        advice: 'Lower the learning rate or maxGradNorm, and check that the reward returns finite numbers.',
      });
    }
    if (reward.kind === 'model' && cfg.rewardModelCenter && this.rewardMean === null && !this.saidUncentred) {
      this.saidUncentred = true;
      alerts.push({
        id: 'reward-uncentred',
        step: stepNo,
        message: `The reward model ${reward.label} has no ${REWARD_STATS_FILE}, so its scores are used as they are, not centred on the mean of its training responses.`,
        advice: `Train it with train-reward (it writes ${REWARD_STATS_FILE} beside the model), or set rewardModelCenter to false.`,
      });
    }
    const rollout: Rollout = {
      queries,
      responses: bResponses,
      mask: bMask,
      logprobs: bLogprobs,
      refLogprobs: bRefLogprobs,
      values: bValues,
      rewards: bRewards,
      advantages: bAdvantages,
      returns: bReturns,
      groups,
      scores,
      penalisedScores: penalised,
      promptTexts,
      responseTexts,
      kl: ptr.kl,
    };
    const first = minibatches[0];
    const firstMinibatch = {
      ratioMean: first.ratioMean,
      ratioMax: first.ratioMax,
      approxKl: first.approxKl,
      clipFrac: first.clipFrac,
    };
    return {
      metrics,
      rollout,
      alerts,
      plan: planNow,
      firstMinibatch,
      skippedUpdates,
      shouldPause: this.badSteps >= 3,
    };
  }

  /**
   * Steps 5–6 for the configured algorithm, on the host (docs/formats.md §4, §7):
   * - ppo: r_t = −β·k_t (+ score at the last counted token), optional reward whitening, GAE, advantages whitened
   *   once over the batch (whitenAdvantages); returns = raw advantages + values.
   * - grpo: A_i from the group-centred scores (scaleRewards) at every counted token; rewards = the score at the last
   *   counted token (its KL is the loss term klCoef·k3, step 7).
   * - rloo: r_i = s_i − β·Σ_t k_t, leave-one-out baseline, optional whitening over samples (normalizeAdvantages).
   * - reinforce++: per-token KL-penalised rewards, discounted returns G_t whitened over all counted tokens.
   * `ptr.k1Sum` (the `kl` metric) is always Σ k1 against the reference; `ptr.nonScoreSum` the KL penalty per sample
   * (for grpo: −β·Σ_t k3 at the rollout policy, the loss term's value at ratio 1).
   */
  private advantages(
    cfg: TrainConfig,
    scores: number[],
    logprobs: number[][],
    refLogprobs: number[][],
    mask: number[][],
    values: number[][] | null,
    klCoef: number,
    G: number,
  ): Advantages {
    switch (cfg.algorithm) {
      case 'ppo': {
        const ptr = perTokenRewards(scores, logprobs, refLogprobs, mask, klCoef, cfg.klEstimator);
        // Optional reward whitening (scale only, TRL's shift_mean=False); GAE; advantages whitened once over the batch.
        const rewards = cfg.whitenRewards ? maskedWhiten(ptr.rewards, mask, false) : ptr.rewards;
        const { advantages: raw, returns } = gae(rewards, values!, mask, cfg.gamma, cfg.lam);
        const advantages = cfg.whitenAdvantages ? maskedWhiten(raw, mask, true) : raw;
        return { rewards, advantages, rawAdvantages: raw, returns, ptr };
      }
      case 'grpo': {
        const ptr = perTokenRewards(scores, logprobs, refLogprobs, mask, klCoef, 'k3');
        const rewards = perTokenRewards(scores, logprobs, refLogprobs, mask, 0, 'k1').rewards;
        const a = broadcastToTokens(grpoAdvantages(scores, G, cfg.scaleRewards), mask);
        return { rewards, advantages: a, rawAdvantages: a, returns: null, ptr };
      }
      case 'rloo': {
        const r = rlooAdvantages(
          scores,
          logprobs,
          refLogprobs,
          mask,
          klCoef,
          cfg.klEstimator,
          G,
          cfg.normalizeAdvantages,
        );
        const raw = cfg.normalizeAdvantages
          ? rlooAdvantages(scores, logprobs, refLogprobs, mask, klCoef, cfg.klEstimator, G, false).advantages
          : r.advantages;
        return {
          rewards: r.perToken.rewards,
          advantages: broadcastToTokens(r.advantages, mask),
          rawAdvantages: broadcastToTokens(raw, mask),
          returns: null,
          ptr: r.perToken,
        };
      }
      case 'reinforce++': {
        const r = reinforcePlusPlus(scores, logprobs, refLogprobs, mask, klCoef, cfg.klEstimator, cfg.gamma);
        return {
          rewards: r.perToken.rewards,
          advantages: r.advantages,
          rawAdvantages: r.returns,
          returns: null,
          ptr: r.perToken,
        };
      }
    }
  }

  /**
   * Free the trainer's own state: the optimisers' (Adam moments) and the update's recordings (WebGPU). The models:
   * disposeModels, or disposeAll for both.
   */
  disposeOptimizers(): void {
    this.policyOpt.dispose();
    this.valueOpt?.dispose();
    this.gradReplays.dispose();
  }

  /** Free the optimisers and every model of `models` (disposeModels), each tensor once. */
  disposeAll(otherRewards: readonly RewardSource[] = []): void {
    this.disposeOptimizers();
    disposeModels(this.models, otherRewards);
  }
}
