/** Saving bytes or text as a file the browser downloads (a Blob URL on an <a download>), and reading picks. */
export function downloadFile(name: string, data: Uint8Array | string, type: string): void {
  const blob = new Blob([data as BlobPart], { type });
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.style.display = 'none';
  document.body.appendChild(a);
  a.click();
  a.remove();
  // Revoking at once can cancel the download in some browsers; a minute is plenty.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** The browser cannot hold one file over this in an ArrayBuffer reliably (the worker refuses them too). */
export const MAX_PICKED_FILE_BYTES = 2 * 1024 ** 3;

/**
 * The model files the worker reads, out of a pick or a whole folder: the model (model.safetensors, or a sharded
 * model's index and shards), and a Llama / Qwen folder's tokenizer files (src/worker/sources.ts UPLOAD_FILES).
 */
export function isModelFile(name: string): boolean {
  return /(^|\/)(config\.json|model\.safetensors|model\.safetensors\.index\.json|model-\d+-of-\d+\.safetensors|tokenizer\.json|tokenizer_config\.json|generation_config\.json|chat_template\.jinja)$/.test(
    name,
  );
}
