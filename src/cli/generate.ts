import { parse, num, str } from './args';
import { nodeBindingLimit, setNodeBackend } from './backend-node';
import { assertFolder, nodeFiles } from './files-node';
import { resolveModel } from './models';
import { preflightGenerate } from './preflight';
import { loadLM } from '../core/model/folder';
import { generate } from '../core/model/sampling';
import { UserError } from '../common/errors';
import { encodePrompt, stopIdsOf } from '../core/tokenizer';

export const GENERATE_HELP = `generate --model DIR|tiny --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P]
         [--seed S] [--no-stop] [--no-chat-template] [--backend wasm|cpu|webgpu] [--json]
  Temperature 0 is greedy. Stops after the model's EOS (every stop id of a Hugging Face model) unless --no-stop.
  A model with a chat template (Llama/Qwen instruct) gets the prompt as a user message in it, unless --no-chat-template.`;

export async function cmdGenerate(argv: string[]): Promise<void> {
  const v = parse('generate', argv, {
    model: { type: 'string' },
    prompt: { type: 'string' },
    'max-new-tokens': { type: 'string' },
    temperature: { type: 'string' },
    'top-k': { type: 'string' },
    'top-p': { type: 'string' },
    seed: { type: 'string' },
    backend: { type: 'string' },
    json: { type: 'boolean' },
    'no-stop': { type: 'boolean' },
    'no-chat-template': { type: 'boolean' },
  });
  const dir = resolveModel(str('generate', v, 'model', true));
  const prompt = v.prompt;
  if (typeof prompt !== 'string') throw new UserError('generate: --prompt is required.');
  const maxNewTokens = num('generate', v, 'max-new-tokens', 32, { min: 1, max: 100_000, integer: true });
  const temperature = num('generate', v, 'temperature', 1, { min: 0, max: 100 });
  const topK = num('generate', v, 'top-k', 0, { min: 0, max: 1e9, integer: true });
  const topP = num('generate', v, 'top-p', 1, { min: 1e-9, max: 1 });
  const seed = num('generate', v, 'seed', 0, { min: 0, max: 2 ** 32 - 1, integer: true });
  await setNodeBackend(str('generate', v, 'backend') ?? 'wasm');
  await assertFolder(dir);
  await preflightGenerate(dir, { prompt, maxNewTokens });
  const { model, tokenizer, config } = await loadLM(nodeFiles(dir), {
    trainable: false,
    maxBindingBytes: nodeBindingLimit(),
  });
  let promptTokens = encodePrompt(tokenizer, prompt, !v['no-chat-template']);
  if (promptTokens.length === 0) promptTokens = [config.bos_token_id];
  const t0 = performance.now();
  const r = await generate(model, [promptTokens], {
    maxNewTokens,
    temperature,
    topK,
    topP,
    rng: seed,
    padId: tokenizer.padId,
    stopToken: v['no-stop'] ? null : stopIdsOf(tokenizer),
  });
  const secs = (performance.now() - t0) / 1000;
  model.dispose();
  const tokens = r.tokens[0];
  const text = tokenizer.decode(tokens);
  process.stderr.write(`${tokens.length} tokens in ${secs.toFixed(2)} s\n`);
  if (v.json) {
    process.stdout.write(JSON.stringify({ promptTokens, tokens, logprobs: r.logprobs[0], text }) + '\n');
  } else {
    process.stdout.write(prompt + text + '\n');
  }
}
