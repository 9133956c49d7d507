import { describe, it, expect } from 'vitest';
import { validateConfig } from '../src/core/config';
import { toTrlConfig, trlConfigJson } from '../src/core/trl';

describe('TRL config export', () => {
  it('maps our names to PPOConfig names', () => {
    const cfg = validateConfig({
      model: 'openai-community/gpt2',
      task: 'sentiment',
      seed: 7,
      steps: 50,
      batchSize: 16,
      miniBatches: 4,
      ppoEpochs: 3,
      learningRate: 2e-5,
      clipRange: 0.15,
      clipRangeValue: 0.3,
      vfCoef: 0.2,
      klCoef: 0.07,
      gamma: 0.99,
      lam: 0.9,
      whitenRewards: true,
      temperature: 0.8,
      responseLength: 40,
      missingEosPenalty: 1,
      maxGradNorm: 0.5,
    });
    const t = toTrlConfig(cfg);
    expect(t).toMatchObject({
      learning_rate: 2e-5,
      per_device_train_batch_size: 4,
      gradient_accumulation_steps: 1,
      num_mini_batches: 4,
      batch_size: 16,
      total_episodes: 800,
      num_ppo_epochs: 3,
      cliprange: 0.15,
      cliprange_value: 0.3,
      vf_coef: 0.2,
      kl_coef: 0.07,
      kl_estimator: 'k1',
      gamma: 0.99,
      lam: 0.9,
      whiten_rewards: true,
      temperature: 0.8,
      response_length: 40,
      stop_token: 'eos',
      missing_eos_penalty: 1,
      max_grad_norm: 0.5,
      seed: 7,
      sft_model_path: 'openai-community/gpt2',
    });
    expect(t.reward_model_path).toMatch(/^<path to a reward model/);
    expect(t._trl_classic).toEqual({ adap_kl_ctrl: false, init_kl_coef: 0.07, target: 6, horizon: 10000 });
    const comment = (t._comment as string[]).join('\n');
    expect(comment).toMatch(
      /"sentiment" task's reward function; TRL's PPOTrainer scores with a reward model/,
    );
    expect(comment).toMatch(/valueLearningRate 0.001/);
    expect(JSON.parse(trlConfigJson(cfg))).toEqual(t);
  });

  it('lists what has no TRL equivalent and uses placeholders for local models', () => {
    const cfg = validateConfig({
      model: 'tiny',
      task: null,
      prompts: ['a', 'b'],
      reward: {
        mix: [
          { name: 'sentiment', weight: 1 },
          { name: 'length', weight: 0.5 },
        ],
      },
      adaptiveKl: true,
      targetKl: 3,
      klEstimator: 'k2',
      whitenAdvantages: false,
      entropyCoef: 0.01,
      topK: 20,
      stopToken: 5,
      missingEosPenalty: 0,
      earlyStopKl: true,
      earlyStopApproxKl: 0.05,
    });
    const t = toTrlConfig(cfg);
    expect(t.sft_model_path).toMatch(/^<path to the policy model folder: export "tiny"/);
    expect(t.stop_token_id).toBe(5);
    expect(t).not.toHaveProperty('stop_token');
    expect(t).not.toHaveProperty('kl_estimator');
    expect(t.missing_eos_penalty).toBeNull();
    expect(t._trl_classic).toMatchObject({ adap_kl_ctrl: true, target: 3 });
    const comment = (t._comment as string[]).join('\n');
    for (const s of [
      'adap_kl_ctrl',
      'k2',
      'whitenAdvantages',
      'entropyCoef',
      'topK 20',
      'earlyStopKl (earlyStopApproxKl 0.05 nats per token)',
      '2 prompts of your own',
      '1×sentiment + 0.5×length',
    ]) {
      expect(comment).toContain(s);
    }
  });

  it('a Hub reward model becomes reward_model_path', () => {
    const t = toTrlConfig(validateConfig({ reward: { model: 'org/rm' }, valueInit: 'reward' }));
    expect(t.reward_model_path).toBe('org/rm');
    expect((t._comment as string[]).join('\n')).not.toContain('valueInit');
    // Our run centres the reward model's scores; TRL would not: the comment says how to match.
    expect((t._comment as string[]).join('\n')).toContain('rewardModelCenter');
    const raw = toTrlConfig(validateConfig({ reward: { model: 'org/rm' }, rewardModelCenter: false }));
    expect((raw._comment as string[]).join('\n')).not.toContain('rewardModelCenter');
  });
});

describe('TRL config export with LoRA', () => {
  it('writes a peft_config (PEFT LoraConfig) beside the PPOConfig fields, and says how to pass it', () => {
    const t = toTrlConfig(
      validateConfig({ lora: 16, loraAlpha: 32, loraTargets: ['c_attn', 'mlp.c_proj'], learningRate: 5e-4 }),
    );
    expect(t.peft_config).toEqual({
      r: 16,
      lora_alpha: 32,
      target_modules: ['c_attn', 'mlp.c_proj'],
      lora_dropout: 0,
      bias: 'none',
      task_type: 'CAUSAL_LM',
      fan_in_fan_out: true,
    });
    expect(t.learning_rate).toBe(5e-4);
    const comment = (t._comment as string[]).join('\n');
    expect(comment).toContain('peft_config=LoraConfig(**peft_config)');
    expect(comment).toContain('valueModel "shared"');
    const separate = toTrlConfig(validateConfig({ lora: 4, valueModel: 'separate' }));
    expect((separate.peft_config as { target_modules: string[] }).target_modules).toEqual([
      'c_attn',
      'attn.c_proj',
      'c_fc',
      'mlp.c_proj',
    ]);
    expect((separate._comment as string[]).join('\n')).not.toContain('valueModel "shared"');
  });

  it('without LoRA there is no peft_config', () => {
    const t = toTrlConfig(validateConfig({}));
    expect(t).not.toHaveProperty('peft_config');
    expect((t._comment as string[]).join('\n')).not.toContain('peft_config');
  });
});
