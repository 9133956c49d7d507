import { describe, it, expect } from 'vitest';
import { validateConfig } from '../src/common/config';
import { toTrlConfig, trlConfigJson } from '../src/common/exports/trl';

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

  it('grpo writes a GRPOConfig with TRL’s field names (num_generations, beta, epsilon, num_iterations, scale_rewards, loss_type)', () => {
    const cfg = validateConfig({
      model: 'openai-community/gpt2',
      algorithm: 'grpo',
      batchSize: 16,
      miniBatches: 2,
      ppoEpochs: 3,
      steps: 10,
      klCoef: 0.04,
      clipRange: 0.25,
      scaleRewards: 'batch',
      lossAggregation: 'seq-sum-norm',
      responseLength: 32,
      learningRate: 1e-5,
      seed: 5,
    });
    const t = toTrlConfig(cfg);
    expect(t).toMatchObject({
      _trl_class: 'GRPOConfig',
      _model: 'openai-community/gpt2',
      learning_rate: 1e-5,
      per_device_train_batch_size: 8,
      gradient_accumulation_steps: 1,
      steps_per_generation: 2,
      num_generations: 4, // groupSize 0 = grpo's default
      num_iterations: 3,
      max_steps: 60,
      epsilon: 0.25,
      beta: 0.04,
      scale_rewards: 'batch',
      loss_type: 'dr_grpo',
      max_completion_length: 32,
      temperature: 1,
      top_k: 0,
      top_p: 1,
      max_grad_norm: 1,
      seed: 5,
    });
    // PPO-only fields do not leak into a GRPOConfig.
    for (const k of ['kl_coef', 'vf_coef', 'cliprange', 'num_ppo_epochs', 'sft_model_path', 'lam']) {
      expect(t).not.toHaveProperty(k);
    }
    expect(toTrlConfig(validateConfig({ algorithm: 'grpo' })).loss_type).toBe('bnpo');
    expect(toTrlConfig(validateConfig({ algorithm: 'grpo', lossAggregation: 'seq-mean' })).loss_type).toBe(
      'grpo',
    );
    expect((t._comment as string[]).join('\n')).toMatch(/GRPOTrainer\(model=\.\.\., reward_funcs=/);
  });

  it('rloo writes an RLOOConfig (normalize_advantages, no scale_rewards / loss_type) and says what does not carry over', () => {
    const t = toTrlConfig(
      validateConfig({
        algorithm: 'rloo',
        groupSize: 8,
        normalizeAdvantages: true,
        lossAggregation: 'seq-mean',
        lora: 4,
      }),
    );
    expect(t).toMatchObject({
      _trl_class: 'RLOOConfig',
      num_generations: 8,
      normalize_advantages: true,
      beta: 0.05,
      epsilon: 0.2,
      num_iterations: 2,
    });
    expect(t).not.toHaveProperty('scale_rewards');
    expect(t).not.toHaveProperty('loss_type');
    expect(t.peft_config).toMatchObject({ r: 4, task_type: 'CAUSAL_LM' });
    const comment = (t._comment as string[]).join('\n');
    expect(comment).toContain('lossAggregation "seq-mean": RLOOConfig has no loss_type');
    expect(comment).toContain('RLOOTrainer(..., peft_config=LoraConfig(**peft_config))');
  });

  it('reinforce++ has no TRL trainer: OpenRLHF’s --algo.advantage.estimator reinforce flags, and it says so', () => {
    const t = toTrlConfig(
      validateConfig({ algorithm: 'reinforce++', batchSize: 16, miniBatches: 4, gamma: 0.99 }),
    );
    expect(t._trl_class).toBeNull();
    expect(t._openrlhf).toMatchObject({
      'algo.advantage.estimator': 'reinforce',
      'rollout.batch_size': 16,
      'rollout.n_samples_per_prompt': 1,
      'train.batch_size': 4,
      'algo.kl.init_coef': 0.05,
      'algo.kl.estimator': 'k1',
      'algo.advantage.gamma': 0.99,
      'actor.eps_clip': 0.2,
    });
    expect(t._openrlhf_command).toMatch(/^python3 -m openrlhf\.cli\.train_ppo_ray \\$/m);
    expect((t._comment as string[])[0]).toMatch(/TRL has no REINFORCE\+\+ trainer\. OpenRLHF runs it/);
  });

  it('ppo still writes a PPOConfig, and notes the §7 keys it cannot carry', () => {
    const t = toTrlConfig(validateConfig({ groupSize: 2, lossAggregation: 'seq-mean' }));
    expect(t._trl_class).toBe('PPOConfig');
    const comment = (t._comment as string[]).join('\n');
    expect(comment).toContain('groupSize 2: TRL');
    expect(comment).toContain('lossAggregation "seq-mean"');
  });
});
