// The exactly-once storm on a 3-node MariaDB Galera cluster (multi-primary: every server process
// writes to its own node), against the same storm on one plain MariaDB node, both started here on
// loopback from temporary folders and removed afterwards. Exits non-zero unless every key had
// exactly one effect and every duplicate of a key got the same answer.
//
//   npm run test:galera [-- --keys 1000 --duplicates 8 --processes 4]
import { parseArgs } from 'node:util';
import { isConnectionError } from 'idempotent-mutations/prisma';
import { startGaleraCluster } from '../test/helpers/galera-cluster.js';
import { privateMariaDb } from '../test/helpers/private-server.js';
import { runStorm, type StormReport } from './storm/storm.js';

const { values } = parseArgs({
  options: {
    keys: { type: 'string', default: '1000' },
    duplicates: { type: 'string', default: '8' },
    processes: { type: 'string', default: '4' },
  },
});
const shape = {
  keys: Number(values.keys),
  duplicates: Number(values.duplicates),
  processes: Number(values.processes),
};

// Ctrl-C or a kill still runs the exit handlers that stop the servers and remove their folders.
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(130));

function line(name: string, r: StormReport): string {
  const retried =
    Object.entries(r.retried)
      .map(([code, n]) => `${code} ${n}`)
      .join(', ') || 'none';
  return [
    `${name.padEnd(22)} ${r.mode.padEnd(13)} ${r.keys} keys × ${r.duplicates} over ${r.processes} processes on ${r.nodes} node(s)`,
    `  effects: ${r.effects.once} keys once, ${r.effects.none} none, ${r.effects.more} more than once; identical answers: ${r.identicalKeys}/${r.keys} keys; replays ${r.replays}; failed ${r.failed}`,
    `  ${r.seconds.toFixed(1)} s, ${r.requestsPerSecond.toFixed(0)} requests/s; client retries: ${retried}`,
    `  database errors seen by the store: ${
      Object.entries(r.conflicts)
        .map(([place, n]) => `${place} ×${n}`)
        .join(', ') || 'none'
    }`,
    ...r.failures.map((f) => `  failure: ${f}`),
  ].join('\n');
}

const passed = (r: StormReport) => r.effects.once === r.keys && r.identicalKeys === r.keys && r.failed === 0;

const started = Date.now();
const elapsed = () => `${((Date.now() - started) / 1000).toFixed(1)} s`;
let phase = 'starting the Galera cluster';
// A stray rejection (the mariadb connector's) names the phase it broke; the exit handlers still
// stop the servers. Once every storm has been counted, a connection the servers reset as they stop
// changes no result: it is reported and the verdict stands (two runs here ended with one, whose
// source was not found).
process.on('unhandledRejection', (error) => {
  console.error(`unhandled rejection at ${elapsed()}, ${phase}:`, error);
  if (phase === 'stopping the servers' && isConnectionError(error)) return;
  process.exit(1);
});
const cluster = await startGaleraCluster();
console.log(`Galera: 3 nodes up and migrated in ${((Date.now() - started) / 1000).toFixed(1)} s`);
phase = 'starting the plain MariaDB node';
const single = await privateMariaDb();
const reports: [string, StormReport][] = [];
try {
  for (const mode of ['transactional', 'lease'] as const) {
    for (const [name, urls] of [
      ['Galera, 3 nodes', cluster.urls],
      ['MariaDB, 1 node', [single.url]],
    ] as const) {
      phase = `the ${mode} storm on ${name}`;
      console.log(`${elapsed()}: ${phase}`);
      const report = await runStorm({ urls: [...urls], mode, ...shape });
      console.log(line(name, report));
      reports.push([name, report]);
    }
  }
} finally {
  phase = 'stopping the servers';
  await Promise.all([cluster.destroy(), single.destroy()]);
}
for (const mode of ['transactional', 'lease']) {
  const [galera, one] = reports.filter(([, r]) => r.mode === mode).map(([, r]) => r.requestsPerSecond);
  console.log(`${mode}: Galera ${(galera! / one!).toFixed(2)}× one node's throughput`);
}
const [load1, load5] = (await import('node:os')).loadavg();
console.log(
  `load average ${load1!.toFixed(2)}, ${load5!.toFixed(2)}; ${(Date.now() - started) / 1000} s in all`,
);
process.exit(reports.every(([, r]) => passed(r)) ? 0 : 1);
