/**
 * Reading what the person picked, refusing what is too big before reading it whole (a multi-gigabyte file must
 * be a message, not a frozen tab): model folders and checkpoint zips.
 */
import { isModelFile, MAX_PICKED_FILE_BYTES } from './download';
import type { UploadedFile } from '../../worker/protocol';

const gb = (n: number) => `${(n / 1024 ** 3).toFixed(1)} GB`;

function userError(message: string): Error {
  return Object.assign(new Error(message), { name: 'UserError' });
}

/**
 * A model folder pick for loadModel({kind: 'files'}): the weights (model.safetensors, or a sharded model's shards)
 * go as the Files themselves, never read here — the worker reads them one tensor at a time, so a 3 GB file loads;
 * config.json, the shard index and a Llama / Qwen folder's tokenizer files are read (and size-checked; download.ts
 * isModelFile); every other file is passed by name with no bytes, so the worker can say why a folder with only
 * pytorch_model.bin cannot load, without reading a pickle it would never use.
 */
export async function readModelPick(files: File[]): Promise<UploadedFile[]> {
  const name = (f: File) => f.webkitRelativePath || f.name;
  const weights = (f: File) => name(f).endsWith('.safetensors');
  const big = files.find((f) => isModelFile(name(f)) && !weights(f) && f.size > MAX_PICKED_FILE_BYTES);
  if (big) {
    throw userError(
      `${name(big)} is ${gb(big.size)}, over the 2 GB a browser can read at once; is it the right file?`,
    );
  }
  return Promise.all(
    files.map(async (f): Promise<UploadedFile> => {
      if (!isModelFile(name(f))) return { name: name(f), bytes: new Uint8Array(0) };
      if (weights(f)) return { name: name(f), blob: f };
      return { name: name(f), bytes: new Uint8Array(await f.arrayBuffer()) };
    }),
  );
}

/** A checkpoint zip for importCheckpoint, refused before reading when it is over what the browser can hold. */
export async function readZipPick(file: File, limit = MAX_PICKED_FILE_BYTES): Promise<Uint8Array> {
  if (file.size > limit) {
    throw userError(
      `${file.name} is ${gb(file.size)}, over the ${gb(limit)} a browser can read at once; a PPO Playground ` +
        'checkpoint of a model this page can train is smaller. Is it the right file?',
    );
  }
  if (file.size === 0)
    throw userError(`${file.name} is empty; choose a checkpoint .zip exported by PPO Playground.`);
  return new Uint8Array(await file.arrayBuffer());
}
