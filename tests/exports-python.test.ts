/**
 * Issue #34, with the engines' own code where it is on this machine (each part skips, saying why, elsewhere):
 * - verl: every verl export through verl's trainer config (the _generated_ppo_trainer.yaml of the commit in the rule
 *   list, read from a verl clone: VERL_SRC, or the mirror at /work/.mirror/volcengine+verl/repo) with OmegaConf
 *   (scripts/verl_config_check.py: struct-mode overrides, mandatory ??? values, the dataclasses' types); the merged
 *   values then pass the rule list's checks, and the rule list's defaults are verl's;
 * - TRL: GRPOTrainer, RLOOTrainer and DPOTrainer run two steps from our exported files on a tiny random GPT-2
 *   (scripts/trl_two_steps.py), with a python that imports trl (TRL_PYTHON, /tmp/venv/bin/python or python3).
 */
import { describe, it, expect } from 'vitest';
import { EXPORT_VARIANTS } from './helpers/export-variants';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { spawnSync } from 'node:child_process';
import { validateConfig } from '../src/common/config';
import { validateDpoConfig } from '../src/common/config/dpo';
import { dpoConfigJson, trlConfigJson } from '../src/common/exports/trl';
import { verlCommand } from '../src/common/exports/engines';
import { VERL_KEYS, VERL_SOURCE, checkVerlOverrides, parseVerlCommand } from '../src/common/exports/rules';

const ROOT = join(__dirname, '..');

function pythonWith(module: string, candidates: (string | undefined)[]): string | null {
  for (const py of candidates) {
    if (!py || (py.includes('/') && !existsSync(py))) continue;
    const r = spawnSync(py, ['-c', `import ${module}`], { encoding: 'utf8', timeout: 120_000 });
    if (r.status === 0) return py;
  }
  return null;
}

const VERL_SRC = [process.env.VERL_SRC, '/work/.mirror/volcengine+verl/repo'].find(
  (d): d is string =>
    !!d &&
    spawnSync('git', ['--git-dir', d, 'cat-file', '-e', `${VERL_SOURCE.commit}^{commit}`]).status === 0,
);
const OMEGA_PY = pythonWith('omegaconf', [
  process.env.OMEGACONF_PYTHON,
  '/usr/bin/python3',
  'python3',
  '/tmp/venv/bin/python',
]);
const TRL_PY = pythonWith('trl, datasets, peft', [process.env.TRL_PYTHON, '/tmp/venv/bin/python', 'python3']);

function verlCheck(overrides: Record<string, unknown>): {
  errors: string[];
  merged: Record<string, unknown>;
} {
  const dir = mkdtempSync(join(tmpdir(), 'verl-check-'));
  const f = join(dir, 'in.json');
  writeFileSync(f, JSON.stringify({ overrides, rules: VERL_KEYS }));
  const r = spawnSync(
    OMEGA_PY!,
    [join(ROOT, 'scripts', 'verl_config_check.py'), VERL_SRC!, VERL_SOURCE.commit, f],
    { encoding: 'utf8', timeout: 60_000 },
  );
  if (r.status !== 0) throw new Error(r.stderr.slice(-2000));
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as {
    errors: string[];
    merged: Record<string, unknown>;
  };
}

const verlSkip = !VERL_SRC
  ? 'no verl clone at the rule list’s commit (set VERL_SRC)'
  : !OMEGA_PY
    ? 'no python with omegaconf (OMEGACONF_PYTHON)'
    : '';
describe.skipIf(!!verlSkip)(
  `verl's own config and OmegaConf ${verlSkip ? `(skipped: ${verlSkip})` : ''}`,
  () => {
    it('the rule list’s defaults are those of verl’s config at its commit; the engine refuses what #34 lists', () => {
      const { merged } = verlCheck({});
      for (const [k, r] of Object.entries(VERL_KEYS)) {
        if (r.mandatory || (typeof r.default === 'string' && r.default.startsWith('${'))) continue;
        expect({ k, v: merged[k] }).toEqual({ k, v: r.default });
      }
      const bad = verlCheck({
        'actor_rollout_ref.model.lora_alpha': 12.5,
        'actor_rollout_ref.model.target_modules': ['c_attn'],
      }).errors.join('\n');
      expect(bad).toMatch(/actor_rollout_ref\.rollout\.name is mandatory/);
      expect(bad).toMatch(/lora_alpha: ValidationError/);
      expect(bad).toMatch(/target_modules: ValidationError/);
    });

    for (const [name, v] of Object.entries(EXPORT_VARIANTS)) {
      it(`${name}: every override applies, nothing mandatory is left, every type holds, the checks pass`, () => {
        const o = parseVerlCommand(verlCommand(validateConfig(v)));
        const { errors, merged } = verlCheck(o);
        expect(errors).toEqual([]);
        expect(checkVerlOverrides(merged)).toEqual([]);
      });
    }
  },
);

const trlSkip = TRL_PY ? '' : 'no python with trl, datasets and peft (TRL_PYTHON)';
describe.skipIf(!TRL_PY)(
  `TRL trainers run two steps from our files ${trlSkip ? `(skipped: ${trlSkip})` : ''}`,
  () => {
    it('GRPOTrainer (group, Dr. GRPO, LoRA alpha 12.5), RLOOTrainer and DPOTrainer', () => {
      const dir = mkdtempSync(join(tmpdir(), 'trl-run-'));
      const files: [string, string][] = [
        ['GRPOConfig', trlConfigJson(validateConfig({ ...EXPORT_VARIANTS['grpo group'], batchSize: 8 }))],
        ['GRPOConfig', trlConfigJson(validateConfig({ ...EXPORT_VARIANTS['dr grpo'], batchSize: 8 }))],
        [
          'GRPOConfig',
          trlConfigJson(
            validateConfig({ ...EXPORT_VARIANTS['grpo lora alpha 12.5'], batchSize: 8, entropyCoef: 0.01 }),
          ),
        ],
        ['RLOOConfig', trlConfigJson(validateConfig({ ...EXPORT_VARIANTS.rloo, batchSize: 8 }))],
        [
          'DPOConfig',
          dpoConfigJson(validateDpoConfig({ algorithm: 'dpo', data: 'p.jsonl', batchSize: 4, lora: 4 })),
        ],
      ];
      const paths = files.map(([, text], i) => {
        const f = join(dir, `export-${i}.json`);
        writeFileSync(f, text);
        return f;
      });
      const r = spawnSync(TRL_PY!, [join(ROOT, 'scripts', 'trl_two_steps.py'), ...paths], {
        encoding: 'utf8',
        timeout: 300_000,
      });
      expect({ status: r.status, stderr: r.status === 0 ? '' : r.stderr.slice(-3000) }).toEqual({
        status: 0,
        stderr: '',
      });
      const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
        trl: string;
        runs: { class: string; steps: number; loss: number | null }[];
      };
      expect(out.trl).toBe('1.13.0');
      expect(out.runs.map((x) => x.class)).toEqual(files.map(([c]) => c));
      for (const run of out.runs) {
        expect(run.steps).toBe(2);
        expect(run.loss).not.toBeNull();
      }
    }, 300_000);
  },
);
