import { readFile, writeFile, appendFile, mkdir, access, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parse, num, str } from './args';
import { nodeBindingLimit, setNodeBackend } from './backend-node';
import { assertFolder, nodeFiles, readJsonFile, writeFolder } from './files-node';
import { resolveModel, PRESETS } from './models';
import { loadTaskNode } from './tasks-node';
import { derived, validateConfig, type TrainConfig } from '../common/config';
import type { Resources, BuildOptions } from '../core/ppo/setup';
import { TrainingSession, type SessionHooks } from '../core/run/session';
import { restoreSession } from '../core/run/restore';
import { NONFINITE_CLI_ADVICE } from '../common/stops';
import { rolloutDump } from '../core/ppo/rollout';
import { rewardFnFromModule } from '../core/reward/module';
import { UserError } from '../common/errors';
import { asHeapExhaustion, defaultHeapBudget, HeapExhaustedError } from '../core/model/oom';
import type { FileBody } from '../core/model/safetensors';
import { cmdTrainDpo, dpoRequest } from './train-dpo';
import { HELDOUT } from '../common/eval-record';
import { describePlan } from '../core/ppo/gpu-plan';

export const TRAIN_HELP = `train --config FILE --out DIR [--steps N] [--resume CKPT_DIR] [--reward-module FILE.mjs] [--dump-rollouts]
      [--backend wasm|cpu|webgpu] [--json]
  RLHF with PPO, GRPO, RLOO or REINFORCE++ (config key "algorithm", docs/formats.md §7), or DPO on preference
  pairs ("algorithm": "dpo", docs/dpo.md). Writes DIR/metrics.jsonl,
  DIR/checkpoint-0/, DIR/checkpoint-<step>/ every saveEvery steps and at the end, with --dump-rollouts
  DIR/rollouts/step-<n>.json, and with evalEvery > 0 DIR/eval.jsonl (held-out evaluation, docs/eval.md).
  Config keys: docs/formats.md §5 (README).`;

export const nodeResources: Resources = {
  modelFiles: (nameOrPath) => nodeFiles(resolveModel(nameOrPath)),
  loadTask: loadTaskNode,
  // Read when models are built: the WebGPU device's binding limit, none on WASM/CPU.
  get maxBindingBytes() {
    return nodeBindingLimit();
  },
};

export async function loadRewardModule(file: string): Promise<BuildOptions['rewardFn']> {
  try {
    await access(file);
  } catch {
    throw new UserError(
      `--reward-module ${file} does not exist; pass an .mjs file whose default export scores a sample.`,
    );
  }
  let mod: unknown;
  try {
    mod = await import(pathToFileURL(path.resolve(file)).href);
  } catch (e) {
    throw new UserError(`--reward-module ${file} could not be loaded: ${(e as Error).message}`);
  }
  return { fn: rewardFnFromModule(mod, `reward module ${file}`), label: `reward module ${file}` };
}

function bar(step: number, total: number, width = 24): string {
  const done = Math.round((step / total) * width);
  return `[${'#'.repeat(done)}${'.'.repeat(width - done)}]`;
}

/**
 * Write a folder whole or not at all: into `<dir>.partial` first, then renamed into place (an older folder of the
 * same name is moved aside and removed only after). A run stopped while writing leaves the previous checkpoints
 * and at most a `.partial` folder, never a half-written `checkpoint-N`.
 */
export async function writeFolderAtomic(dir: string, files: Map<string, FileBody>): Promise<void> {
  const partial = `${dir}.partial`;
  const old = `${dir}.old`;
  await rm(partial, { recursive: true, force: true });
  await writeFolder(partial, files);
  let moved = false;
  try {
    await rename(dir, old);
    moved = true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  await rename(partial, dir);
  if (moved) await rm(old, { recursive: true, force: true });
}

async function saveCheckpoint(session: TrainingSession, out: string): Promise<string> {
  const dir = path.join(out, `checkpoint-${session.step}`);
  await writeFolderAtomic(dir, await session.checkpointSources()); // weights streamed, one tensor at a time
  return dir;
}

/**
 * A step that failed: running out of memory is said with what of the run's files is intact (the checkpoints are
 * written whole, metrics.jsonl holds one complete line per finished step) and how to go on.
 */
function stepFailure(
  e: unknown,
  session: TrainingSession,
  checkpoint: { dir: string; step: number } | null,
  finished: number,
): unknown {
  const err = asHeapExhaustion(e, { phase: 'train', step: session.step + 1 }) ?? e;
  // Other failures go on as they are (a UserError in its own words; a bug as an internal error).
  if (!(err instanceof HeapExhaustedError)) return err;
  const kept = checkpoint
    ? `the last checkpoint, ${checkpoint.dir} (step ${checkpoint.step}), is complete`
    : 'no checkpoint was written yet';
  const metrics = finished > 0 ? `its last line is step ${finished}` : 'it holds no step yet';
  const resume = checkpoint ? `continue with \`train --resume ${checkpoint.dir}\` or ` : '';
  const said = err.parts ? `${err.parts.exhausted} ${err.parts.stopped}.` : err.message;
  return new UserError(
    `${said} Your files are intact: ${kept}, and metrics.jsonl holds one complete line per finished step ` +
      `(${metrics}); ${resume}start again with smaller sizes.`,
  );
}

/**
 * Resuming into an out folder whose JSONL log (metrics.jsonl, eval.jsonl) already holds steps after the
 * checkpoint (a run that went on, or crashed, after writing it): keep the lines up to the checkpoint's step and
 * drop the rest, so the steps this run writes appear once. A line that does not parse (cut short by a crash
 * mid-write) is dropped too. The file is rewritten atomically (a temporary file, then a rename). No file: one with
 * `start`'s lines. Returns the number of lines dropped.
 */
async function trimStepLog(file: string, step: number, start: readonly object[]): Promise<number> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
    await writeFile(file, start.map((m) => JSON.stringify(m) + '\n').join(''));
    return 0;
  }
  const lines = text.split('\n').filter((l) => l.trim() !== '');
  const kept = lines.filter((l) => {
    try {
      const m = JSON.parse(l) as { step?: unknown };
      return typeof m.step === 'number' && m.step <= step;
    } catch {
      return false;
    }
  });
  const dropped = lines.length - kept.length;
  if (dropped > 0) {
    const tmp = `${file}.tmp`;
    await writeFile(tmp, kept.map((l) => l + '\n').join(''));
    await rename(tmp, file);
  }
  return dropped;
}

