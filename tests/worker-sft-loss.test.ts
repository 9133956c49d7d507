/**
 * The SFT warm start's pieces (src/core/sft/sft.ts): the JSONL reader (prompt / completion, one-turn messages through
 * the chat template; every problem names its line), the completion-only loss against a plain loop over each
 * unpadded sequence's full-forward logits, and the loss falling over a few steps on a tiny model.
 */
import { describe, expect, it } from 'vitest';
import * as tf from '@tensorflow/tfjs-core';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles } from '../src/cli/files-node';
import { loadLM } from '../src/core/model/folder';
import { completionNll, readSftExamples, sftBatchOf, SftTrainer } from '../src/core/sft/sft';
import type { Tokenizer } from '../src/core/tokenizer/types';

describe('SFT on prompt / completion examples', () => {
  it('reads examples and names the bad lines', async () => {
    await useCpu();
    const { tokenizer: tok, model } = await loadLM(
      nodeFiles(await makeTinyFolder({ n_layer: 1, n_embd: 16 })),
    );
    model.dispose();
    const ok = readSftExamples(
      '{"prompt":"ab","completion":"cd"}\n\n{"prompt":"x","completion":"y"}\n',
      tok,
      64,
      's',
    );
    expect(ok.map((e) => e.line)).toEqual([1, 3]);
    expect(ok[0].prompt).toEqual(tok.encode('ab'));
    expect(ok[0].completion).toEqual([...tok.encode('cd'), tok.eosId]);
    const bad = [
      '{"prompt":"a","completion":"b"}',
      'not json',
      '{"prompt":"a"}',
      '{"prompt":"","completion":"b"}',
      `{"prompt":"a","completion":"${'z'.repeat(70)}"}`,
      '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}',
    ].join('\n');
    let msg = '';
    try {
      readSftExamples(bad, tok, 64, 'data.jsonl');
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/^data\.jsonl: 5 bad lines: line 2: not valid JSON/);
    expect(msg).toContain('line 3: "completion" missing');
    expect(msg).toContain('line 4: "prompt" is empty');
    expect(msg).toContain(
      "line 5: prompt + completion + EOS is 72 tokens, more than the model's 64 positions",
    );
    expect(msg).toContain('line 6: "messages" needs a model with a chat template');
    // With a template, one turn becomes the templated prompt and the assistant's text.
    const chat = Object.assign(Object.create(tok) as Tokenizer, {
      chatPrompt: (u: string) => `<u>${u}</u>`,
    });
    const [m] = readSftExamples(
      '{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}',
      chat,
      64,
      's',
    );
    expect(m.prompt).toEqual(tok.encode('<u>hi</u>'));
    expect(m.completion).toEqual([...tok.encode('yo'), tok.eosId]);
  });

  it('the loss is the mean completion-token NLL of a plain loop over unpadded sequences', async () => {
    await useCpu();
    const { tokenizer: tok, model } = await loadLM(
      nodeFiles(await makeTinyFolder({ n_layer: 1, n_embd: 16 })),
    );
    const ex = readSftExamples(
      '{"prompt":"The movie","completion":" was fine."}\n{"prompt":"A","completion":" long and slow day"}\n',
      tok,
      64,
      's',
    );
    const loss = completionNll(model, sftBatchOf(ex, tok.padId));
    const got = (await loss.data())[0];
    loss.dispose();
    let sum = 0;
    let count = 0;
    for (const e of ex) {
      const ids = [...e.prompt, ...e.completion];
      const logits = tf.tidy(() =>
        model.logits(
          tf.tensor2d([ids], [1, ids.length], 'int32'),
          tf.ones([1, ids.length], 'int32') as tf.Tensor2D,
        ),
      );
      const rows = ((await logits.array()) as number[][][])[0];
      logits.dispose();
      for (let t = 0; t < e.completion.length; t++) {
        const row = rows[e.prompt.length - 1 + t];
        const max = Math.max(...row);
        const lse = max + Math.log(row.reduce((s, v) => s + Math.exp(v - max), 0));
        sum += row[e.completion[t]] - lse;
        count++;
      }
    }
    expect(got).toBeCloseTo(-sum / count, 5);
    model.dispose();
  });

  it('the loss falls over a few steps; the trainer frees what it holds', async () => {
    await useCpu();
    const before = tf.memory().numTensors;
    const text =
      '{"prompt":"The movie was","completion":" great."}\n{"prompt":"The food was","completion":" lovely."}\n';
    const t = await SftTrainer.build(
      nodeFiles(await makeTinyFolder({ n_layer: 1, n_embd: 16 })),
      { text, source: 's' },
      { steps: 8, batchSize: 2, learningRate: 1e-2, maxGradNorm: 1, seed: 1 },
    );
    const losses: number[] = [];
    for (let i = 0; i < 8; i++) losses.push((await t.trainStep()).loss);
    expect(t.history.map((m) => m.step)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(losses[7]).toBeLessThan(losses[0] * 0.8);
    t.dispose();
    expect(tf.memory().numTensors).toBe(before);
  });

  it('micro-batches change nothing: the same loss, gradient norm and weights after a step', async () => {
    await useCpu();
    const dir = await makeTinyFolder({ n_layer: 1, n_embd: 16 });
    const text =
      '{"prompt":"The movie was","completion":" great."}\n{"prompt":"A","completion":" long and slow day."}\n' +
      '{"prompt":"The food","completion":" was lovely."}\n';
    const run = async (microBatchSize: number) => {
      const t = await SftTrainer.build(
        nodeFiles(dir),
        { text, source: 's' },
        { steps: 2, batchSize: 3, learningRate: 1e-2, maxGradNorm: 1, seed: 2, microBatchSize },
      );
      const m = [await t.trainStep(), await t.trainStep()];
      const w = await Promise.all(t.policy.trainableVariables().map((v) => v.data()));
      t.dispose();
      return { m, w };
    };
    const whole = await run(0);
    const micro = await run(1);
    for (let i = 0; i < 2; i++) {
      expect(micro.m[i].loss).toBeCloseTo(whole.m[i].loss, 6);
      expect(micro.m[i].gradNorm).toBeCloseTo(whole.m[i].gradNorm, 5);
    }
    let maxDiff = 0;
    whole.w.forEach((a, i) =>
      a.forEach((v, j) => (maxDiff = Math.max(maxDiff, Math.abs(v - micro.w[i][j])))),
    );
    expect(maxDiff).toBeLessThan(1e-6);
  });
});
