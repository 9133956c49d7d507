/**
 * Issue #34: every OpenRLHF, verl and TRL export, parsed as the engine parses it, passes the engine's start-up
 * checks (the rule list of src/common/exports/rules.ts, read from the engines' sources at the commits it names) and
 * means what our run meant. One `it` per failure the issue lists, then every export variant against the rules.
 */
import { describe, it, expect } from 'vitest';
import { EXPORT_VARIANTS } from './helpers/export-variants';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { validateConfig, type TrainConfig } from '../src/common/config';
import { toTrlConfig, TRL_PPO_VERSIONS } from '../src/common/exports/trl';
import { openRlhfCommand, verlCommand } from '../src/common/exports/engines';
import {
  OPENRLHF_SOURCE,
  VERL_DUAL_CLIP_OFF,
  VERL_SOURCE,
  checkOpenRlhfArgs,
  checkVerlOverrides,
  parseHydraValue,
  parseOpenRlhfCommand,
  parseVerlCommand,
  shellWords,
  verlTargetMatches,
} from '../src/common/exports/rules';

const fixture = (name: string) =>
  JSON.parse(readFileSync(join(__dirname, 'fixtures', 'exports', name), 'utf8')) as Record<string, unknown>;
const OPENRLHF_FLAGS = fixture('openrlhf-train_ppo_ray-flags.json') as { commit: string; flags: string[] };
const VERL_KEYS = fixture('verl-ppo_trainer-keys.json') as { commit: string; keys: string[] };

const cfg = (name: string): TrainConfig => validateConfig(EXPORT_VARIANTS[name]);
const verl = (name: string) => parseVerlCommand(verlCommand(cfg(name)));
const orl = (name: string) => parseOpenRlhfCommand(openRlhfCommand(cfg(name)));
const A = 'actor_rollout_ref';

/** GPT-2's module names (2 layers), for what a target_modules string selects. */
const GPT2_MODULES = [0, 1].flatMap((i) =>
  ['attn.c_attn', 'attn.c_proj', 'mlp.c_fc', 'mlp.c_proj'].map((m) => `transformer.h.${i}.${m}`),
);
const TARGET_SUFFIX: Record<string, string> = {
  c_attn: 'attn.c_attn',
  'attn.c_proj': 'attn.c_proj',
  c_fc: 'mlp.c_fc',
  'mlp.c_proj': 'mlp.c_proj',
};

describe('the rule list', () => {
  it('names the commits it was read from, the same as the name fixtures', () => {
    expect(OPENRLHF_SOURCE.commit).toBe(OPENRLHF_FLAGS.commit);
    expect(VERL_SOURCE.commit).toBe(VERL_KEYS.commit);
  });

  it('parses shell words, Hydra values and argparse types as the engines do', () => {
    expect(shellWords(`a 'b c' "d\\"e" f\\\n g # x`)).toEqual(['a', 'b c', 'd"e', 'f', 'g', '#', 'x']);
    expect(parseHydraValue('{eps:1e-7}')).toEqual({ eps: 1e-7 });
    expect(parseHydraValue('[0.9,0.999]')).toEqual([0.9, 0.999]);
    expect(parseHydraValue('"a [.] \\" b"')).toEqual('a [.] " b');
    expect(parseHydraValue('null')).toBeNull();
    expect(parseHydraValue('12')).toBe(12);
    expect(parseHydraValue('all-linear')).toBe('all-linear');
    expect(() => parseOpenRlhfCommand('python3 -m openrlhf.cli.train_ppo_ray --ds.lora.alpha 12.5')).toThrow(
      /invalid int value: '12.5'/,
    );
    expect(() => parseOpenRlhfCommand('python3 -m openrlhf.cli.train_ppo_ray --no.such 1')).toThrow(
      /unrecognized/,
    );
    // The checks catch what the engines refuse.
    expect(checkVerlOverrides({ 'trainer.n_gpus_per_node': 1 })).toEqual(
      expect.arrayContaining([
        `${A}.rollout.name is mandatory (??? in verl's config)`,
        `set one of ${A}.actor.ppo_micro_batch_size or ${A}.actor.ppo_micro_batch_size_per_gpu`,
        `set one of ${A}.rollout.log_prob_micro_batch_size or ${A}.rollout.log_prob_micro_batch_size_per_gpu`,
        'rollout world size 1 is not divisible by tensor × data parallel size 2',
      ]),
    );
    expect(checkVerlOverrides({ [`${A}.model.lora_alpha`]: 12.5 }).join('\n')).toMatch(/lora_alpha.*int/);
    expect(checkOpenRlhfArgs(parseOpenRlhfCommand('python3 -m openrlhf.cli.train_ppo_ray'))).toEqual(
      expect.arrayContaining([expect.stringMatching(/vllm\.num_engines/)]),
    );
  });
});

