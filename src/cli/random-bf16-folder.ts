/**
 * A Llama-family model folder with random weights written straight to BF16, one tensor at a time: what
 * `bench --gpu`'s f16-base rows (issue #36) train. Qwen2.5-1.5B in float32 is 6.2 GB, more than one Node buffer
 * holds (4 GiB), so Llama.random + exportLM (which make the f32 model first) cannot write it; this never holds
 * more than one tensor's bytes. The values: matrices uniform in ±0.02·√3 (standard deviation 0.02, Llama.random's),
 * norm weights 1, biases 0, from a seeded xorshift; each f32 rounded to BF16 to nearest even, as
 * scripts/make-random-model.ts --dtype bf16 writes them. Tokenizer files: the 512-id ChatML fixture.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseModelConfig } from '../core/model/config';
import { llamaParamSpecs } from '../core/model/llama';
import { llamaConfigToJson, type LlamaConfig } from '../core/model/llama-config';
import type { ByteSource, FileBody } from '../core/model/safetensors';
import { writeFolder } from './files-node';
import { ROOT } from './models';

/** Values per chunk written (2 bytes each). */
const CHUNK = 1 << 22;

/** The safetensors file of `config`'s parameters (HF names under `model.`, lm_head untied only) in BF16. */
export function randomBf16Safetensors(config: LlamaConfig, seed = 1234): ByteSource {
  const specs = llamaParamSpecs(config).map((s) => ({
    name: s.name === 'lm_head.weight' ? s.name : `model.${s.name}`,
    shape: s.shape,
    count: s.shape.reduce((a, b) => a * b, 1),
    kind: /norm\.weight$/.test(s.name) ? 'one' : s.name.endsWith('.bias') ? 'zero' : 'random',
  }));
  const header: Record<string, unknown> = {};
  let at = 0;
  for (const s of specs) {
    header[s.name] = { dtype: 'BF16', shape: s.shape, data_offsets: [at, at + 2 * s.count] };
    at += 2 * s.count;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - ((8 + json.length) % 8)) % 8);
  const head = new Uint8Array(8 + json.length);
  new DataView(head.buffer).setBigUint64(0, BigInt(json.length), true);
  head.set(new TextEncoder().encode(json), 8);
  const dataBytes = at;
  return {
    byteLength: head.length + dataBytes,
    async *chunks() {
      yield head;
      let x = seed >>> 0 || 1;
      const f32 = new Float32Array(1);
      const u32 = new Uint32Array(f32.buffer);
      const a = 0.02 * Math.sqrt(3);
      const ONE = 0x3f80; // 1.0 in BF16
      for (const s of specs) {
        for (let done = 0; done < s.count; done += CHUNK) {
          const n = Math.min(CHUNK, s.count - done);
          const out = new Uint16Array(n);
          if (s.kind === 'one') out.fill(ONE);
          else if (s.kind === 'random') {
            for (let i = 0; i < n; i++) {
              x ^= x << 13;
              x ^= x >>> 17;
              x ^= x << 5;
              f32[0] = ((x >>> 0) / 4294967296 - 0.5) * 2 * a;
              const w = u32[0];
              out[i] = (w + 0x7fff + ((w >>> 16) & 1)) >>> 16;
            }
          }
          yield new Uint8Array(out.buffer);
        }
      }
    },
  };
}

/** Write `raw` (a Llama-family config.json) with random BF16 weights and the fixture tokenizer into `dir`. */
export async function writeRandomBf16LlamaFolder(
  dir: string,
  raw: Record<string, unknown>,
  seed = 1234,
): Promise<LlamaConfig> {
  const config = parseModelConfig(raw) as LlamaConfig;
  const files = new Map<string, FileBody>([
    // dtype bfloat16: what the file holds (transformers' dtype "auto" would load it so; the bench names its dtype).
    [
      'config.json',
      new TextEncoder().encode(JSON.stringify({ ...llamaConfigToJson(config), dtype: 'bfloat16' }, null, 2)),
    ],
    ['model.safetensors', randomBf16Safetensors(config, seed)],
  ]);
  const tok = join(ROOT, 'tests', 'fixtures', 'hf-tokenizer');
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json'])
    files.set(f, new Uint8Array(await readFile(join(tok, f))));
  await writeFolder(dir, files);
  return config;
}
