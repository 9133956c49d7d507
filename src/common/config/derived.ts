/** What follows from a validated config (group sizes, whether there is a value model, derived sizes). */
import type { TrainConfig } from './fields';

/** G: the config's groupSize, or its algorithm's default when 0 (1 for ppo and reinforce++, 4 for grpo and rloo). */
export function groupSizeOf(cfg: Pick<TrainConfig, 'algorithm' | 'groupSize'>): number {
  if (cfg.groupSize > 0) return cfg.groupSize;
  return cfg.algorithm === 'grpo' || cfg.algorithm === 'rloo' ? 4 : 1;
}

/** Critic-free algorithms build no value model (docs/formats.md §7). */
export function hasValueModel(cfg: Pick<TrainConfig, 'algorithm'>): boolean {
  return cfg.algorithm === 'ppo';
}

export interface DerivedConfig {
  /** Samples per minibatch: batchSize / miniBatches. */
  miniBatchSize: number;
  /** Optimiser steps per PPO step: miniBatches × ppoEpochs. */
  updatesPerStep: number;
  /** Samples drawn over the whole run: steps × batchSize. */
  totalSamples: number;
  /** Upper bound on response tokens per rollout: batchSize × responseLength. */
  maxResponseTokensPerStep: number;
  /** Pure sampling (no top-k / top-p), so the KL estimate is unbiased. */
  pureSampling: boolean;
  /** G, samples per prompt: groupSize, or the algorithm's default when groupSize is 0. */
  groupSize: number;
  /** Distinct prompts per step: batchSize / groupSize. */
  promptsPerStep: number;
  /** Whether the run has a value model (ppo) or is critic-free. */
  hasValueModel: boolean;
}

export function derived(cfg: TrainConfig): DerivedConfig {
  return {
    miniBatchSize: cfg.batchSize / cfg.miniBatches,
    updatesPerStep: cfg.miniBatches * cfg.ppoEpochs,
    totalSamples: cfg.steps * cfg.batchSize,
    maxResponseTokensPerStep: cfg.batchSize * cfg.responseLength,
    pureSampling: cfg.topK === 0 && cfg.topP === 1,
    groupSize: groupSizeOf(cfg),
    promptsPerStep: cfg.batchSize / groupSizeOf(cfg),
    hasValueModel: hasValueModel(cfg),
  };
}

// ---------------------------------------------------------------------------------------------------------
// URL hash: only keys that differ from the defaults, `key=value&...` (form-urlencoded), in table order.
