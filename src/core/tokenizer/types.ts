/**
 * The one tokenizer interface the rest of the code sees. Which implementation a model uses is decided by its
 * config.json (docs/formats.md §2), through `tokenizerFor` in ./index.ts.
 *
 * Padding is tracked by masks, never by comparing ids: `padId` is only the filler written at masked positions
 * (for GPT-2 BPE it equals `eosId`, because GPT-2 has no pad token).
 */
export interface Tokenizer {
  /** `hf`: a Hugging Face tokenizer.json (Llama, Qwen2, Qwen3 folders; ./hf.ts). */
  kind: 'gpt2-bpe' | 'bytes' | 'hf';
  /** Number of ids this tokenizer can produce (the model's vocab_size may be larger, e.g. padded to 50304). */
  vocabSize: number;
  eosId: number;
  padId: number;
  /** Plain text to ids. Special-token spellings such as `<|endoftext|>` in the text are encoded as plain text. */
  encode(text: string): number[];
  /** Ids to text. EOS and PAD render as nothing; invalid UTF-8 becomes U+FFFD. */
  decode(ids: number[]): string;
  /**
   * One id for per-token display. A byte-level piece that is not a whole UTF-8 character shows as `\xNN`;
   * control characters show escaped (`\n`, `\t`, `\r`, `\xNN`); EOS shows as `<|endoftext|>`, PAD as `<|pad|>`.
   */
  decodeToken(id: number): string;
  /**
   * Every id that ends a response, `eosId` first: for a Hugging Face folder also each id of generation_config.json's
   * `eos_token_id` (a number or a list) and the chat template's end-of-turn token. Absent: `[eosId]`.
   */
  stopIds?: readonly number[];
  /**
   * The model's own chat template (tokenizer_config.json's `chat_template`) applied to one user message with
   * `add_generation_prompt: true`, as text. Absent when the tokenizer has no template.
   */
  chatPrompt?(user: string): string;
  /**
   * Encode text in which special-token spellings (`<|im_start|>`, …) are the special tokens, as transformers'
   * tokenizer does: what a chat-formatted prompt needs. Absent: `encode` (the GPT-2 and bytes tokenizers).
   */
  encodeWithSpecials?(text: string): number[];
  /**
   * The folder files this tokenizer was read from (tokenizer.json, tokenizer_config.json, generation_config.json),
   * written again beside an exported model. Absent for the built-in GPT-2 and bytes tokenizers.
   */
  files?(): Map<string, Uint8Array>;
}
