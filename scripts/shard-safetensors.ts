/**
 * Split a safetensors file into Hugging Face's sharded layout, as `save_pretrained` writes a model over its
 * max_shard_size: `model-00001-of-0000N.safetensors` … and `model.safetensors.index.json` ({"metadata":
 * {"total_size"}, "weight_map": {tensor: shard}}). Tensors keep their dtype and bytes (copied, never decoded) and
 * go to shards in the file's order, each shard taking about 1/N of the data. For test folders
 * (scripts/make-random-model.ts --shards N); the loader is src/core/model/folder.ts readWeights.
 */
export function shardSafetensors(bytes: Uint8Array, shards: number, base = 'model'): Map<string, Uint8Array> {
  if (!Number.isInteger(shards) || shards < 2)
    throw new Error(`shards must be an integer ≥ 2, got ${shards}.`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLen = view.getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + headerLen))) as Record<
    string,
    { dtype: string; shape: number[]; data_offsets: [number, number] }
  >;
  const dataStart = 8 + headerLen;
  const names = Object.keys(header)
    .filter((n) => n !== '__metadata__')
    .sort((a, b) => header[a].data_offsets[0] - header[b].data_offsets[0]);
  const total = names.reduce((s, n) => s + header[n].data_offsets[1] - header[n].data_offsets[0], 0);
  if (names.length < shards) throw new Error(`${names.length} tensors cannot fill ${shards} shards.`);
  const groups: string[][] = Array.from({ length: shards }, () => []);
  let k = 0;
  let inShard = 0;
  names.forEach((n, i) => {
    const left = names.length - i; // this tensor and those after it
    // On to the next shard once this one has its share, or when the rest must each have one tensor.
    if (groups[k].length > 0 && k < shards - 1 && (inShard >= total / shards || left <= shards - 1 - k)) {
      k++;
      inShard = 0;
    }
    groups[k].push(n);
    inShard += header[n].data_offsets[1] - header[n].data_offsets[0];
  });
  const pad = (k: number) => String(k).padStart(5, '0');
  const out = new Map<string, Uint8Array>();
  const weightMap: Record<string, string> = {};
  groups.forEach((group, k) => {
    const file = `${base}-${pad(k + 1)}-of-${pad(shards)}.safetensors`;
    const h: Record<string, unknown> = { __metadata__: { format: 'pt' } };
    let off = 0;
    for (const n of group) {
      const [b, e] = header[n].data_offsets;
      h[n] = { dtype: header[n].dtype, shape: header[n].shape, data_offsets: [off, off + e - b] };
      off += e - b;
      weightMap[n] = file;
    }
    let json = JSON.stringify(h);
    while ((8 + json.length) % 8) json += ' ';
    const shard = new Uint8Array(8 + json.length + off);
    new DataView(shard.buffer).setUint32(0, json.length, true);
    shard.set(new TextEncoder().encode(json), 8);
    let at = 8 + json.length;
    for (const n of group) {
      const [b, e] = header[n].data_offsets;
      shard.set(bytes.subarray(dataStart + b, dataStart + e), at);
      at += e - b;
    }
    out.set(file, shard);
  });
  const index = { metadata: { total_size: total }, weight_map: weightMap };
  out.set(`${base}.safetensors.index.json`, new TextEncoder().encode(JSON.stringify(index, null, 2) + '\n'));
  return out;
}
