// What the side-by-side scripts (versus.ts, versus-http.ts) share: another commit's `src` to load
// beside this tree's, and how the two sides' times read.
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import path from 'node:path';
import { median } from './stats.js';

/** `revision`'s `src`, extracted into `.tmp/<folder>/<commit>/`: the short commit, its `src`, and its removal. */
export function commitSource(
  revision: string,
  folder: string,
): { commit: string; src: string; remove(): void } {
  const commit = execFileSync('git', ['rev-parse', '--short', revision], { encoding: 'utf8' }).trim();
  const root = path.resolve('.tmp', folder, commit);
  rmSync(root, { recursive: true, force: true });
  mkdirSync(root, { recursive: true });
  execFileSync('sh', ['-c', `git archive ${commit} src | tar -x -C '${root}'`]);
  return {
    commit,
    src: path.join(root, 'src'),
    remove: () => rmSync(root, { recursive: true, force: true }),
  };
}

/**
 * The tree's times against the commit's, recorded in the same rounds (`interleave`): the ratio of
 * their medians, and the median of each round's difference.
 */
export function comparedTimes(times: Record<string, number[]>, commit: string): string {
  const tree = times.tree!;
  const other = times[commit]!;
  const differences = tree.map((ms, i) => (ms - other[i]!) * 1000);
  return `${median(tree).toFixed(3)} against ${median(other).toFixed(3)} ms, ${(median(tree) / median(other)).toFixed(3)}× the time; pairs differ by ${median(differences).toFixed(1)} µs (median)`;
}
