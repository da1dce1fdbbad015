import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { migrate } from '../../scripts/migrate.js';
import {
  accepts,
  cleanUpOnExit,
  createDatabase,
  findBinary,
  freePort,
  installMariaDb,
  mariaDbArgs,
  privateFolder,
  until,
} from './private-server.js';

const run = promisify(execFile);

/** Where Debian's `galera-4` puts the wsrep provider. */
export const GALERA_PROVIDER = '/usr/lib/galera/libgalera_smm.so';

/** A multi-primary MariaDB Galera cluster of the test's own, on loopback, in a temporary folder. */
export interface GaleraCluster {
  /** One migrated database URL per node (the same database, replicated). */
  urls: string[];
  /** Each node's state (running, or how it ended) and the end of its error log: for a failure's message. */
  nodes(): Promise<string>;
  /** Stops every node and deletes the folder. */
  destroy(): Promise<void>;
}

const asRoot = process.getuid?.() === 0;

/**
 * Starts a `size`-node Galera cluster: node 1 bootstraps it (`--wsrep-new-cluster`) from a fresh
 * `mariadb-install-db`, the others join with an rsync state transfer, one at a time. Every node
 * runs as the `mysql` user (rsync SST refuses otherwise), with a small buffer pool and no binary
 * log or fsync: this is a test cluster, not a durable one. Resolves once every node is synced and
 * the schema is migrated (through node 1; Galera replicates the DDL).
 */
export async function startGaleraCluster(size = 3, bufferPool = '64M'): Promise<GaleraCluster> {
  const server = findBinary(['/usr/sbin/mariadbd', '/usr/bin/mariadbd']);
  const install = findBinary(['/usr/bin/mariadb-install-db', '/usr/bin/mysql_install_db']);
  if (!server || !install)
    throw new Error('MariaDB server binaries (mariadbd, mariadb-install-db) not found');
  if (!findBinary([GALERA_PROVIDER]))
    throw new Error(`The Galera provider is not installed: ${GALERA_PROVIDER}`);
  if (!findBinary(['/usr/bin/rsync'])) throw new Error('rsync (for the state transfer) is not installed');
  const dir = await privateFolder('im-galera-', 'mysql');
  const children: ChildProcess[] = [];
  const killAll = () => {
    for (const child of children)
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  // On exit the nodes are killed, then the folder removed (one handler, in that order).
  const cleanup = cleanUpOnExit(dir, () => {
    killAll();
    return undefined;
  });
  const nodes = [];
  for (let i = 0; i < size; i++) {
    nodes.push({
      port: await freePort(),
      gcomm: await freePort(),
      ist: await freePort(),
      sst: await freePort(),
    });
  }
  const addresses = nodes.map((n) => `127.0.0.1:${n.gcomm}`).join(',');
  const destroy = async () => {
    for (const child of children) child.kill('SIGTERM');
    await until(
      'the Galera nodes have exited',
      () => children.every((c) => c.exitCode !== null || c.signalCode !== null),
      30_000,
    ).catch(killAll);
    cleanup.forget();
    await rm(dir, { recursive: true, force: true });
  };
  try {
    for (const [i, node] of nodes.entries()) {
      const home = join(dir, `node${i + 1}`);
      const data = join(home, 'data');
      await mkdir(data, { recursive: true });
      if (asRoot) await run('chown', ['-R', 'mysql:mysql', home]);
      if (i === 0) await installMariaDb(install, data);
      const args = [
        ...mariaDbArgs({ data, home, port: node.port, bufferPool }),
        '--innodb-autoinc-lock-mode=2',
        '--binlog-format=ROW',
        '--max-connections=100',
        '--wsrep-on=ON',
        `--wsrep-provider=${GALERA_PROVIDER}`,
        `--wsrep-cluster-address=gcomm://${i === 0 ? '' : addresses}`,
        '--wsrep-cluster-name=idempotent-mutations',
        `--wsrep-node-name=node${i + 1}`,
        `--wsrep-node-address=127.0.0.1:${node.gcomm}`,
        `--wsrep-provider-options=gmcast.listen_addr=tcp://127.0.0.1:${node.gcomm};ist.recv_addr=127.0.0.1:${node.ist};gcache.size=32M`,
        '--wsrep-sst-method=rsync',
        `--wsrep-sst-receive-address=127.0.0.1:${node.sst}`,
        '--wsrep-slave-threads=2',
        ...(i === 0 ? ['--wsrep-new-cluster'] : []),
      ];
      const child = spawn(server, args, { stdio: 'ignore', detached: true });
      child.unref();
      children.push(child);
      await until(
        `Galera node ${i + 1} accepts connections`,
        async () => {
          if (child.exitCode !== null || child.signalCode !== null)
            throw new Error(`Galera node ${i + 1} exited: see ${join(home, 'error.log')}`);
          return accepts(node.port);
        },
        60_000,
      );
    }
    const root = (node: { port: number }) => `mysql://root@127.0.0.1:${node.port}`;
    await createDatabase(`${root(nodes[0]!)}/mysql`, 'test');
    const urls = nodes.map((node) => `${root(node)}/test`);
    await migrate(urls[0]!);
    const states = async () => {
      const said = await Promise.all(
        children.map(async (child, i) => {
          const ended = child.exitCode ?? child.signalCode;
          const log = await readFile(join(dir, `node${i + 1}`, 'error.log'), 'utf8').catch(
            (error: Error) => `(no error.log: ${error.message})`,
          );
          const tail = log.trimEnd().split('\n').slice(-15).join('\n    ');
          return `node ${i + 1}: ${ended === null ? 'running' : `ended (${ended})`}; its error.log ends:\n    ${tail}`;
        }),
      );
      return said.join('\n');
    };
    return { urls, nodes: states, destroy };
  } catch (error) {
    await destroy();
    throw error;
  }
}
