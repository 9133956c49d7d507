/**
 * Issue #33, defect 11 in the engine: SFT with more examples per step than its file has is refused with an error
 * that names both numbers (the app's SFT card says the same before it sends the job; every other caller gets it
 * from SftTrainer.build), and the refused build leaves no tensors behind.
 */
import { describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles } from '../src/cli/files-node';
import { UserError } from '../src/common/errors';
import { checkSftBatch, SftTrainer } from '../src/core/sft/sft';

const TWO =
  '{"prompt":"The movie was","completion":" great."}\n{"prompt":"The food was","completion":" lovely."}\n';

describe('SFT examples per step', () => {
  it('more than the file has is a UserError naming the value and the number of examples', async () => {
    await useCpu();
    const files = nodeFiles(await makeTinyFolder({ n_layer: 1, n_embd: 16 }));
    const before = tf.memory().numTensors;
    const build = (batchSize: number) =>
      SftTrainer.build(
        files,
        { text: TWO, source: 'warm.jsonl' },
        { steps: 1, batchSize, learningRate: 1e-3, maxGradNorm: 1, seed: 1 },
      );
    const refused = build(3);
    await expect(refused).rejects.toThrow(UserError);
    await expect(refused).rejects.toThrow(
      'examples per step (batchSize) is 3, but warm.jsonl has 2 examples: choose at most 2, or add examples.',
    );
    // The model it loaded to read the examples is freed.
    expect(tf.memory().numTensors).toBe(before);

    const t = await build(2);
    expect((await t.trainStep()).step).toBe(1);
    t.dispose();
    expect(tf.memory().numTensors).toBe(before);
  });

  it('one example: the message says "1 example"', () => {
    expect(() => checkSftBatch(4, 1, 'one.jsonl')).toThrow(
      'examples per step (batchSize) is 4, but one.jsonl has 1 example: choose at most 1, or add examples.',
    );
    expect(() => checkSftBatch(1, 1, 'one.jsonl')).not.toThrow();
  });
});