/** metrics.jsonl kept up to `step` (trimStepLog); no file: the checkpoint's history. */
export function trimMetrics(metricsPath: string, step: number, history: readonly object[]): Promise<number> {
  return trimStepLog(metricsPath, step, history);
}

/** eval.jsonl kept up to `step` (trimStepLog); no file: an empty one. */
export function trimEvalLog(evalPath: string, step: number): Promise<number> {
  return trimStepLog(evalPath, step, []);
}

/**
 * `train`: a disk adapter over core's TrainingSession (src/core/run/session.ts), which runs the steps, applies the
 * checkpoint cadence and stops on three non-finite steps in a row. This file writes what the session reports:
 * metrics.jsonl, checkpoint folders, rollout dumps, and progress on stderr.
 */
export async function cmdTrain(argv: string[]): Promise<void> {
  const v = parse('train', argv, {
    config: { type: 'string' },
    out: { type: 'string' },
    steps: { type: 'string' },
    resume: { type: 'string' },
    'reward-module': { type: 'string' },
    'dump-rollouts': { type: 'boolean' },
    backend: { type: 'string' },
    json: { type: 'boolean' },
  });
  const out = str('train', v, 'out', true);
  const resume = str('train', v, 'resume');
  const cfgPath = resume ? str('train', v, 'config') : str('train', v, 'config', true);
  await setNodeBackend(str('train', v, 'backend') ?? 'wasm');
  // DPO (algorithm "dpo", contracts §9) has its own trainer and checkpoint (src/cli/train-dpo.ts).
  const dpo = await dpoRequest(cfgPath, resume);
  if (dpo) {
    const stepsArg =
      v.steps === undefined ? undefined : num('train', v, 'steps', 1, { min: 1, max: 1e6, integer: true });
    return cmdTrainDpo(dpo, { out, steps: stepsArg, json: v.json === true }, writeFolderAtomic);
  }
  const rewardModule = str('train', v, 'reward-module');
  const opts: BuildOptions = rewardModule ? { rewardFn: await loadRewardModule(rewardModule) } : {};
  await (await import('./preflight')).preflightTrainCommand({ cfgPath, resume }, nodeResources); // memory check, config.json only

  // What the session reports, written to `out`: the hooks are given to the session when it is built, and read
  // the state below, which is filled in once the run is loaded.
  const dump = v['dump-rollouts'] === true;
  const metricsPath = path.join(out, 'metrics.jsonl');
  const evalPath = path.join(out, 'eval.jsonl');
  const checkpoints: string[] = [];
  let steps = 0;
  let last: TrainingSession['history'][number] | undefined;
  let finished = 0; // the last step recorded in metrics.jsonl
  // The checkpoint to go back to: the one resumed from, until this run writes its own.
  let lastCheckpoint: { dir: string; step: number } | null = null;
  // The plan in force (micro-batch, recompute, and why), printed at the start and again whenever it changes (after
  // the device ran out of memory, or a live change of microBatchSize / recompute): "plan: whole batch (16) on
  // WebGPU, recompute off", "plan: micro-batches of 8 after the device ran out of memory".
  let planShown = '';
  const showPlan = (text: string) => {
    if (text === planShown) return;
    planShown = text;
    process.stderr.write(`plan: ${text}\n`);
  };
  const hooks: SessionHooks = {
    step: async (r, s) => {
      const m = r.metrics;
      last = m;
      // One write of one complete line per finished step.
      await appendFile(metricsPath, JSON.stringify(m) + '\n');
      finished = m.step;
      // Held-out evaluation (docs/eval.md): one line per evaluation, written after the step's metrics line.
      if (r.eval) await appendFile(evalPath, JSON.stringify(r.eval) + '\n');
      if (dump) {
        // The dump records the KL coefficient the step used (before the controller's update).
        // groupSize as resolved (0 in the config = the algorithm's default).
        const cfg = s.cfg;
        const rollout = rolloutDump(r.rollout, s.step, {
          ...cfg,
          groupSize: derived(cfg).groupSize,
          klCoef: m.klCoef,
        });
        await writeFile(path.join(out, 'rollouts', `step-${s.step}.json`), JSON.stringify(rollout));
      }
      process.stderr.write(
        `step ${m.step}/${steps} ${bar(m.step, steps)} reward ${m.reward.toFixed(3)} kl ${m.kl.toFixed(3)} ` +
          `clip ${m.clipFrac.toFixed(3)} ${m.valueLoss === null ? 'no value model' : `vloss ${m.valueLoss.toFixed(3)}`} ` +
          `${m.timeStep.toFixed(1)} s/step\n`,
      );
      if (r.eval) {
        process.stderr.write(
          `  eval: reward ${r.eval['eval/reward'].toFixed(3)} kl ${r.eval['eval/kl'].toFixed(3)} ` +
            `winRate ${r.eval['eval/winRate'].toFixed(3)} (${r.eval.samples.length} prompts)\n`,
        );
      }
      for (const a of r.alerts) process.stderr.write(`  alert: ${a.message} ${a.advice}\n`);
      showPlan(describePlan(r.plan));
    },
    // checkpoint-0 (a fresh run's starting weights), every saveEvery steps, and the last step.
    checkpoint: async (s) => {
      const dir = await saveCheckpoint(s, out);
      checkpoints.push(dir);
      lastCheckpoint = { dir, step: s.step };
    },
  };
  // The budget guard at every phase boundary: PPO_HEAP_BUDGET_BYTES, else the WASM heap on wasm (src/core/model/oom.ts).
  const budget = defaultHeapBudget();
  // An evalPrompts file is read from disk by the path the config holds (made absolute below, so a resume finds it).
  const readText = (p: string) => readFile(p, 'utf8');
  const sessionOpts = { ...opts, hooks, heapBudget: () => budget, readText };

  let session: TrainingSession;
  // Loading can run out as well (the preflight above is an estimate): said with the phase, not as a stack.
  const loading = (e: unknown) => asHeapExhaustion(e, { phase: 'load' }) ?? e;
  if (resume) {
    await assertFolder(resume, 'checkpoint folder');
    session = await restoreSession(
      { kind: 'folder', files: nodeFiles(resume) },
      nodeResources,
      sessionOpts,
    ).catch((e) => {
      throw loading(e);
    });
    if (cfgPath)
      process.stderr.write(`note: --config is ignored with --resume; the checkpoint's config is used.\n`);
  } else {
    const cfg: TrainConfig = validateConfig(await readJsonFile(cfgPath!, 'config'), cfgPath!);
    // An evalPrompts file's path is relative to the config file; the run (and its checkpoints) keep it absolute.
    if (cfg.evalPrompts !== null && cfg.evalPrompts !== HELDOUT)
      cfg.evalPrompts = path.resolve(path.dirname(cfgPath!), cfg.evalPrompts);
    if (!(cfg.model in PRESETS)) await assertFolder(resolveModel(cfg.model));
    session = await TrainingSession.build(cfg, nodeResources, sessionOpts).catch((e) => {
      throw loading(e);
    });
  }
  try {
    steps = num('train', v, 'steps', session.cfg.steps, { min: 1, max: 1e6, integer: true });
    await mkdir(out, { recursive: true });
    if (!resume) {
      await writeFile(metricsPath, '');
      if (session.evaluator) await writeFile(evalPath, '');
    } else {
      if (session.evaluator) await trimEvalLog(evalPath, session.step);
      const dropped = await trimMetrics(metricsPath, session.step, session.history);
      if (dropped > 0) {
        process.stderr.write(
          `metrics.jsonl: dropped ${dropped} line${dropped === 1 ? '' : 's'} after step ${session.step}, ` +
            'the checkpoint resumed from\n',
        );
      }
    }
    if (dump) await mkdir(path.join(out, 'rollouts'), { recursive: true });
    showPlan(session.trainer.planText());
    last = session.history[session.history.length - 1];
    finished = session.step;
    if (resume) lastCheckpoint = { dir: resume, step: session.step };
    const end = await session.run({ until: steps });
    if (end.reason === 'error') throw stepFailure(end.error, session, lastCheckpoint, finished);
    if (end.reason === 'nonfinite') {
      throw new UserError(`${end.message} ${NONFINITE_CLI_ADVICE}`);
    }
    if (v.json) {
      process.stdout.write(
        JSON.stringify({ out, steps: session.step, checkpoints, metrics: last ?? null }) + '\n',
      );
    }
  } finally {
    session.dispose();
  }
}
