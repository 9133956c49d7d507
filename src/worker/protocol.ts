/**
 * The worker's typed API, called from the UI through comlink (squoosh style: the UI imports these TYPES only,
 * never the worker's code). Every method is async on the UI side; a rejected call carries an Error whose
 * `message` is meant for a person. `name === 'UserError'` marks a mistake the person can fix (show the
 * message alone); any other name is a bug (show the message, log the details).
 *
 * Keep this file types only: it is the contract between the two threads.
 */

/** A tfjs backend the worker can run on. */
export type BackendName = 'webgpu' | 'wasm' | 'webgl' | 'cpu';
/** What the person asked for; `auto` = WebGPU on a hardware adapter, else WASM → WebGL → CPU. */
export type BackendPref = 'auto' | BackendName;

export interface AdapterReport {
  vendor: string;
  architecture: string;
  description: string;
  /** SwiftShader or a browser-flagged fallback adapter: correct, but slower than WASM. */
  isSoftware: boolean;
}

export interface BackendReport {
  /** The backend tfjs is running on now (may differ from the preference; `notice` then says why). */
  backend: BackendName;
  /** The WebGPU adapter, when the browser offers one (also when another backend was chosen). */
  adapter: AdapterReport | null;
  /** Plain words about a fallback or a software adapter; null when there is nothing to say. */
  notice: string | null;
}

export type ModelSource =
  | { kind: 'builtin'; name: 'tiny' }
  /** A folder served over HTTP(S) holding config.json + model.safetensors; relative URLs resolve against the page. */
  | { kind: 'url'; baseUrl: string };

export interface ModelSummary {
  /** Where it came from, in words ("built-in tiny", a URL). */
  label: string;
  n_layer: number;
  n_embd: number;
  n_head: number;
  vocab_size: number;
  n_positions: number;
  /** Number of trainable parameters (tied LM head counted once). */
  params: number;
  tokenizer: 'gpt2-bpe' | 'bytes';
}

export interface GenerateRequest {
  prompt: string;
  maxNewTokens: number;
  /** 0 = greedy. */
  temperature: number;
  /** 0 = off. */
  topK: number;
  /** 1 = off. */
  topP: number;
  seed: number;
}

export interface GenerateReply {
  /** The generated continuation only (not the prompt). */
  text: string;
  /** Generated ids. */
  tokens: number[];
  /** One display string per generated id (byte pieces escaped, EOS as <|endoftext|>). */
  tokenTexts: string[];
  /** log softmax(logits / T) at each generated id (T = 1 when greedy). */
  logprobs: number[];
  promptTokens: number;
  tokensPerSecond: number;
  /** Wall time of the generate call in milliseconds. */
  millis: number;
}

export interface MemoryReport {
  numTensors: number;
  numBytes: number;
  /** The backend these numbers are for. */
  backend: BackendName;
}

export interface WorkerApi {
  /** Choose a backend (first call). Safe to call again; same as setBackend. */
  init(pref: BackendPref): Promise<BackendReport>;
  /** Switch backend; a loaded model is reloaded on the new backend. */
  setBackend(pref: BackendPref): Promise<BackendReport>;
  /** Load (replace) the policy model. */
  loadModel(source: ModelSource): Promise<ModelSummary>;
  generate(req: GenerateRequest): Promise<GenerateReply>;
  memory(): Promise<MemoryReport>;
  /** Test hook: full-forward logits [B, T, V] of the loaded model for ids/mask [B, T]. */
  forwardLogits(ids: number[][], mask: number[][]): Promise<number[][][]>;
}
