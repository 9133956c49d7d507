/**
 * `train --config FILE` with `"algorithm": "dpo"` (contracts §9; docs/dpo.md), and `train --resume CKPT` of a DPO
 * checkpoint: the CLI side of src/core/dpo/trainer.ts. Writes DIR/metrics.jsonl (one line per step, with the
 * held-out `eval/…` keys every evalEvery steps and at the last step), DIR/checkpoint-0/ (a fresh run's starting
 * weights), DIR/checkpoint-<step>/ every saveEvery steps and at the end, and DIR/trl-dpo-config.json (TRL's DPOConfig).
 */
import { readFile, writeFile, appendFile, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { assertFolder, nodeFiles, readJsonFile } from './files-node';
import { resolveModel, PRESETS } from './models';
import { UserError } from '../common/errors';
import { isDpoConfig, validateDpoConfig, type DpoConfig } from '../common/config/dpo';
import { DPO_STATE_FILE, DpoTrainer, type DpoStepMetrics } from '../core/dpo/trainer';
import { dpoConfigJson } from '../common/exports/trl';

/** What `train` was asked for, when it is a DPO run: a config file's object, or a DPO checkpoint to resume. */
export type DpoRequest = { kind: 'fresh'; raw: unknown; cfgPath: string } | { kind: 'resume'; dir: string };

/** A DPO run, or null for the RL algorithms (the caller goes on as before). */
export async function dpoRequest(
  cfgPath: string | undefined,
  resume: string | undefined,
): Promise<DpoRequest | null> {
  if (resume) {
    await assertFolder(resume, 'checkpoint folder');
    return (await DpoTrainer.isCheckpoint(nodeFiles(resume))) ? { kind: 'resume', dir: resume } : null;
  }
  if (!cfgPath) return null;
  const raw = await readJsonFile(cfgPath, 'config');
  return isDpoConfig(raw) ? { kind: 'fresh', raw, cfgPath } : null;
}

async function readData(file: string): Promise<string> {
  try {
    return await readFile(file, 'utf8');
  } catch (e) {
    throw new UserError(
      `DPO: cannot read data ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}; "data" is the preference JSONL, relative to the config file.`,
    );
  }
}

function fmt(m: DpoStepMetrics, steps: number): string {
  let s =
    `step ${m.step}/${steps} loss ${m.loss.toFixed(4)} acc ${m['rewards/accuracies'].toFixed(3)} ` +
    `margin ${m['rewards/margins'].toFixed(4)} gradNorm ${m.gradNorm.toFixed(3)} ${m.timeStep.toFixed(2)} s/step`;
  if (m['eval/loss'] !== undefined)
    s += ` | held-out acc ${m['eval/rewards/accuracies']!.toFixed(3)} loss ${m['eval/loss'].toFixed(4)}`;
  return s;
}

/** Keep metrics.jsonl's lines up to `step` (a resumed run writes the steps after it once). */
async function trimTo(metricsPath: string, step: number, history: DpoStepMetrics[]): Promise<void> {
  let text = '';
  try {
    text = await readFile(metricsPath, 'utf8');
  } catch {
    await writeFile(metricsPath, history.map((m) => JSON.stringify(m) + '\n').join(''));
    return;
  }
  const kept = text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .filter((l) => {
      try {
        return (JSON.parse(l) as { step: number }).step <= step;
      } catch {
        return false;
      }
    });
  await writeFile(metricsPath, kept.map((l) => l + '\n').join(''));
}

export async function cmdTrainDpo(
  req: DpoRequest,
  opts: { out: string; steps?: number; json: boolean },
  writeFolderAtomic: (
    dir: string,
    files: Map<string, import('../core/model/safetensors').FileBody>,
  ) => Promise<void>,
): Promise<void> {
  let trainer: DpoTrainer;
  if (req.kind === 'fresh') {
    const cfg: DpoConfig = validateDpoConfig(req.raw, req.cfgPath);
    cfg.data = path.resolve(path.dirname(req.cfgPath), cfg.data);
    if (!(cfg.model in PRESETS)) await assertFolder(resolveModel(cfg.model));
    trainer = await DpoTrainer.build(cfg, nodeFiles(resolveModel(cfg.model)), {
      text: await readData(cfg.data),
      source: cfg.data,
    });
  } else {
    const state = await readJsonFile(path.join(req.dir, DPO_STATE_FILE), 'DPO state');
    const data = (state as { config?: { data?: unknown } }).config?.data;
    if (typeof data !== 'string')
      throw new UserError(`${req.dir}/${DPO_STATE_FILE}: config.data must be the preference file's path.`);
    trainer = await DpoTrainer.restore(nodeFiles(req.dir), { text: await readData(data), source: data });
  }
  const checkpoints: string[] = [];
  try {
    const steps = opts.steps ?? trainer.cfg.steps;
    if (steps < trainer.step)
      throw new UserError(
        `--steps ${steps} is before the checkpoint's step ${trainer.step}; give a later step.`,
      );
    await mkdir(opts.out, { recursive: true });
    const metricsPath = path.join(opts.out, 'metrics.jsonl');
    const save = async () => {
      const dir = path.join(opts.out, `checkpoint-${trainer.step}`);
      await writeFolderAtomic(dir, await trainer.checkpointSources());
      checkpoints.push(dir);
    };
    // The same run for TRL (src/common/exports/trl.ts dpoTrlConfig): TRL 1.13's DPOConfig fields.
    await writeFile(path.join(opts.out, 'trl-dpo-config.json'), dpoConfigJson(trainer.cfg));
    if (req.kind === 'fresh') {
      await writeFile(metricsPath, '');
      await save(); // checkpoint-0: the starting weights
    } else await trimTo(metricsPath, trainer.step, trainer.history);
    process.stderr.write(
      `dpo: ${trainer.train.length} training pairs, ${trainer.held.length} held out; loss ${trainer.cfg.dpoLoss}, beta ${trainer.cfg.beta}` +
        `${trainer.cfg.lora ? `, LoRA r ${trainer.cfg.lora} (reference: the base, adapters off)` : ' (reference: a frozen copy)'}\n`,
    );
    const { evalEvery, saveEvery } = trainer.cfg;
    let last: DpoStepMetrics | null = trainer.history[trainer.history.length - 1] ?? null;
    while (trainer.step < steps) {
      const next = trainer.step + 1;
      const evaluate = next === steps || (evalEvery > 0 && next % evalEvery === 0);
      last = await trainer.trainStep(evaluate);
      await appendFile(metricsPath, JSON.stringify(last) + '\n');
      process.stderr.write(fmt(last, steps) + '\n');
      if (trainer.step === steps || (saveEvery > 0 && trainer.step % saveEvery === 0)) await save();
    }
    if (opts.json)
      process.stdout.write(
        JSON.stringify({ out: opts.out, steps: trainer.step, checkpoints, metrics: last }) + '\n',
      );
  } finally {
    trainer.dispose();
  }
}
