/**
 * Held-out evaluation through the real model worker (src/worker/api.ts, built in Node on the CPU backend with a
 * tiny random model): the step events of evaluated steps carry the eval record (the task's held-out split) and its
 * three metrics in `metrics`, the others carry neither; a prompts file, which the app cannot read, is a clear error.
 */
import { describe, it, expect } from 'vitest';
import { nodeWorkerApi } from './helpers/worker';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { loadTaskNode } from '../src/cli/tasks-node';
import type { ConfigPatch, RunStatus, TrainerEvent } from '../src/worker/protocol';

(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('held-out evaluation in the model worker (CPU, in Node)', () => {
  it('evaluated steps carry the record and its metrics; a prompts file is refused in the app', async () => {
    await useCpu();
    const dir = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
    const api = await nodeWorkerApi({ tinyDir: dir });
    await api.init('cpu');
    const events: TrainerEvent[] = [];
    await api.subscribe((e) => void events.push(e));
    const settled = async (): Promise<RunStatus> => {
      for (let i = 0; i < 3000; i++) {
        const s = events.flatMap((e) => (e.type === 'status' ? [e.status] : [])).at(-1);
        if (s && s.state !== 'running' && s.phase === 'idle') return s;
        await sleep(20);
      }
      throw new Error('the run did not stop');
    };
    const run: ConfigPatch = {
      model: 'tiny-test',
      task: 'arithmetic-chat',
      batchSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 4,
      steps: 3,
      seed: 2,
      evalEvery: 2,
      evalPrompts: 'heldout',
    };
    await api.configure(run);
    await api.start();
    expect(await settled()).toMatchObject({ state: 'paused', step: 3 });
    const steps = events.flatMap((e) => (e.type === 'step' ? [e] : []));
    expect(steps.map((e) => e.eval?.step ?? null)).toEqual([null, 2, 3]);
    const heldOut = (await loadTaskNode('arithmetic-chat')).evalPrompts!;
    for (const e of steps.slice(1)) {
      expect(e.eval!.samples.map((x) => x.prompt)).toEqual(heldOut);
      const m = e.metrics as unknown as Record<string, number>;
      for (const k of ['eval/reward', 'eval/kl', 'eval/winRate'] as const) expect(m[k]).toBe(e.eval![k]);
    }
    expect('eval/reward' in steps[0].metrics).toBe(false);
    // The history (exports, kept runs) has the eval metrics of the evaluated steps.
    expect((await api.history()).map((m) => (m as Record<string, unknown>)['eval/kl'] !== undefined)).toEqual(
      [false, true, true],
    );

    events.length = 0;
    await api.configure({ ...run, evalPrompts: 'my-prompts.txt' });
    await api.start().catch(() => undefined);
    await settled();
    const errors = events.flatMap((e) => (e.type === 'error' ? [e] : []));
    expect(errors.map((e) => e.message).join('\n')).toContain(
      '"evalPrompts" "my-prompts.txt": a prompts file is read by the CLI only; here use "heldout"',
    );
  }, 180_000);
});