describe('issue #34: what failed, one test each', () => {
  // verl
  it('verl: actor_rollout_ref.rollout.name is set', () => {
    for (const v of Object.keys(EXPORT_VARIANTS)) expect(verl(v)[`${A}.rollout.name`]).toBe('vllm');
  });

  it('verl: actor, ref and rollout micro-batch sizes, and the critic’s for PPO', () => {
    for (const v of Object.keys(EXPORT_VARIANTS)) {
      const o = verl(v);
      expect(o[`${A}.actor.ppo_micro_batch_size_per_gpu`]).toBeGreaterThan(0);
      expect(o[`${A}.ref.log_prob_micro_batch_size_per_gpu`]).toBeGreaterThan(0);
      expect(o[`${A}.rollout.log_prob_micro_batch_size_per_gpu`]).toBeGreaterThan(0);
      if (v.startsWith('ppo')) expect(o['critic.ppo_micro_batch_size_per_gpu']).toBeGreaterThan(0);
    }
  });

  it('verl: rollout tensor parallelism fits the one GPU the export asks for', () => {
    const o = verl('ppo');
    expect(o['trainer.n_gpus_per_node']).toBe(1);
    expect(o[`${A}.rollout.tensor_model_parallel_size`]).toBe(1);
  });

  it('verl: model.target_modules is a string that selects exactly our targets', () => {
    const o = verl('grpo lora alpha 12.5');
    const t = o[`${A}.model.target_modules`];
    expect(typeof t).toBe('string');
    const want = (cfg('grpo lora alpha 12.5').loraTargets as string[]).map((x) => TARGET_SUFFIX[x]);
    expect(GPT2_MODULES.filter((m) => verlTargetMatches(t as string, m))).toEqual(
      GPT2_MODULES.filter((m) => want.some((w) => m.endsWith(`.${w}`))),
    );
    expect(verl('ppo lora adaptiveKl')[`${A}.model.target_modules`]).toBe('all-linear');
  });

  it('verl: a fractional lora_alpha is written as an int, and the file says so', () => {
    const text = verlCommand(cfg('grpo lora alpha 12.5'));
    const o = parseVerlCommand(text);
    expect(Number.isInteger(o[`${A}.model.lora_alpha`])).toBe(true);
    expect(text).toMatch(/^# loraAlpha 12\.5: verl types lora_alpha as an int; written as 13/m);
  });

  it('verl: seq-mean-token-sum-norm with micro-batches of 1 (Σ / (n × L) in verl’s default worker)', () => {
    const o = verl('dr grpo');
    expect(o[`${A}.actor.loss_agg_mode`]).toBe('seq-mean-token-sum-norm');
    expect(o[`${A}.actor.ppo_micro_batch_size_per_gpu`]).toBe(1);
  });

  it('verl: dual-clip off, Adam’s eps through optim.override_optimizer_config', () => {
    for (const v of ['ppo', 'grpo group', 'rloo']) {
      const text = verlCommand(cfg(v));
      const o = parseVerlCommand(text);
      expect(o[`${A}.actor.clip_ratio_c`] as number).toBeGreaterThan(Math.exp(20));
      expect(o[`${A}.actor.optim.override_optimizer_config`]).toEqual({ eps: 1e-7 });
      expect(text).not.toMatch(/no eps key/);
      if (v === 'ppo') expect(o['critic.optim.override_optimizer_config']).toEqual({ eps: 1e-7 });
    }
  });

  // OpenRLHF
  it('OpenRLHF: --ds.lora.alpha parses as argparse’s int', () => {
    const text = openRlhfCommand(cfg('grpo lora alpha 12.5'));
    expect(() => parseOpenRlhfCommand(text)).not.toThrow();
    expect(parseOpenRlhfCommand(text)['ds.lora.alpha']).toBe(13);
    expect(text).toMatch(/^# loraAlpha 12\.5: OpenRLHF types lora_alpha as an int; written as 13/m);
  });

  it('OpenRLHF: GRPO without std scaling is dr_grpo, not group_norm + no_std_norm', () => {
    for (const v of ['grpo none', 'dr grpo']) {
      const a = orl(v);
      expect(a['algo.advantage.estimator']).toBe('dr_grpo');
      expect(a['algo.advantage.no_std_norm']).toBe(false);
    }
    expect(orl('grpo group')['algo.advantage.estimator']).toBe('group_norm');
  });

  it('OpenRLHF: a vLLM engine and one GPU for every model', () => {
    for (const v of Object.keys(EXPORT_VARIANTS)) {
      const a = orl(v);
      expect(a['vllm.num_engines']).toBe(1);
      expect(a['actor.num_gpus_per_node']).toBe(1);
      expect(a['ref.num_gpus_per_node']).toBe(1);
      if (v.startsWith('ppo')) expect(a['critic.num_gpus_per_node']).toBe(1);
    }
  });

  it('OpenRLHF: RLOO’s note says normalizeAdvantages is lost, not that OpenRLHF whitens', () => {
    const text = openRlhfCommand(cfg('rloo'));
    expect(text).not.toMatch(/whitens advantages itself/);
    expect(text).toMatch(/^# normalizeAdvantages: OpenRLHF never whitens rloo advantages/m);
  });

  it('adaptive KL target: per-token mean in OpenRLHF and verl (ours is nats per sample)', () => {
    const c = cfg('ppo lora adaptiveKl');
    expect(orl('ppo lora adaptiveKl')['algo.kl.target']).toBeCloseTo(c.targetKl / c.responseLength, 12);
    expect(verl('ppo lora adaptiveKl')['algorithm.kl_ctrl.target_kl']).toBeCloseTo(
      c.targetKl / c.responseLength,
      12,
    );
  });

  // TRL
  it('TRL GRPO: use_bias_correction_kl false and entropy_coef set', () => {
    for (const v of ['grpo group', 'grpo lora alpha 12.5', 'dr grpo']) {
      const t = toTrlConfig(cfg(v));
      expect(t.use_bias_correction_kl).toBe(false);
      expect(t.entropy_coef).toBe(cfg(v).entropyCoef);
      expect((t._comment as string[]).join('\n')).not.toMatch(/no entropy bonus/);
    }
  });

  it('TRL PPO: the version range is 0.12–0.28 top-level, kl_estimator from 0.17, experimental from 0.26', () => {
    expect(TRL_PPO_VERSIONS).toMatch(/>=0\.12,<0\.29 as trl\.PPOConfig/);
    expect(TRL_PPO_VERSIONS).toMatch(/kl_estimator from 0\.17/);
    expect(TRL_PPO_VERSIONS).toMatch(/trl\.experimental\.ppo\.PPOConfig from 0\.26/);
    expect(TRL_PPO_VERSIONS).toMatch(/absent in trl 1\.13/);
    const t = toTrlConfig(cfg('ppo'));
    expect(t._trl_versions).toBe(TRL_PPO_VERSIONS);
    expect((t._comment as string[]).join('\n')).toMatch(/kl_estimator: TRL >=0\.17/);
  });
});

describe('every export variant against the rule list', () => {
  for (const v of Object.keys(EXPORT_VARIANTS)) {
    it(`${v}: OpenRLHF parses, passes train_ppo_ray's checks and keeps our settings`, () => {
      const c = cfg(v);
      const text = openRlhfCommand(c);
      const a = parseOpenRlhfCommand(text);
      expect(checkOpenRlhfArgs(a)).toEqual([]);
      for (const k of Object.keys(a).filter((k) => text.includes(`--${k}`)))
        expect(OPENRLHF_FLAGS.flags).toContain(`--${k}`);
      expect(a['actor.adam.eps']).toBe(1e-7);
      expect(a['actor.lr_scheduler']).toBe('constant');
      expect(a['algo.kl.init_coef']).toBe(c.klCoef);
      expect(a['rollout.batch_size']).toBe(c.batchSize / (a['rollout.n_samples_per_prompt'] as number));
      expect(a['actor.dual_clip']).toBeNull();
      // Every placeholder is named in a comment.
      if (/'<[^']*>'/.test(text)) expect(text).toMatch(/^# Placeholders, yours to fill/m);
    });

    it(`${v}: verl parses, passes its checks and keeps our settings`, () => {
      const c = cfg(v);
      const text = verlCommand(c);
      const o = parseVerlCommand(text);
      expect(checkVerlOverrides(o)).toEqual([]);
      for (const k of Object.keys(o)) expect(VERL_KEYS.keys).toContain(k);
      const agg = o[`${A}.actor.loss_agg_mode`];
      const nSamples = (o[`${A}.actor.ppo_mini_batch_size`] as number) * (o[`${A}.rollout.n`] as number);
      const micro = o[`${A}.actor.ppo_micro_batch_size_per_gpu`];
      if (agg === 'seq-mean-token-sum-norm') expect(micro).toBe(1);
      if (agg === 'token-mean') expect(micro).toBe(nSamples);
      expect(o[`${A}.actor.clip_ratio_c`]).toBe(VERL_DUAL_CLIP_OFF);
      expect(o[`${A}.actor.optim.lr_scheduler_type`]).toBe('constant');
      expect(o[`${A}.actor.optim.weight_decay`]).toBe(0);
      expect(o['trainer.total_training_steps']).toBe(c.steps);
      expect(o['trainer.logger']).toEqual(['console']);
      if (c.lora > 0) expect(typeof o[`${A}.model.target_modules`]).toBe('string');
      if (/"<[^"]*>"/.test(text)) expect(text).toMatch(/^# Placeholders, yours to fill/m);
    });
  }
});
