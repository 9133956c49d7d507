/**
 * Exports for today's engines (issue #23 point 5; src/common/exports/engines.ts, src/common/exports/trl.ts):
 * - every OpenRLHF flag is one of train_ppo_ray's argument names (fixture taken from OpenRLHF's source, commit
 *   in the fixture), and every verl override is a key of verl's resolved trainer config (fixture from verl's
 *   source, commit in the fixture), for every algorithm, with and without LoRA / adaptive KL / a reward model;
 * - the written command lists exactly those flags/keys;
 * - where a python3 that can import trl exists (TRL_PYTHON, /tmp/venv/bin/python or python3), TRL's GRPOConfig
 *   and RLOOConfig are built from our exported files and their resolved fields compared with our run's values
 *   (learning-rate schedule, KL coefficient, loss type, clip range, epochs, batch arithmetic, sampling, Adam);
 *   skipped cleanly elsewhere.
 */
import { describe, it, expect } from 'vitest';
import { readFileSync, mkdtempSync, writeFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { spawnSync } from 'node:child_process';
import { validateConfig, type TrainConfig } from '../src/common/config';
import {
  dpoConfigJson,
  engineExports,
  toTrlConfig,
  trlConfigJson,
  TRL_LOSS_TYPE,
} from '../src/common/exports/trl';
import { validateDpoConfig } from '../src/common/config/dpo';
import {
  OUR_ADAM,
  openRlhfCommand,
  openRlhfFlags,
  verlCommand,
  verlOverrides,
} from '../src/common/exports/engines';

const fixture = (name: string) =>
  JSON.parse(readFileSync(join(__dirname, 'fixtures', 'exports', name), 'utf8')) as Record<string, unknown>;
const OPENRLHF = fixture('openrlhf-train_ppo_ray-flags.json') as { commit: string; flags: string[] };
const VERL = fixture('verl-ppo_trainer-keys.json') as { commit: string; keys: string[] };

const VARIANTS: Record<string, unknown>[] = [
  { algorithm: 'ppo', task: 'sentiment' },
  {
    algorithm: 'ppo',
    task: 'sentiment',
    lora: 8,
    adaptiveKl: true,
    saveEvery: 5,
    valueModel: 'separate',
    valueInit: 'reward',
    reward: { model: 'org/rm' },
  },
  { algorithm: 'grpo', task: 'sentiment', batchSize: 16, miniBatches: 2, scaleRewards: 'none' },
  { algorithm: 'grpo', task: 'sentiment', lossAggregation: 'seq-sum-norm', topK: 5, lora: 4 },
  { algorithm: 'rloo', task: 'sentiment', normalizeAdvantages: true, klEstimator: 'k3' },
  { algorithm: 'reinforce++', task: 'sentiment', gamma: 0.9, entropyCoef: 0.01 },
];

const cfgs: TrainConfig[] = VARIANTS.map((v) => validateConfig(v));

describe('engine exports: names from the engines’ sources', () => {
  it('fixtures name their commits', () => {
    expect(OPENRLHF.commit).toMatch(/^[0-9a-f]{40}$/);
    expect(VERL.commit).toMatch(/^[0-9a-f]{40}$/);
    expect(OPENRLHF.flags).toContain('--algo.advantage.estimator');
    expect(VERL.keys).toContain('algorithm.adv_estimator');
  });

  for (const cfg of cfgs) {
    const label = `${cfg.algorithm}${cfg.lora ? ' lora' : ''}${cfg.adaptiveKl ? ' adaptiveKl' : ''}`;

    it(`OpenRLHF flags are train_ppo_ray's (${label})`, () => {
      const { flags } = openRlhfFlags(cfg);
      const unknown = Object.keys(flags).filter((k) => !OPENRLHF.flags.includes(`--${k}`));
      expect(unknown).toEqual([]);
      // The command carries exactly these flags.
      const text = openRlhfCommand(cfg);
      const inText = [...text.matchAll(/^ {2}--([\w.]+)/gm)].map((m) => m[1]);
      expect(inText.sort()).toEqual(
        Object.entries(flags)
          .filter(([, v]) => v !== false)
          .map(([k]) => k)
          .sort(),
      );
      expect(text).toContain(OPENRLHF.commit);
      expect(flags['actor.lr_scheduler']).toBe('constant');
      expect(flags['actor.adam.eps']).toBe(OUR_ADAM.epsilon);
      expect(flags['algo.kl.init_coef']).toBe(cfg.klCoef);
    });

    it(`verl overrides are keys of verl's config (${label})`, () => {
      const { overrides } = verlOverrides(cfg);
      const unknown = Object.keys(overrides).filter((k) => !VERL.keys.includes(k));
      expect(unknown).toEqual([]);
      const text = verlCommand(cfg);
      const inText = [...text.matchAll(/^ {2}([\w.]+)=/gm)].map((m) => m[1]);
      expect(inText.sort()).toEqual(Object.keys(overrides).sort());
      expect(text).toContain(VERL.commit);
      expect(overrides['actor_rollout_ref.actor.optim.lr_scheduler_type']).toBe('constant');
      expect(overrides['trainer.total_training_steps']).toBe(cfg.steps);
    });
  }

  it('estimators and KL placement per algorithm', () => {
    const by = (a: string) => cfgs.find((c) => c.algorithm === a)!;
    expect(openRlhfFlags(by('ppo')).flags['algo.advantage.estimator']).toBe('gae');
    // The first grpo variant has scaleRewards "none": Dr. GRPO's mean-only baseline (group_norm always divides).
    expect(openRlhfFlags(by('grpo')).flags['algo.advantage.estimator']).toBe('dr_grpo');
    expect(openRlhfFlags(by('grpo')).flags).not.toHaveProperty('algo.advantage.no_std_norm');
    expect(openRlhfFlags(by('grpo')).flags['algo.kl.use_loss']).toBe(true);
    expect(openRlhfFlags(by('rloo')).flags['algo.advantage.estimator']).toBe('rloo');
    expect(openRlhfFlags(by('reinforce++')).flags['algo.advantage.estimator']).toBe('reinforce');
    expect(verlOverrides(by('ppo')).overrides['algorithm.adv_estimator']).toBe('gae');
    expect(verlOverrides(by('grpo')).overrides['algorithm.adv_estimator']).toBe('grpo');
    expect(verlOverrides(by('grpo')).overrides['actor_rollout_ref.actor.use_kl_loss']).toBe(true);
    expect(verlOverrides(by('grpo')).overrides['algorithm.norm_adv_by_std_in_grpo']).toBe(false);
    expect(verlOverrides(by('rloo')).overrides['algorithm.adv_estimator']).toBe('rloo');
    expect(verlOverrides(by('rloo')).overrides['algorithm.kl_penalty']).toBe('low_var_kl');
    expect(verlOverrides(by('reinforce++')).overrides['algorithm.adv_estimator']).toBe('reinforce_plus_plus');
    // Batch arithmetic: both engines count prompts per rollout (batchSize / G).
    const g = by('grpo');
    expect(verlOverrides(g).overrides['data.train_batch_size']).toBe(16 / 4);
    expect(verlOverrides(g).overrides['actor_rollout_ref.actor.ppo_mini_batch_size']).toBe(16 / 2 / 4);
    expect(openRlhfFlags(g).flags['rollout.batch_size']).toBe(4);
    expect(openRlhfFlags(g).flags['train.batch_size']).toBe(8);
  });

  it('the export list names each file’s engine; PPO’s TRL file says the TRL versions it works with', () => {
    for (const cfg of cfgs) {
      const files = engineExports(cfg);
      const engines = files.map((f) => f.engine).join(' | ');
      expect(engines).toMatch(/OpenRLHF/);
      expect(engines).toMatch(/verl/);
      if (cfg.algorithm === 'grpo') expect(engines).toMatch(/TRL 1\.13\.0 GRPOConfig/);
      if (cfg.algorithm === 'rloo') expect(engines).toMatch(/TRL 1\.13\.0 RLOOConfig/);
      if (cfg.algorithm === 'reinforce++') expect(engines).not.toMatch(/TRL/);
      if (cfg.algorithm === 'ppo') {
        expect(engines).toMatch(/TRL PPOConfig \(.*not in 1\.13\)/);
        const t = toTrlConfig(cfg);
        expect(t._trl_versions).toMatch(/absent in trl 1\.13/);
      }
      expect(new Set(files.map((f) => f.fileName)).size).toBe(files.length);
    }
  });
});

/** A python3 that can import trl, or null. */
function trlPython(): string | null {
  const candidates = [process.env.TRL_PYTHON, '/tmp/venv/bin/python', 'python3'].filter(
    (p): p is string => !!p && (p === 'python3' || existsSync(p)),
  );
  for (const py of candidates) {
    const r = spawnSync(py, ['-c', 'import trl; print(trl.__version__)'], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    if (r.status === 0) return py;
  }
  return null;
}

const PY = trlPython();
const trlSkip = PY ? '' : ' (skipped: no Python that imports trl: TRL_PYTHON, /tmp/venv/bin/python, python3)';

describe.skipIf(!PY)(`TRL builds its config classes from our exports${trlSkip}`, () => {
  it('GRPOConfig and RLOOConfig resolve to our run’s values', () => {
    const dir = mkdtempSync(join(tmpdir(), 'trl-export-'));
    const runs = [
      validateConfig({
        algorithm: 'grpo',
        task: 'sentiment',
        batchSize: 16,
        miniBatches: 2,
        ppoEpochs: 2,
        steps: 10,
        klCoef: 0.03,
        temperature: 0.9,
        topK: 7,
        topP: 0.95,
        learningRate: 3e-5,
      }),
      validateConfig({
        algorithm: 'grpo',
        task: 'sentiment',
        lossAggregation: 'seq-sum-norm',
        scaleRewards: 'none',
        lora: 4,
      }),
      validateConfig({
        algorithm: 'rloo',
        task: 'sentiment',
        batchSize: 8,
        miniBatches: 1,
        klCoef: 0.1,
        normalizeAdvantages: true,
      }),
    ];
    const files = runs.map((cfg, i) => {
      const f = join(dir, `${cfg.algorithm}-${i}.json`);
      writeFileSync(f, trlConfigJson(cfg));
      return f;
    });
    const r = spawnSync(PY!, [join(__dirname, 'fixtures', 'exports', 'trl_resolve.py'), ...files], {
      encoding: 'utf8',
      timeout: 300_000,
    });
    expect({ status: r.status, stderr: r.status === 0 ? '' : r.stderr.slice(-2000) }).toEqual({
      status: 0,
      stderr: '',
    });
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
      trl: string;
      configs: { class: string; resolved: Record<string, unknown> }[];
    };
    runs.forEach((cfg, i) => {
      const got = out.configs[i].resolved;
      const G = cfg.algorithm === 'ppo' ? 1 : cfg.groupSize || 4;
      expect(out.configs[i].class).toBe(cfg.algorithm === 'grpo' ? 'GRPOConfig' : 'RLOOConfig');
      expect(got).toMatchObject({
        learning_rate: cfg.learningRate,
        lr_scheduler_type: 'constant',
        warmup_steps: 0,
        adam_beta1: 0.9,
        adam_beta2: 0.999,
        adam_epsilon: 1e-7,
        weight_decay: 0,
        bf16: false,
        beta: cfg.klCoef,
        epsilon: cfg.clipRange,
        epsilon_high: cfg.clipRange,
        num_iterations: cfg.ppoEpochs,
        per_device_train_batch_size: cfg.batchSize / cfg.miniBatches,
        gradient_accumulation_steps: 1,
        steps_per_generation: cfg.miniBatches,
        // TRL's generation batch = one of our rollouts.
        generation_batch_size: cfg.batchSize,
        num_generations: G,
        max_steps: cfg.steps * cfg.miniBatches * cfg.ppoEpochs,
        temperature: cfg.temperature,
        top_k: cfg.topK,
        top_p: cfg.topP,
        min_p: null,
        repetition_penalty: 1,
        max_completion_length: cfg.responseLength,
        max_grad_norm: cfg.maxGradNorm,
        seed: cfg.seed,
        disable_dropout: true,
      });
      if (cfg.algorithm === 'grpo') {
        expect(got.loss_type).toBe(TRL_LOSS_TYPE[cfg.lossAggregation]);
        expect(got.scale_rewards).toBe(cfg.scaleRewards);
        expect(got.importance_sampling_level).toBe('token');
        // TRL 1.13 multiplies the KL term by the ratio unless told not to; ours does not.
        expect(got.use_bias_correction_kl).toBe(false);
        expect(got.entropy_coef).toBe(cfg.entropyCoef);
      } else {
        expect(got.normalize_advantages).toBe(cfg.normalizeAdvantages);
      }
    });
  }, 300_000);

  it('DPOConfig resolves to our DPO run’s values', () => {
    const dir = mkdtempSync(join(tmpdir(), 'trl-dpo-'));
    const runs = [
      validateDpoConfig({
        algorithm: 'dpo',
        data: 'p.jsonl',
        beta: 0.2,
        batchSize: 8,
        microBatchSize: 2,
        steps: 30,
        learningRate: 2e-4,
        evalEvery: 5,
      }),
      validateDpoConfig({ algorithm: 'dpo', data: 'p.jsonl', dpoLoss: 'ipo', lora: 4 }),
      validateDpoConfig({ algorithm: 'dpo', data: 'p.jsonl', dpoLoss: 'hinge', seed: 9 }),
    ];
    const files = runs.map((cfg, i) => {
      const f = join(dir, `dpo-${i}.json`);
      writeFileSync(f, dpoConfigJson(cfg));
      return f;
    });
    const r = spawnSync(PY!, [join(__dirname, 'fixtures', 'exports', 'trl_resolve.py'), ...files], {
      encoding: 'utf8',
      timeout: 300_000,
    });
    expect({ status: r.status, stderr: r.status === 0 ? '' : r.stderr.slice(-2000) }).toEqual({
      status: 0,
      stderr: '',
    });
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as {
      configs: { class: string; resolved: Record<string, unknown> }[];
    };
    runs.forEach((cfg, i) => {
      const micro = cfg.microBatchSize || cfg.batchSize;
      expect(out.configs[i].class).toBe('DPOConfig');
      expect(out.configs[i].resolved).toMatchObject({
        learning_rate: cfg.learningRate,
        lr_scheduler_type: 'constant',
        warmup_steps: 0,
        adam_epsilon: 1e-7,
        weight_decay: 0,
        bf16: false,
        beta: cfg.beta,
        loss_type: [cfg.dpoLoss],
        label_smoothing: cfg.labelSmoothing,
        per_device_train_batch_size: micro,
        gradient_accumulation_steps: cfg.batchSize / micro,
        max_steps: cfg.steps,
        max_grad_norm: cfg.maxGradNorm,
        seed: cfg.seed,
        max_length: null,
        precompute_ref_log_probs: true,
        disable_dropout: true,
        eval_steps: cfg.evalEvery,
      });
    });
  }, 300_000);
});
