import { readFile, writeFile, appendFile, mkdir, access } from 'node:fs/promises';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parse, num, str } from './args';
import { setNodeBackend } from './backend-node';
import { assertFolder, nodeFiles, writeFolder } from './files-node';
import { resolveModel, PRESETS } from './models';
import { loadTaskNode } from './tasks-node';
import { validateConfig, type TrainConfig } from '../core/config';
import { buildTrainer, type Resources, type BuildOptions } from '../core/ppo/setup';
import { checkpointFiles, restoreTrainer } from '../core/checkpoint';
import { rolloutDump } from '../core/ppo/rollout';
import { rewardFnFromModule } from '../core/reward/module';
import { UserError } from '../core/errors';
import type { PpoTrainer } from '../core/ppo/trainer';

export const TRAIN_HELP = `train --config FILE --out DIR [--steps N] [--resume CKPT_DIR] [--reward-module FILE.mjs] [--dump-rollouts]
      [--backend wasm|cpu] [--json]
  PPO-RLHF. Writes DIR/metrics.jsonl, DIR/checkpoint-0/, DIR/checkpoint-<step>/ every saveEvery steps and at
  the end, and with --dump-rollouts DIR/rollouts/step-<n>.json. Config keys: contracts.md §5 (README).`;

export const nodeResources: Resources = {
  modelFiles: (nameOrPath) => nodeFiles(resolveModel(nameOrPath)),
  loadTask: loadTaskNode,
};

export async function readJsonFile(file: string, what: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EISDIR') throw new UserError(`${what} ${file} is a folder; expected a JSON file.`);
    if (code === 'ENOENT') throw new UserError(`${what} ${file} does not exist; expected a JSON file.`);
    throw new UserError(`cannot read ${what} ${file}: ${code ?? (e as Error).message}.`);
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new UserError(`${what} ${file} is not valid JSON: ${(e as Error).message}.`);
  }
}

export async function loadRewardModule(file: string): Promise<BuildOptions['rewardFn']> {
  try {
    await access(file);
  } catch {
    throw new UserError(`--reward-module ${file} does not exist; pass an .mjs file whose default export scores a sample.`);
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

async function saveCheckpoint(t: PpoTrainer, out: string): Promise<string> {
  const dir = path.join(out, `checkpoint-${t.step}`);
  await writeFolder(dir, await checkpointFiles(t));
  return dir;
}

export async function cmdTrain(argv: string[]): Promise<void> {
  const v = parse('train', argv, {
    config: { type: 'string' }, out: { type: 'string' }, steps: { type: 'string' }, resume: { type: 'string' },
    'reward-module': { type: 'string' }, 'dump-rollouts': { type: 'boolean' }, backend: { type: 'string' },
    json: { type: 'boolean' },
  });
  const out = str('train', v, 'out', true);
  const resume = str('train', v, 'resume');
  const cfgPath = resume ? str('train', v, 'config') : str('train', v, 'config', true);
  await setNodeBackend(str('train', v, 'backend') ?? 'wasm');
  const rewardModule = str('train', v, 'reward-module');
  const opts: BuildOptions = rewardModule ? { rewardFn: await loadRewardModule(rewardModule) } : {};

  let trainer: PpoTrainer;
  if (resume) {
    await assertFolder(resume, 'checkpoint folder');
    trainer = await restoreTrainer(nodeFiles(resume), nodeResources, opts);
    if (cfgPath) process.stderr.write(`note: --config is ignored with --resume; the checkpoint's config is used.\n`);
  } else {
    const cfg: TrainConfig = validateConfig(await readJsonFile(cfgPath!, 'config'), cfgPath!);
    if (!(cfg.model in PRESETS)) await assertFolder(resolveModel(cfg.model));
    trainer = await buildTrainer(cfg, nodeResources, opts);
  }
  const steps = num('train', v, 'steps', trainer.cfg.steps, { min: 1, max: 1e6, integer: true });
  await mkdir(out, { recursive: true });
  const metricsPath = path.join(out, 'metrics.jsonl');
  if (!resume) await writeFile(metricsPath, '');
  else {
    try {
      await access(metricsPath);
    } catch {
      await writeFile(metricsPath, trainer.history.map((m) => JSON.stringify(m) + '\n').join(''));
    }
  }
  const checkpoints: string[] = [];
  if (!resume) checkpoints.push(await saveCheckpoint(trainer, out));
  if (v['dump-rollouts']) await mkdir(path.join(out, 'rollouts'), { recursive: true });

  let last = trainer.history[trainer.history.length - 1];
  while (trainer.step < steps) {
    const klCoef = trainer.kl.value;
    const r = await trainer.trainStep();
    last = r.metrics;
    await appendFile(metricsPath, JSON.stringify(r.metrics) + '\n');
    if (v['dump-rollouts']) {
      const dump = rolloutDump(r.rollout, trainer.step, { ...trainer.cfg, klCoef });
      await writeFile(path.join(out, 'rollouts', `step-${trainer.step}.json`), JSON.stringify(dump));
    }
    const m = r.metrics;
    process.stderr.write(
      `step ${m.step}/${steps} ${bar(m.step, steps)} reward ${m.reward.toFixed(3)} kl ${m.kl.toFixed(3)} ` +
        `clip ${m.clipFrac.toFixed(3)} vloss ${m.valueLoss.toFixed(3)} ${m.timeStep.toFixed(1)} s/step\n`,
    );
    for (const a of r.alerts) process.stderr.write(`  alert: ${a.message} ${a.advice}\n`);
    if (r.shouldPause) {
      throw new UserError(
        `stopped at step ${trainer.step}: three steps in a row had NaN/Inf losses or gradients (updates skipped). ` +
          `The checkpoints already written are intact; resume from the last one with a lower learning rate.`,
      );
    }
    const cfg = trainer.cfg;
    if ((cfg.saveEvery > 0 && trainer.step % cfg.saveEvery === 0) || trainer.step === steps) {
      checkpoints.push(await saveCheckpoint(trainer, out));
    }
  }
  if (v.json) process.stdout.write(JSON.stringify({ out, steps: trainer.step, checkpoints, metrics: last ?? null }) + '\n');
  trainer.dispose();
}
