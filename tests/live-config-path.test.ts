/**
 * One owner for a run's config: the training session. For every live key of the config table (src/common/config/live.ts
 * LIVE_KEYS, from CONFIG_FIELDS' `live` flag) a change made between steps reaches the trainer's next step, both
 * on the CLI's path (a session built as `train` builds it, changed through the session) and on the worker's path
 * (src/worker/api.ts on the CPU backend, its `setHyperparameters` call), and both go through the one session
 * method, TrainingSession.setHyperparameters. What the trainer runs with is read at the start of each trainStep
 * (the trainer reads its config once per step), so a key that stopped at a copy would fail here.
 */
import { describe, it, expect, beforeAll, afterEach, vi } from 'vitest';
import { nodeWorkerApi, TINY_WORKER_RUN } from './helpers/worker';
import { setNodeBackend } from '../src/cli/backend-node';
import { makeTinyFolder } from './helpers/tiny';
import { nodeFiles } from '../src/cli/files-node';
import { loadTaskNode } from '../src/cli/tasks-node';
import { CONFIG_FIELDS, validateConfig, type ConfigKey, type TrainConfig } from '../src/common/config';
import { applyLive, LIVE_KEYS } from '../src/common/config/live';
import { TrainingSession } from '../src/core/run/session';
import { PpoTrainer } from '../src/core/ppo/trainer';
import type { Resources } from '../src/core/ppo/setup';
import type { ConfigPatch, ModelWorkerApi, RunStatus } from '../src/worker/protocol';

(globalThis as { self?: unknown }).self ??= globalThis;
(globalThis as { navigator?: unknown }).navigator ??= {};

const TINY = { ...TINY_WORKER_RUN, steps: 1000 } satisfies ConfigPatch;

/**
 * A valid value for `key` that differs from the one in `cfg`: from the field's own type and range in the config
 * table, the first candidate the whole config validates with (some keys depend on others, e.g. microBatchSize).
 */
function changedValue(key: ConfigKey, cfg: TrainConfig): unknown {
  const f = CONFIG_FIELDS[key];
  const cur = cfg[key] as unknown;
  let candidates: unknown[];
  switch (f.type) {
    case 'boolean':
      candidates = [!cur];
      break;
    case 'choice':
      candidates = f.choices.filter((c) => c !== cur);
      break;
    case 'number': {
      const c = cur as number;
      const raw = f.integer
        ? [c + 1, c - 1, f.min, f.max]
        : [c * 0.5, c * 2, (f.min + f.max) / 2, f.min, f.max, c + 0.1];
      candidates = raw.filter((x) => x >= f.min && x <= f.max && x !== c);
      break;
    }
    default:
      throw new Error(`live-config-path: no changed value for the ${f.type} key "${key}"; add one here`);
  }
  for (const v of candidates) {
    try {
      applyLive(cfg, { [key]: v });
      return v;
    } catch {
      /* the next candidate */
    }
  }
  throw new Error(
    `live-config-path: no valid changed value for "${key}" (tried ${JSON.stringify(candidates)})`,
  );
}

let dir: string;
let res: Resources;
/** The config each trainStep started with (read as the trainer reads it: `this.cfg` at the start of the step). */
let seen: TrainConfig[] = [];

beforeAll(async () => {
  await setNodeBackend('wasm');
  dir = await makeTinyFolder({ n_layer: 1, n_embd: 16, n_head: 2 });
  res = { modelFiles: (p) => nodeFiles(p === 'tiny-test' ? dir : p), loadTask: loadTaskNode };
});

