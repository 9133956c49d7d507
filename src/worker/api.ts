/**
 * The object the model worker exposes (protocol.ts's WorkerApi). It owns the tfjs state of the worker: the
 * chosen backend and the loaded policy. Calls run one at a time (comlink would otherwise interleave them at
 * every await), and every error leaves the worker as an Error whose message is fit to show.
 */
import * as tf from '@tensorflow/tfjs-core';
import { loadLM, type LoadedLM } from '../core/model/folder';
import { generate as sample } from '../core/model/sampling';
import { isUserError, UserError } from '../core/errors';
import { selectBackend } from './backend-web';
import { fetchFiles, builtinModelUrl } from './files-web';
import type {
  BackendPref,
  BackendReport,
  GenerateReply,
  GenerateRequest,
  MemoryReport,
  ModelSource,
  ModelSummary,
  WorkerApi,
} from './protocol';

interface Loaded {
  lm: LoadedLM;
  source: ModelSource;
  summary: ModelSummary;
}

/** Runs async jobs strictly one after another. */
function serialQueue() {
  let tail: Promise<unknown> = Promise.resolve();
  return <T>(job: () => Promise<T>): Promise<T> => {
    const run = tail.then(job, job);
    tail = run.catch(() => undefined);
    return run;
  };
}

/**
 * What crosses to the UI: comlink sends an Error's name, message and stack. A UserError keeps its name and
 * loses the stack (the message is the whole story); anything else becomes an Error (a thrown string or a
 * GPU error object would otherwise arrive as a bare value).
 */
function forTransfer(e: unknown): Error {
  if (isUserError(e)) {
    const out = new UserError(e.message);
    out.stack = undefined;
    return out;
  }
  if (e instanceof Error) return e;
  const message =
    typeof e === 'object' && e !== null && 'message' in e
      ? String((e as { message: unknown }).message)
      : String(e);
  return new Error(message);
}

function sourceLabel(source: ModelSource): string {
  return source.kind === 'builtin' ? `built-in ${source.name}` : source.baseUrl;
}

function sourceUrl(source: ModelSource): string {
  if (source.kind === 'builtin') {
    if (source.name !== 'tiny')
      throw new UserError(`There is no built-in model "${source.name}"; the built-in model is "tiny".`);
    return builtinModelUrl(source.name);
  }
  return source.baseUrl;
}

function summarise(lm: LoadedLM, label: string): ModelSummary {
  const c = lm.config;
  let params = 0;
  for (const v of lm.model.params.values()) params += v.size;
  return {
    label,
    n_layer: c.n_layer,
    n_embd: c.n_embd,
    n_head: c.n_head,
    vocab_size: c.vocab_size,
    n_positions: c.n_positions,
    params,
    tokenizer: c.tokenizer,
  };
}

export function createWorkerApi(): WorkerApi {
  const serial = serialQueue();
  let backend: BackendReport | null = null;
  let loaded: Loaded | null = null;

  /** Run `job` in turn; errors leave as displayable Errors. */
  const call = <T>(job: () => Promise<T>): Promise<T> =>
    serial(async () => {
      try {
        return await job();
      } catch (e) {
        throw forTransfer(e);
      }
    });

  async function load(source: ModelSource): Promise<Loaded> {
    const label = sourceLabel(source);
    const lm = await loadLM(fetchFiles(sourceUrl(source), label), { trainable: false, label: 'policy' });
    return { lm, source, summary: summarise(lm, label) };
  }

  function requireModel(): Loaded {
    if (!loaded) throw new UserError('No model is loaded yet; load a model first.');
    return loaded;
  }

  async function switchBackend(pref: BackendPref): Promise<BackendReport> {
    const source = loaded?.source;
    // Weights live on the backend that created them: free them there, reload on the new one.
    loaded?.lm.model.dispose();
    loaded = null;
    backend = await selectBackend(pref);
    if (source) loaded = await load(source);
    return backend;
  }

  return {
    init: (pref) => call(() => switchBackend(pref)),
    setBackend: (pref) => call(() => switchBackend(pref)),

    loadModel: (source) =>
      call(async () => {
        if (!backend) backend = await selectBackend('auto');
        const next = await load(source);
        loaded?.lm.model.dispose();
        loaded = next;
        return next.summary;
      }),

    generate: (req: GenerateRequest) =>
      call(async (): Promise<GenerateReply> => {
        const { lm } = requireModel();
        const { model, tokenizer, config } = lm;
        if (!Number.isInteger(req.seed) || req.seed < 0) {
          throw new UserError(`Seed must be a whole number of 0 or more, got ${req.seed}.`);
        }
        const encoded = tokenizer.encode(req.prompt);
        // An empty prompt means "unconditional": start from the beginning-of-text token, as GPT-2 does.
        const prompt = encoded.length > 0 ? encoded : [config.bos_token_id];
        const t0 = performance.now();
        const out = await sample(model, [prompt], {
          maxNewTokens: req.maxNewTokens,
          temperature: req.temperature,
          topK: req.topK,
          topP: req.topP,
          stopToken: tokenizer.eosId,
          padId: tokenizer.padId,
          rng: req.seed,
        });
        const millis = performance.now() - t0;
        const tokens = out.tokens[0];
        return {
          text: tokenizer.decode(tokens),
          tokens,
          tokenTexts: tokens.map((id) => tokenizer.decodeToken(id)),
          logprobs: out.logprobs[0],
          promptTokens: prompt.length,
          tokensPerSecond: tokens.length / Math.max(millis / 1000, 1e-9),
          millis,
        };
      }),

    memory: () =>
      call(async (): Promise<MemoryReport> => {
        const m = tf.memory();
        return { numTensors: m.numTensors, numBytes: m.numBytes, backend: backend?.backend ?? 'cpu' };
      }),

    forwardLogits: (ids, mask) =>
      call(async () => {
        const { lm } = requireModel();
        const out = tf.tidy(() =>
          lm.model.logits(tf.tensor2d(ids, undefined, 'int32'), tf.tensor2d(mask, undefined, 'int32')),
        );
        try {
          return (await out.array()) as number[][][];
        } finally {
          out.dispose();
        }
      }),
  };
}
