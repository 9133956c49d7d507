import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (src/cli/../..). */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** Built-in model presets shipped under public/models. */
export const PRESETS: Record<string, string> = {
  tiny: path.join(ROOT, 'public/models/tiny'),
};

/** A preset name or a folder path. */
export function resolveModel(nameOrDir: string): string {
  return PRESETS[nameOrDir] ?? nameOrDir;
}
