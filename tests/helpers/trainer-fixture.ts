/**
 * The tiny-trainer fixture shared by the trainer tests (trainer, lora-trainer, engine-audit, algorithms):
 * resources that open the test's tiny model folder as "tiny-test", a dense reward a random model can move, and
 * the small config those tests start from.
 */
import { validateConfig, type TrainConfig } from '../../src/common/config';
import type { Resources, BuildOptions } from '../../src/core/ppo/setup';
import type { ModelFiles } from '../../src/core/model/folder';
import { nodeFiles } from '../../src/cli/files-node';
import { loadTaskNode } from '../../src/cli/tasks-node';
import { parseGPT2Config } from '../../src/core/model/config';
import { tokenizerFor } from '../../src/core/tokenizer';
import type { Tokenizer } from '../../src/core/tokenizer/types';

/** Resources where "tiny-test" is the folder `dir()` names (read when a model is opened), plus `extra` by name. */
export function tinyResources(dir: () => string, extra: Record<string, ModelFiles> = {}): Resources {
  return {
    modelFiles: (p) => extra[p] ?? nodeFiles(p === 'tiny-test' ? dir() : p),
    loadTask: loadTaskNode,
  };
}

/** A dense reward a random model can move: the mean byte value of the response, in [0, 1]. */
export const meanByteReward: BuildOptions = {
  rewardFn: {
    label: 'mean-byte',
    fn: (s) => s.responseTokens.reduce((a, b) => a + b, 0) / (256 * s.responseTokens.length),
  },
};

/** The mean id of the response scaled to [0, 1]: the Llama-family fixtures' dense reward (they have 512 ids). */
export const meanIdReward: BuildOptions = {
  rewardFn: {
    label: 'mean-id',
    fn: (s) => s.responseTokens.reduce((a, b) => a + b, 0) / (512 * Math.max(1, s.responseTokens.length)),
  },
};

/** The trainer tests' config: 4 prompts, batch 4 in 2 minibatches × 2 epochs, 8 tokens, a large learning rate. */
export function tinyConfig(over: Partial<TrainConfig> = {}): TrainConfig {
  return validateConfig({
    model: 'tiny-test',
    task: null,
    prompts: ['Hello', 'The day', 'We', 'A long time ago'],
    seed: 3,
    steps: 4,
    batchSize: 4,
    miniBatches: 2,
    ppoEpochs: 2,
    responseLength: 8,
    learningRate: 3e-3,
    valueLearningRate: 3e-3,
    ...over,
  });
}

/**
 * The bytes tokenizer for a model whose vocabulary is larger than its 258 ids: every id decodes as the byte id % 256
 * (a random model samples ids past 257; rewards read the text).
 */
export function bytesModulo(): Tokenizer {
  const t = tokenizerFor(
    parseGPT2Config({
      vocab_size: 258,
      n_positions: 64,
      n_embd: 8,
      n_layer: 1,
      n_head: 1,
      tokenizer: 'bytes',
      bos_token_id: 256,
      eos_token_id: 256,
      pad_token_id: 257,
    }),
  );
  return {
    kind: t.kind,
    vocabSize: t.vocabSize,
    eosId: t.eosId,
    padId: t.padId,
    encode: (text) => t.encode(text),
    decode: (ids) => t.decode(ids.map((i) => i % 256)),
    decodeToken: (i) => t.decodeToken(i % 256),
  };
}
