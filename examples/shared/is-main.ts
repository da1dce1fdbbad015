import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/**
 * Whether the module at `url` (its `import.meta.url`) is the script node was started with, so an
 * example runs when started and not when a test imports it. Compared as real paths: the URL is
 * percent-encoded (a space is `%20`) and resolves symlinks, `process.argv[1]` does neither.
 */
export function isMain(url: string): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return realpathSync(fileURLToPath(url)) === realpathSync(script);
  } catch {
    return false;
  }
}
