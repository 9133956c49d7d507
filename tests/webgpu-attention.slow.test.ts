/**
 * The fused causal self-attention (src/core/kernels/webgpu-attention.ts) inside GPT-2 on Node WebGPU: a 1-layer
 * model on a left-padded batch, logits and every weight gradient with the fused kernels against the plain ops, and
 * the dispatches the layer saves. Slow on SwiftShader (every kernel of a GPT-2 forward and backward compiles on
 * the CPU, ~30 s), hence this tier; the kernel itself is tested in tests/webgpu-attention.test.ts.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import {
  precompile,
  skipWithoutAdapter,
  useNodeWebGpu,
  webGpuAdapter,
  webGpuErrors,
} from './helpers/webgpu-node';
import { maxDiff } from './helpers/diff';
import { causalPaddingBias, causalSelfAttention } from '../src/core/model/attention';
import { setWebGpuAttentionFused } from '../src/core/kernels/webgpu-attention';
import { countDispatches } from '../src/bench/webgpu-dispatch';
import { parseGPT2Config } from '../src/core/model/config';
import { GPT2 } from '../src/core/model/gpt2';

const adapter = await webGpuAdapter();

describe('fused causal self-attention in GPT-2 on Node WebGPU', () => {
  if (!adapter) return skipWithoutAdapter();
  beforeAll(useNodeWebGpu);

  it('GPT-2 (1 layer, n_embd 48, 4 heads, left-padded batch): logits and every weight gradient equal the plain path; the layer saves (plain attention − 1) dispatches', async () => {
    const config = parseGPT2Config({
      vocab_size: 258,
      n_positions: 16,
      n_embd: 48,
      n_layer: 1,
      n_head: 4,
      tokenizer: 'bytes',
      bos_token_id: 256,
      eos_token_id: 256,
      pad_token_id: 257,
    });
    const m = GPT2.random(config, 7);
    const [B, T] = [2, 7];
    const ids = tf.tensor2d(
      Array.from({ length: B * T }, (_, i) => (i * 37) % 256),
      [B, T],
      'int32',
    );
    const mask = tf.tensor2d([0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], [B, T], 'int32');
    const w = tf.randomNormal([B, T, config.vocab_size], 0, 1, 'float32', 8);
    const loss = () => tf.sum(tf.mul(m.logits(ids as tf.Tensor2D, mask as tf.Tensor2D), w)) as tf.Scalar;
    const both = async (on: boolean) => {
      setWebGpuAttentionFused(on);
      try {
        // The programs compiled with the event loop free first (tests/helpers/webgpu-node.ts, precompile).
        await precompile(() => {
          const { value, grads } = tf.variableGrads(loss, m.trainableVariables());
          return [value, ...Object.values(grads)];
        });
        const logits = tf.tidy(() => m.logits(ids as tf.Tensor2D, mask as tf.Tensor2D));
        const { value, grads } = tf.variableGrads(loss, m.trainableVariables());
        const out = {
          logits: await logits.data(),
          grads: await Promise.all(Object.values(grads).map((g) => g.data())),
        };
        const counted = await countDispatches(() => m.logits(ids as tf.Tensor2D, mask as tf.Tensor2D));
        tf.dispose([logits, value, counted.result, ...Object.values(grads)]);
        return { ...out, dispatches: counted.dispatches };
      } finally {
        setWebGpuAttentionFused(true);
      }
    };
    const fused = await both(true);
    const plain = await both(false);
    const d = maxDiff(fused.logits, plain.logits);
    expect(d.abs).toBeLessThan(1e-5 * Math.max(1, d.scale));
    expect(fused.grads.length).toBe(plain.grads.length);
    for (let i = 0; i < fused.grads.length; i++) {
      const g = maxDiff(fused.grads[i], plain.grads[i]);
      expect(g.abs, `gradient ${i}`).toBeLessThan(1e-4 * Math.max(1, g.scale));
    }
    const q = tf.zeros([B * T, 3 * config.n_embd]) as tf.Tensor2D;
    const maskF = tf.cast(mask, 'float32') as tf.Tensor2D;
    const bias = tf.tidy(() => causalPaddingBias(maskF));
    setWebGpuAttentionFused(false);
    const plainAttn = await countDispatches(() => causalSelfAttention(q, maskF, bias, config.n_head)).finally(
      () => setWebGpuAttentionFused(true),
    );
    // The fused path also skips building the additive mask (gpt2.ts makes it only for the plain attention).
    const biasBuild = await countDispatches(() => causalPaddingBias(maskF));
    expect(biasBuild.dispatches).toBeGreaterThan(0);
    expect(plain.dispatches - fused.dispatches).toBe(
      config.n_layer * (plainAttn.dispatches - 1) + biasBuild.dispatches,
    );
    tf.dispose([plainAttn.result, biasBuild.result, q, maskF, bias, ids, mask, w]);
    m.dispose();
    expect(await webGpuErrors()).toEqual([]);
  });
});
