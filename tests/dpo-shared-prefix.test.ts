/**
 * DPO with a pair's prompt run once (src/core/dpo/trainer.ts `completionLogps` through model/shared-prefix.ts): a
 * pair's chosen and rejected rows hold the same left-padded prompt, so the trunk runs it once for both. Against the
 * full layout on WASM: the completions' log-probs and their gradients (full fine-tuning and LoRA), the cached
 * reference log-probs, and two training steps' metrics and weights; the trunk is called with the share.
 */
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { makeTinyFolder } from './helpers/tiny';
import { liven, relDiff } from './helpers/f16-base';
import type { ModelFiles } from '../src/core/model/folder';
import { setNodeBackend } from '../src/cli/backend-node';
import { nodeFiles } from '../src/cli/files-node';
import { validateDpoConfig } from '../src/common/config/dpo';
import { completionLogps, DpoTrainer } from '../src/core/dpo/trainer';
import { batchOf } from '../src/core/dpo/data';
import { prefixShare, setSharedPrefixDefault } from '../src/core/model/shared-prefix';

let TINY: ModelFiles;
const DATA_PATH = 'pairs.jsonl';
// Prompts of different lengths (left padding), two pairs with the same prompt (a group of 4 rows).
const DATA = {
  text: Array.from({ length: 12 }, (_, i) =>
    JSON.stringify({
      prompt: i === 1 ? 'the day was 0' : `the day was ${i}${'!'.repeat(i % 3)}`,
      chosen: ` fine and ${'ok'.repeat(1 + (i % 2))}`,
      rejected: ` bad${i % 4 ? ' news' : ''}`,
    }),
  ).join('\n'),
  source: DATA_PATH,
};

beforeAll(async () => {
  await setNodeBackend('wasm');
  TINY = nodeFiles(await makeTinyFolder());
});
afterEach(() => setSharedPrefixDefault(true));

const cfgOf = (lora: number) =>
  validateDpoConfig({
    algorithm: 'dpo',
    data: DATA_PATH,
    batchSize: 4,
    steps: 2,
    evalEvery: 2,
    heldOut: 0.25,
    learningRate: 1e-3,
    lora,
  });

async function build(lora: number, share: boolean): Promise<DpoTrainer> {
  setSharedPrefixDefault(share);
  const t = await DpoTrainer.build(cfgOf(lora), TINY, DATA);
  expect(t.sharedPrefix).toBe(share);
  return t;
}

describe.each([0, 2])('DPO with the prompt shared (lora %i)', (lora) => {
  it('log-probs and their gradients equal the full layout, the trunk runs compact rows', async () => {
    const t = await build(lora, true);
    try {
      // Lines 0 and 1 hold the same prompt (wherever the split put them), with lines 2 and 3: 8 rows, 3 distinct
      // prompts, one of them held by 4 rows.
      const byLine = [...t.train, ...t.held].sort((x, y) => x.line - y.line);
      const b = batchOf(byLine.slice(0, 4), t.tokenizer.padId);
      const share = prefixShare(b.ids, b.attn, b.n, b.T, b.Tq)!;
      expect([share.groups, share.groupMax]).toEqual([3, 4]);
      // LoRA's B starts at zero, which zeroes A's gradient: non-zero B's, so every gradient is compared.
      if (t.policy.lora) liven(t.policy.lora);
      const vars = t.policy.trainableVariables();
      const run = (share: boolean) => {
        const { value, grads } = tf.variableGrads(() => tf.sum(completionLogps(t.policy, b, share)), vars);
        const out = {
          lp: value.dataSync().slice(),
          grads: vars.map((v) => grads[v.name].dataSync().slice()),
        };
        value.dispose();
        tf.dispose(Object.values(grads));
        return out;
      };
      const before = tf.memory().numTensors;
      const trunk = vi.spyOn(t.policy, 'trunk');
      const on = run(true);
      expect(trunk.mock.calls[0][3]?.share, 'the trunk got the share').toBeDefined();
      trunk.mockClear();
      const off = run(false);
      expect(trunk.mock.calls[0][3]?.share).toBeUndefined();
      trunk.mockRestore();
      const lps = completionLogps(t.policy, b, true);
      expect(lps.shape).toEqual([8]);
      lps.dispose();
      expect(relDiff(on.lp, off.lp)).toBeLessThan(1e-5);
      off.grads.forEach((g, i) => {
        expect(
          g.some((x) => x !== 0),
          `gradient ${i} not all zero`,
        ).toBe(true);
        expect(relDiff(on.grads[i], g), `gradient of ${vars[i].name}`).toBeLessThan(1e-5);
      });
      expect(tf.memory().numTensors).toBe(before);
    } finally {
      t.dispose();
    }
  }, 60_000);

  it('two steps: the same reference, metrics and weights', async () => {
    const on = await build(lora, true);
    const off = await build(lora, false);
    try {
      expect(relDiff(on.refTrain.chosen, off.refTrain.chosen)).toBeLessThan(1e-5);
      expect(relDiff(on.refTrain.rejected, off.refTrain.rejected)).toBeLessThan(1e-5);
      expect(relDiff(on.refHeld.chosen, off.refHeld.chosen)).toBeLessThan(1e-5);
      for (let s = 1; s <= 2; s++) {
        const [a, b] = [await on.trainStep(s === 2), await off.trainStep(s === 2)];
        for (const k of ['loss', 'gradNorm', 'logps/chosen', 'logps/rejected', 'rewards/margins'] as const)
          expect(Math.abs(a[k] - b[k]), `${k} at step ${s}`).toBeLessThanOrEqual(
            1e-5 * Math.max(1, Math.abs(b[k])),
          );
        if (s === 2) expect(a['eval/loss']).toBeCloseTo(b['eval/loss']!, 5);
      }
      const vs = off.policy.trainableVariables();
      on.policy.trainableVariables().forEach((v, i) => {
        const [x, y] = [v.dataSync(), vs[i].dataSync()];
        let d = 0;
        for (let j = 0; j < x.length; j++) d = Math.max(d, Math.abs(x[j] - y[j]));
        expect(d, v.name).toBeLessThan(1e-5);
      });
    } finally {
      on.dispose();
      off.dispose();
    }
  }, 60_000);
});
