/**
 * A group's prompt run once (src/core/model/shared-prefix.ts): the index maps against a hand-worked batch, and the
 * trunk over the compact rows against the full layout for GPT-2, Llama, Qwen2 (biases, untied head) and Qwen3 (q/k
 * norms) under LoRA — the hidden states at the response-predicting positions and every LoRA gradient of a loss on
 * them, with and without recomputation, with no tensor left behind. On the CPU backend (the reference);
 * tests/shared-prefix-trainer.test.ts runs whole GRPO steps both ways, tests/webgpu-shared-prefix.test.ts the
 * same on WebGPU.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { liven, relDiff, tinyGpt2, tinyQwen2, TINY_QWEN2_JSON, tinyQwen3 } from './helpers/f16-base';
import {
  prefixShare,
  setSharedPrefixDefault,
  sharedPrefixDefault,
  shareTensors,
} from '../src/core/model/shared-prefix';
import { applySharedPrefix } from '../src/cli/backend-node';
import { groupedRows, paddedShareWorth, sharePadOf } from '../src/core/ppo/trainer';
import { parseLlamaConfig } from '../src/core/model/llama-config';
import { lmRandom } from '../src/core/model/causal-lm';
import { LoraAdapters } from '../src/core/model/lora';
import type { LMConfig } from '../src/core/model/config';
import { sharedPrefixBatch, trunkBothWays } from './helpers/shared-prefix';

beforeAll(useCpu);

describe('prefixShare', () => {
  it('maps a hand-worked batch: rows 0 and 2 share their query, row 1 does not', () => {
    // T 5, Tq 3, R 2. Row 0: query [7, 8] left-padded; row 1: [7, 8, 9]; row 2: row 0's query.
    const ids = Int32Array.from([0, 7, 8, 1, 2, 7, 8, 9, 3, 4, 0, 7, 8, 5, 6]);
    const attn = Int32Array.from([0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0]);
    const s = prefixShare(ids, attn, 3, 5, 3)!;
    expect(s.groups).toBe(2);
    // Compact rows: group 0's positions 0..2 (row 0's), group 1's (row 1's), then each row's 2 response positions.
    expect(Array.from(s.compact)).toEqual([0, 1, 2, 5, 6, 7, 3, 4, 8, 9, 13, 14]);
    expect(Array.from(s.expand)).toEqual([0, 1, 2, 6, 7, 3, 4, 5, 8, 9, 0, 1, 2, 10, 11]);
    // Response-predicting positions Tq − 1 + r: the group's last query position, then the row's first response.
    expect(Array.from(s.response)).toEqual([2, 6, 5, 8, 2, 10]);
    // Every compact row, expanded, is itself.
    s.compact.forEach((full, c) => expect(s.expand[full]).toBe(c));
    // The shared prompt rows' copies (groups of at most 2; 15 = n·T, the zero row, where a group has one row).
    expect(s.groupMax).toBe(2);
    expect(Array.from(s.members)).toEqual([0, 10, 1, 11, 2, 12, 5, 15, 6, 15, 7, 15]);
    // Full rows represented by no compact row (row 2's prompt) point at N' = 12.
    expect(Array.from(s.inverse)).toEqual([0, 1, 2, 6, 7, 3, 4, 5, 8, 9, 12, 12, 12, 10, 11]);
    // The response positions reading each group's last prompt row (6 = n·R, the zero row, where fewer): rows 0 and 2
    // (positions 0 and 4) read group 0's, row 1 (position 2) group 1's. The gradient's route: a group's last prompt
    // row from its sum (7, 8: after dy and the zero row), a response row from its one reader, the rest zeros.
    expect(Array.from(s.responseGroups)).toEqual([0, 4, 2, 6]);
    expect(Array.from(s.responseRoute)).toEqual([6, 6, 7, 6, 6, 8, 1, 6, 3, 6, 5, 6]);
  });

  it("pads the maps to a step's groups: the extra group is inert, the rest as before", () => {
    const ids = Int32Array.from([0, 7, 8, 1, 2, 7, 8, 9, 3, 4, 0, 7, 8, 5, 6]);
    const attn = Int32Array.from([0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0]);
    const s = prefixShare(ids, attn, 3, 5, 3, { groups: 3, groupMax: 3 })!;
    expect(s.groups).toBe(3);
    expect(s.groupMax).toBe(3);
    // Group 2 (padding) computes group 0's prompt rows again; responses start at 3·Tq = 9.
    expect(Array.from(s.compact)).toEqual([0, 1, 2, 5, 6, 7, 0, 1, 2, 3, 4, 8, 9, 13, 14]);
    expect(Array.from(s.expand)).toEqual([0, 1, 2, 9, 10, 3, 4, 5, 11, 12, 0, 1, 2, 13, 14]);
    expect(Array.from(s.response)).toEqual([2, 9, 5, 11, 2, 13]);
    // No full row is represented by the padding group, and it has no members.
    expect(Array.from(s.inverse)).toEqual([0, 1, 2, 9, 10, 3, 4, 5, 11, 12, 15, 15, 15, 13, 14]);
    expect(Array.from(s.members.subarray(18))).toEqual(new Array(9).fill(15));
    expect(Array.from(s.responseGroups)).toEqual([0, 4, 6, 2, 6, 6, 6, 6, 6]);
    expect(Array.from(s.responseRoute)).toEqual([6, 6, 7, 6, 6, 8, 6, 6, 9, 1, 6, 3, 6, 5, 6]);
    // A batch whose queries all differ still gets a (padded) share, and a pad too small is refused.
    const distinct = Int32Array.from([0, 7, 8, 1, 2, 7, 8, 9, 3, 4]);
    const da = Int32Array.from([0, 1, 1, 1, 1, 1, 1, 1, 1, 1]);
    expect(prefixShare(distinct, da, 2, 5, 3)).toBeNull();
    expect(prefixShare(distinct, da, 2, 5, 3, { groups: 2, groupMax: 1 })?.groups).toBe(2);
    expect(() => prefixShare(ids, attn, 3, 5, 3, { groups: 1, groupMax: 2 })).toThrow(/do not fit a pad/);
  });

  it('shares nothing where no two queries are equal (ids or mask)', () => {
    const ids = Int32Array.from([7, 8, 1, 7, 8, 2]);
    expect(prefixShare(ids, Int32Array.from([1, 1, 1, 0, 1, 1]), 2, 3, 2)).toBeNull();
    expect(
      prefixShare(Int32Array.from([7, 8, 1, 7, 9, 2]), Int32Array.from([1, 1, 1, 1, 1, 1]), 2, 3, 2),
    ).toBeNull();
    expect(prefixShare(ids, Int32Array.from([1, 1, 1, 1, 1, 1]), 2, 3, 2)?.groups).toBe(1);
    expect(() => prefixShare(ids, Int32Array.from([1]), 2, 3, 2)).toThrow(/ids\/attn/);
  });
});

const LLAMA = parseLlamaConfig({ ...TINY_QWEN2_JSON, model_type: 'llama', tie_word_embeddings: true });

describe.each([
  ['GPT-2', tinyGpt2],
  ['Llama', LLAMA],
  ['Qwen2', tinyQwen2],
  ['Qwen3', tinyQwen3],
] as [string, LMConfig][])('%s under LoRA, the compact rows', (name, config) => {
  it.each([false, true])(
    'equal the full layout, hidden states and LoRA gradients (recompute %s)',
    async (rc) => {
      const base = lmRandom(config, 11, false, `sp_${name}`);
      const adapters = LoraAdapters.create(config, { lora: 4 }, 5);
      liven(adapters);
      const model = base.withLora(adapters);
      const batch = sharedPrefixBatch(config.vocab_size);
      // The model's rotary tables are made on first use and kept: made before counting.
      tf.tidy(() =>
        model.trunk(
          tf.tensor2d(batch.ids, [batch.n, batch.T], 'int32'),
          tf.tensor2d(batch.attn, [batch.n, batch.T], 'int32'),
        ),
      );
      const before = tf.memory().numTensors;
      try {
        // Recomputing: the share padded as a replayed update pads it (an extra group, groups of up to 5).
        const pad = rc ? { groups: 4, groupMax: 5 } : undefined;
        const share = prefixShare(batch.ids, batch.attn, batch.n, batch.T, batch.Tq, pad)!;
        expect(share.groups).toBe(rc ? 4 : 3);
        const [full, shared] = await trunkBothWays(model, adapters.variables(), batch, share, rc);
        expect(relDiff(shared.hidden, full.hidden), 'hidden').toBeLessThan(1e-6);
        expect(shared.value).toBeCloseTo(full.value, 4);
        full.grads.forEach((g, i) => {
          expect(
            g.some((v) => v !== 0),
            `gradient ${i} not all zero`,
          ).toBe(true);
          expect(relDiff(shared.grads[i], g), `LoRA gradient ${i}`).toBeLessThan(1e-5);
        });
        expect(tf.memory().numTensors).toBe(before);
      } finally {
        adapters.dispose();
        base.dispose();
      }
    },
  );
});

it('refuses to fill a KV cache from compact rows', () => {
  const m = lmRandom(tinyQwen3, 3, false, 'sp_kv');
  const b = sharedPrefixBatch(tinyQwen3.vocab_size);
  const share = prefixShare(b.ids, b.attn, b.n, b.T, b.Tq)!;
  try {
    tf.tidy(() => {
      const t = shareTensors(share);
      const ids = tf.tensor2d(b.ids, [b.n, b.T], 'int32');
      const attn = tf.tensor2d(b.attn, [b.n, b.T], 'int32');
      expect(() => m.trunk(ids, attn, [], { share: t })).toThrow(/KV cache/);
    });
  } finally {
    m.dispose();
  }
});

it('PPO_SHARED_PREFIX sets the trainers’ default, and refuses anything but 0 or 1 in words', () => {
  try {
    expect(applySharedPrefix('0')).toBe(false);
    expect(sharedPrefixDefault()).toBe(false);
    expect(applySharedPrefix(' 1 ')).toBe(true);
    expect(sharedPrefixDefault()).toBe(true);
    expect(applySharedPrefix(undefined)).toBeNull();
    expect(() => applySharedPrefix('on')).toThrow(
      'PPO_SHARED_PREFIX must be 1 (a prompt rows share runs once) or 0 (every row in full), got "on".',
    );
  } finally {
    setSharedPrefixDefault(true);
  }
});

it("groupedRows puts a query's rows side by side, in the order each first appears", () => {
  const queries = [[1, 2], [3], [1, 2], [4], [3], [1, 2]];
  expect(groupedRows([5, 1, 3, 0, 4, 2], queries)).toEqual([5, 0, 2, 1, 4, 3]);
  expect(groupedRows([3, 1], queries)).toEqual([3, 1]);
});

it('a replayed update pads its shares to the step, or shares nothing where the pad saves under a tenth', () => {
  // 2 prompts × 8 and 8 distinct prompts of which one repeats.
  const grpo = [...new Array(8).fill([1, 2]), ...new Array(8).fill([3, 4])] as number[][];
  expect(sharePadOf(grpo)).toEqual({ groups: 2, groupMax: 8 });
  const ppo = [[1], [2], [3], [4], [5], [6], [7], [1]];
  expect(sharePadOf(ppo)).toEqual({ groups: 7, groupMax: 2 });
  expect(sharePadOf([[1], [2]])).toBeUndefined();
  // Tq 56, R 64: 16 rows, 2 groups: 2·56 + 16·64 = 1136 ≤ 0.9 · 1920; 8 rows: 2·56 + 512 = 624 ≤ 864.
  expect(paddedShareWorth(sharePadOf(grpo), 16, 56, 64)).toEqual({ groups: 2, groupMax: 8 });
  expect(paddedShareWorth(sharePadOf(grpo), 8, 56, 64)).toEqual({ groups: 2, groupMax: 8 });
  // 4 rows of 7 groups: min(4, 7)·56 + 4·64 = 480 = the full layout: off.
  expect(paddedShareWorth(sharePadOf(ppo), 4, 56, 64)).toBe('off');
  // 8 rows, 7 groups: 7·8 + 8·8 = 120 against 0.9 · 128 = 115.2 (Tq 8, R 8): off.
  expect(paddedShareWorth(sharePadOf(ppo), 8, 8, 8)).toBe('off');
  expect(paddedShareWorth(undefined, 8, 8, 8)).toBe('off');
});
