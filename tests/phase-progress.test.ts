/**
 * Progress inside a long step (issue #33): the trainer reports each generation slice, scoring micro-batch and
 * minibatch update as it finishes (PhaseProgress), and the worker's status carries it while the phase runs
 * (RunStatus.phaseProgress), reset at each phase change and absent between steps.
 */
import { describe, it, expect, beforeAll } from 'vitest';
import { useCpu } from './helpers/backend';
import { makeTinyFolder } from './helpers/tiny';
import { meanByteReward, tinyConfig, tinyResources } from './helpers/trainer-fixture';
import { TrainingSession } from '../src/core/run/session';
import type { PhaseProgress } from '../src/core/ppo/trainer';
import { nodeWorkerApi } from './helpers/worker';
import type { RunStatus, TrainerEvent } from '../src/worker/protocol';

let dir = '';
const res = tinyResources(() => dir);

beforeAll(async () => {
  await useCpu();
  dir = await makeTinyFolder();
});

describe('progress inside a step', () => {
  it('the trainer reports 2, 4, 6, 8 of 8 samples generated and scored, then updates 1 … 4 of 4', async () => {
    const seen: PhaseProgress[] = [];
    const session = await TrainingSession.build(
      tinyConfig({ batchSize: 8, microBatchSize: 2, miniBatches: 2, ppoEpochs: 2, responseLength: 4 }),
      res,
      { ...meanByteReward, hooks: { progress: (p) => seen.push({ ...p }) } },
    );
    try {
      await session.trainer.trainStep();
    } finally {
      session.trainer.disposeAll();
    }
    const of = (phase: string) =>
      seen.filter((p) => p.phase === phase).map((p) => `${p.done}/${p.total} ${p.unit}`);
    expect(of('generating')).toEqual(['2/8 samples', '4/8 samples', '6/8 samples', '8/8 samples']);
    expect(of('scoring')).toEqual(['2/8 samples', '4/8 samples', '6/8 samples', '8/8 samples']);
    expect(of('updating')).toEqual(['1/4 updates', '2/4 updates', '3/4 updates', '4/4 updates']);
    // In the order the step does them.
    expect(seen.map((p) => p.phase)).toEqual([
      ...new Array(4).fill('generating'),
      ...new Array(4).fill('scoring'),
      ...new Array(4).fill('updating'),
    ]);
  });

  it("the worker's status carries it during the phase, reset at each phase change, null between steps", async () => {
    const api = await nodeWorkerApi({ tinyDir: dir });
    await api.init('cpu');
    const events: TrainerEvent[] = [];
    await api.subscribe((e) => void events.push(e));
    const settled = async (): Promise<RunStatus> => {
      for (let i = 0; i < 3000; i++) {
        const s = events.flatMap((e) => (e.type === 'status' ? [e.status] : [])).at(-1);
        if (s && s.state !== 'running' && s.phase === 'idle' && s.step > 0) return s;
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error('the step did not end');
    };
    await api.configure({
      model: 'tiny-test',
      seed: 3,
      batchSize: 4,
      microBatchSize: 2,
      miniBatches: 1,
      ppoEpochs: 1,
      responseLength: 3,
    });
    events.length = 0;
    await api.stepOnce();
    const last = await settled();
    const statuses = events
      .filter((e) => e.type === 'status')
      .map((e) => (e as { status: RunStatus }).status);
    const shown = statuses
      .filter((s) => s.phaseProgress)
      .map((s) => `${s.phase} ${s.phaseProgress!.done}/${s.phaseProgress!.total} ${s.phaseProgress!.unit}`);
    // One update of one minibatch is a phase in one part: nothing more to say than the phase.
    expect(shown).toEqual([
      'generating 2/4 samples',
      'generating 4/4 samples',
      'scoring 2/4 samples',
      'scoring 4/4 samples',
    ]);
    // The first status of each new phase starts without the last phase's count.
    for (let i = 1; i < statuses.length; i++) {
      if (statuses[i].phase !== statuses[i - 1].phase) expect(statuses[i].phaseProgress ?? null).toBeNull();
    }
    expect(last.phase).toBe('idle');
    expect(last.phaseProgress ?? null).toBeNull();
  });
});