function watch() {
  seen = [];
  const trainStep = PpoTrainer.prototype.trainStep;
  vi.spyOn(PpoTrainer.prototype, 'trainStep').mockImplementation(function (this: PpoTrainer) {
    seen.push(this.cfg);
    return trainStep.call(this);
  });
  return vi.spyOn(TrainingSession.prototype, 'setHyperparameters');
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe('every live key reaches the trainer through the session (CPU, tiny model)', () => {
  it('the table has live keys, and each has a changed value here', () => {
    expect(LIVE_KEYS.length).toBeGreaterThan(10);
    const cfg = validateConfig(TINY);
    for (const k of LIVE_KEYS) expect(changedValue(k, cfg)).not.toEqual(cfg[k]);
  });

  it("the CLI's path: a session as `train` builds it, changed through TrainingSession.setHyperparameters", async () => {
    const viaSession = watch();
    const s = await TrainingSession.build(validateConfig(TINY), res, { heapBudget: () => null });
    try {
      await s.runStep();
      for (const key of LIVE_KEYS) {
        const value = changedValue(key, s.cfg);
        s.setHyperparameters({ [key]: value });
        await s.runStep();
        expect({ key, got: seen[seen.length - 1][key] }).toEqual({ key, got: value });
        expect(s.trainer.cfg[key]).toEqual(value);
      }
      expect(viaSession).toHaveBeenCalledTimes(LIVE_KEYS.length);
      expect(seen).toHaveLength(LIVE_KEYS.length + 1);
    } finally {
      s.dispose();
    }
  }, 120_000);

  it("the worker's path: api.setHyperparameters between steps reaches the next step, through the same session method", async () => {
    const api: ModelWorkerApi = await nodeWorkerApi({ tinyDir: dir });
    expect((await api.init('cpu')).backend).toBe('cpu');
    await api.configure(TINY);
    const viaSession = watch();
    await api.stepOnce(); // builds the run: from here on the session owns its config
    const statuses: RunStatus[] = [];
    let cfg = validateConfig(
      (await api.subscribe((e) => void (e.type === 'status' && statuses.push(e.status)))).config,
    );
    for (const key of LIVE_KEYS) {
      const value = changedValue(key, cfg);
      // The status travels as an event only, numbered like the call's answer.
      const seq = await api.setHyperparameters({ [key]: value } as ConfigPatch);
      cfg = validateConfig(statuses.find((s) => s.configSeq === seq)!.config);
      expect(cfg[key]).toEqual(value);
      const after = await api.stepOnce();
      expect(after.step).toBe(seen.length);
      expect({ key, got: seen[seen.length - 1][key] }).toEqual({ key, got: value });
    }
    expect(viaSession).toHaveBeenCalledTimes(LIVE_KEYS.length);
    // `configure` with only live keys changes the running job the same way, through the same session method.
    const lr = changedValue('learningRate', cfg) as number;
    await api.configure({ learningRate: lr });
    expect(viaSession).toHaveBeenCalledTimes(LIVE_KEYS.length + 1);
    await api.stepOnce();
    expect(seen[seen.length - 1].learningRate).toBe(lr);
    await api.reset();
  }, 120_000);

  it('one mutator: no second public config setter on the session, the trainer or the run', async () => {
    const { Run } = await import('../src/worker/run');
    const { RlJob } = await import('../src/worker/rl-job');
    const { SupervisedJob } = await import('../src/worker/supervised-job');
    // A config setter by name: configure, or set…Config / set…Hyperparameters / set…Settings.
    const setters = (C: { prototype: object }) =>
      Object.getOwnPropertyNames(C.prototype).filter((n) =>
        /^(configure|set\w*(Config|Hyperparameters?|Settings))$/.test(n),
      );
    expect(setters(TrainingSession)).toEqual(['setHyperparameters']);
    expect(setters(PpoTrainer)).toEqual([]);
    // The worker's two entry points (a patch of live keys; a config for the next run) hand a running job's live
    // changes to TrainingSession.setHyperparameters, as the worker's path above checks for both.
    expect(setters(Run).sort()).toEqual(['configure', 'setHyperparameters']);
    // The Run hands both to its RL job (the holder of the run's config), which hands live keys to the session.
    expect(setters(RlJob).sort()).toEqual(['configure', 'setHyperparameters']);
    expect(setters(SupervisedJob)).toEqual([]);
  });
});
