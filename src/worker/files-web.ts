/** Model folders over HTTP(S): the browser's `ModelFiles` (core/model/folder.ts) built on fetch. */
import type { ModelFiles } from '../core/model/folder';
import { UserError } from '../common/errors';

/**
 * A folder at `baseUrl` (absolute, or relative to the worker's origin). A 404 means "no such file" (null).
 * A server that answers every path with its index page (a single-page-app fallback, e.g. Vite's dev server)
 * is recognised by the HTML content type and also treated as "no such file".
 */
export function fetchFiles(baseUrl: string, label: string = baseUrl): ModelFiles {
  const base = new URL(baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`, self.location.href);
  return {
    label,
    async read(name: string): Promise<Uint8Array | null> {
      const url = new URL(name, base);
      let res: Response;
      try {
        // No "*/*" in Accept: that is what makes dev servers answer a missing file with index.html.
        res = await fetch(url, { headers: { Accept: 'application/octet-stream, application/json' } });
      } catch (e) {
        throw new UserError(
          `${url.href} could not be downloaded (${(e as Error).message}); check the address and the connection.`,
        );
      }
      if (res.status === 404 || res.status === 410) return null;
      if (!res.ok) throw new UserError(`${url.href}: the server answered ${res.status} ${res.statusText}.`);
      const type = res.headers.get('content-type') ?? '';
      if (type.includes('text/html') && !name.endsWith('.html')) return null;
      return new Uint8Array(await res.arrayBuffer());
    },
  };
}

/** Where the app serves a built-in model folder (public/models/<name>/). */
export function builtinModelUrl(name: string): string {
  // BASE_URL is "/" (or an absolute sub-path) for this app, so it resolves against the origin.
  return new URL(`${import.meta.env.BASE_URL}models/${name}/`, self.location.origin).href;
}
