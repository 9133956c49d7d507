/**
 * DPO training (src/core/dpo/trainer.ts, contracts §9) on the tiny model and the shipped preference pairs:
 * step 1 is at the reference (sigmoid ln 2, IPO (1/(2β))², hinge 1, margins 0) with a frozen copy and with LoRA's
 * adapters-off base; the step's loss is the hand-computable DPO loss of the cached reference log-probs; held-out
 * metrics at evalEvery steps and the last; micro-batches give the same step; resume from a checkpoint is exact;
 * config and data errors are clear and name the key or the line.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { makeTinyFolder } from './helpers/tiny';
import type { ModelFiles } from '../src/core/model/folder';
import * as tf from '@tensorflow/tfjs-core';
import { setNodeBackend } from '../src/cli/backend-node';
import { nodeFiles } from '../src/cli/files-node';
import { memoryFiles } from '../src/core/model/folder';
import { collectBytes } from '../src/core/model/safetensors';
import { validateDpoConfig } from '../src/common/config/dpo';
import { DpoTrainer, type DpoStepMetrics } from '../src/core/dpo/trainer';
import { dpoLoss } from '../src/core/dpo/loss';
import { batchOf } from '../src/core/dpo/data';

// A small random bytes-tokenizer GPT-2 (64 positions) on the WASM backend, and 20 short pairs.
let TINY: ModelFiles;
const DATA_PATH = 'pairs.jsonl';
const GOOD = ['good', 'great', 'nice', 'fine', 'kind'];
const BAD = ['bad', 'awful', 'poor', 'sad', 'mean'];
const DATA = {
  text: Array.from({ length: 20 }, (_, i) =>
    JSON.stringify({ prompt: `it is ${i}`, chosen: ` ${GOOD[i % 5]}`, rejected: ` ${BAD[(i * 3) % 5]}` }),
  ).join('\n'),
  source: DATA_PATH,
};

beforeAll(async () => {
  await setNodeBackend('wasm');
  TINY = nodeFiles(await makeTinyFolder());
});

const cfgOf = (extra: Record<string, unknown> = {}) =>
  validateDpoConfig({
    algorithm: 'dpo',
    data: DATA_PATH,
    batchSize: 4,
    steps: 4,
    evalEvery: 2,
    learningRate: 1e-3,
    ...extra,
  });

async function weights(t: DpoTrainer): Promise<Float32Array[]> {
  return Promise.all(t.policy.trainableVariables().map(async (v) => (await v.data()) as Float32Array));
}

async function steps(t: DpoTrainer, n: number, last: number): Promise<DpoStepMetrics[]> {
  const out: DpoStepMetrics[] = [];
  for (let i = 0; i < n; i++) {
    const next = t.step + 1;
    out.push(await t.trainStep(next === last || next % t.cfg.evalEvery === 0));
  }
  return out;
}

describe('DPO trainer', () => {
  for (const [loss, first] of [
    ['sigmoid', Math.LN2],
    ['ipo', 25],
    ['hinge', 1],
  ] as const) {
    for (const lora of [0, 2]) {
      it(`step 1 at the reference: ${loss} = ${first.toFixed(4)}, margins 0 (${lora ? 'LoRA, adapters-off base' : 'frozen copy'})`, async () => {
        const t = await DpoTrainer.build(cfgOf({ dpoLoss: loss, lora, steps: 1 }), TINY, DATA);
        try {
          if (lora) expect(t.ref).toBe(t.policy.base);
          else expect(t.ref).not.toBe(t.policy);
          const m = await t.trainStep(false);
          expect(m.loss).toBeCloseTo(first, 5);
          expect(m['rewards/margins']).toBeCloseTo(0, 6);
          expect(m['rewards/chosen']).toBeCloseTo(0, 6);
          expect(m['rewards/accuracies']).toBe(0);
          expect(m['logps/chosen']).toBeLessThan(0);
        } finally {
          t.dispose();
        }
      }, 60_000);
    }
  }

  it('the step’s loss and metrics are the DPO loss of the policy’s log-probs and the cached reference’s', async () => {
    const t = await DpoTrainer.build(cfgOf({ steps: 3, learningRate: 5e-3 }), TINY, DATA);
    try {
      await steps(t, 2, 3); // move the policy away from the reference
      // The third step's batch, drawn as the trainer will draw it.
      const rng = t.rng.state();
      const order = [...t.order];
      let cursor = t.cursor;
      const rows: number[] = [];
      while (rows.length < 4) rows.push(order[cursor++]);
      const pairs = rows.map((i) => t.train[i]);
      const expected = tf.tidy(() => {
        const b = batchOf(pairs, t.tokenizer.padId);
        // Σ_t log π(token) by a plain gather over the full logits.
        const logits = t.policy.logits(
          tf.tensor2d(b.ids, [b.n, b.T], 'int32'),
          tf.tensor2d(b.attn, [b.n, b.T], 'int32'),
        );
        const ls = tf.logSoftmax(logits).arraySync() as number[][][];
        const lp: number[] = [];
        for (let k = 0; k < b.n; k++) {
          let s = 0;
          for (let r = 0; r < b.R; r++)
            if (b.mask[k * b.R + r]) s += ls[k][b.Tq - 1 + r][b.tokens[k * b.R + r]];
          lp.push(s);
        }
        const out = dpoLoss(
          tf.tensor1d(lp.slice(0, 4)),
          tf.tensor1d(lp.slice(4)),
          rows.map((i) => t.refTrain.chosen[i]),
          rows.map((i) => t.refTrain.rejected[i]),
          { beta: 0.1, loss: 'sigmoid' },
        );
        return {
          loss: out.loss.dataSync()[0],
          margins: out.metrics['rewards/margins'].dataSync()[0],
          lc: lp.slice(0, 4),
        };
      });
      expect(t.rng.state()).toEqual(rng);
      const m = await t.trainStep(true);
      expect(m.loss).toBeCloseTo(expected.loss, 5);
      expect(m['rewards/margins']).toBeCloseTo(expected.margins, 5);
      expect(m['logps/chosen']).toBeCloseTo(expected.lc.reduce((a, b) => a + b, 0) / 4, 4);
      expect(m['eval/loss']).toBeGreaterThan(0);
    } finally {
      t.dispose();
    }
  }, 60_000);

  it('held-out metrics at evalEvery steps and the last step only', async () => {
    const t = await DpoTrainer.build(cfgOf({ steps: 5, evalEvery: 2 }), TINY, DATA);
    try {
      const ms = await steps(t, 5, 5);
      expect(ms.map((m) => m['eval/rewards/accuracies'] !== undefined)).toEqual([
        false,
        true,
        false,
        true,
        true,
      ]);
      expect(Object.keys(ms[1])).toEqual(
        expect.arrayContaining(['eval/loss', 'eval/rewards/accuracies', 'eval/rewards/margins']),
      );
      expect(t.held.length).toBe(2); // 10 % of 20 pairs
    } finally {
      t.dispose();
    }
  }, 60_000);

  it('micro-batches of 2 give the same step as the whole batch of 4', async () => {
    const a = await DpoTrainer.build(cfgOf({ steps: 2 }), TINY, DATA);
    const b = await DpoTrainer.build(cfgOf({ steps: 2, microBatchSize: 2 }), TINY, DATA);
    try {
      const ma = await steps(a, 2, 2);
      const mb = await steps(b, 2, 2);
      expect(mb[1].loss).toBeCloseTo(ma[1].loss, 5);
      expect(mb[1].gradNorm).toBeCloseTo(ma[1].gradNorm, 4);
      const [wa, wb] = [await weights(a), await weights(b)];
      wa.forEach((w, i) => {
        let d = 0;
        for (let j = 0; j < w.length; j++) d = Math.max(d, Math.abs(w[j] - wb[i][j]));
        expect(d).toBeLessThan(1e-5);
      });
    } finally {
      a.dispose();
      b.dispose();
    }
  }, 60_000);

  for (const lora of [0, 2]) {
    it(`resume from a checkpoint is exact (${lora ? 'LoRA' : 'full'})`, async () => {
      const straight = await DpoTrainer.build(cfgOf({ steps: 4, lora }), TINY, DATA);
      const first = await DpoTrainer.build(cfgOf({ steps: 4, lora }), TINY, DATA);
      try {
        const ms = await steps(straight, 4, 4);
        await steps(first, 2, 4);
        const files = new Map<string, Uint8Array>();
        for (const [k, v] of await first.checkpointSources()) files.set(k, await collectBytes(v));
        const resumed = await DpoTrainer.restore(memoryFiles('ckpt', files), DATA);
        try {
          expect(resumed.step).toBe(2);
          const rest = await steps(resumed, 2, 4);
          expect(rest.map((m) => ({ ...m, timeStep: 0 }))).toEqual(
            ms.slice(2).map((m) => ({ ...m, timeStep: 0 })),
          );
          const [ws, wr] = [await weights(straight), await weights(resumed)];
          ws.forEach((w, i) => expect(Array.from(wr[i])).toEqual(Array.from(w)));
        } finally {
          resumed.dispose();
        }
      } finally {
        straight.dispose();
        first.dispose();
      }
    }, 120_000);
  }

  it('data errors name the line: missing field, empty string, a pair longer than the context', async () => {
    const bad = [
      '{"prompt":"a","chosen":"b","rejected":"c"}',
      '',
      '{"prompt":"a","chosen":"","rejected":"c"}',
      `{"prompt":"${'x'.repeat(80)}","chosen":"b","rejected":"c"}`,
    ].join('\n');
    await expect(DpoTrainer.build(cfgOf(), TINY, { text: bad, source: 'pairs.jsonl' })).rejects.toThrow(
      /pairs\.jsonl: 2 bad pairs: line 3: "chosen" is empty, line 4: prompt \+ \w+ \+ EOS is \d+ tokens, more than the model's \d+ positions/,
    );
    await expect(
      DpoTrainer.build(cfgOf(), TINY, { text: '{"prompt":"a","chosen":"b"}\n', source: 'p.jsonl' }),
    ).rejects.toThrow(/p\.jsonl: 1 bad line: line 1: "rejected" is missing/);
  });

  it('config errors name the key: RL-only keys, unknown keys, ranges', () => {
    expect(() => validateDpoConfig({ algorithm: 'dpo', data: 'x', clipRange: 0.2 })).toThrow(
      /"clipRange" is a key of the RL algorithms .* not of "dpo"/,
    );
    expect(() => validateDpoConfig({ algorithm: 'dpo', data: 'x', betta: 0.2 })).toThrow(
      /unknown key "betta"/,
    );
    expect(() => validateDpoConfig({ algorithm: 'dpo', data: 'x', beta: 0 })).toThrow(
      /"beta" must be a number > 0/,
    );
    expect(() => validateDpoConfig({ algorithm: 'dpo', data: 'x', dpoLoss: 'kto' })).toThrow(
      /"dpoLoss" must be one of/,
    );
    expect(() =>
      validateDpoConfig({ algorithm: 'dpo', data: 'x', dpoLoss: 'ipo', labelSmoothing: 0.1 }),
    ).toThrow(/"labelSmoothing" applies to dpoLoss "sigmoid" only/);
    expect(() => validateDpoConfig({ algorithm: 'dpo' })).toThrow(/"data" must be the path/);
    expect(validateDpoConfig({ algorithm: 'dpo', data: 'x' })).toMatchObject({
      beta: 0.1,
      dpoLoss: 'sigmoid',
      heldOut: 0.1,
      labelSmoothing: 0,
    });
  });
});
