/** Node loader for the built-in tasks in public/tasks (the browser fetches the same files by `taskUrl`). */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { UserError } from '../common/errors';
import { checkTaskName, parseTask, taskUrl, type Task } from '../core/tasks/index';

/** The repository's public/ folder, found from this file (src/cli/ → ../../public). */
export const PUBLIC_DIR = fileURLToPath(new URL('../../public/', import.meta.url));

export function taskPathNode(name: string): string {
  return fileURLToPath(new URL(taskUrl(name), new URL('../../public/', import.meta.url)));
}

/** Reads and validates public/tasks/NAME.json; an unknown name is a UserError listing the built-in tasks. */
export async function loadTaskNode(name: string): Promise<Task> {
  checkTaskName(name);
  const path = taskPathNode(name);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    throw new UserError(
      `task "${name}": cannot read ${path} (${(e as Error).message}); is the public/ folder present?`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new UserError(`${path}: not valid JSON (${(e as Error).message}).`);
  }
  return parseTask(json, path);
}
