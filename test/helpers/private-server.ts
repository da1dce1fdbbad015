import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { migrate } from '../../scripts/migrate.js';

const run = promisify(execFile);

/**
 * A database server of the test's own, on a port of its own, in a temporary folder: fault tests
 * stop, kill and restart it without touching the shared servers other suites use.
 */
export interface PrivateServer {
  name: 'PostgreSQL' | 'MariaDB';
  provider: 'postgresql' | 'mysql';
  /** A migrated database on it. */
  url: string;
  /** Shuts the server down cleanly (PostgreSQL: `pg_ctl stop -m fast`; MariaDB: SIGTERM). */
  stop(): Promise<void>;
  /** Starts it again on the same port and data; resolves once it accepts connections. */
  start(): Promise<void>;
  /** SIGKILLs the server's main process (the postmaster, `mariadbd`) and waits for its port to close. */
  kill(): Promise<void>;
  /**
   * PostgreSQL only: begins a smart shutdown and returns at once. Sessions already open go on;
   * every new connection is refused with SQLSTATE 57P03 ("the database system is shutting down")
   * until `stop()` finishes the shutdown.
   */
  refuseNewConnections?(): Promise<void>;
  /** Stops it and deletes its folder. */
  destroy(): Promise<void>;
}

/** A server, or why none could be started. */
export type PrivateServerResult = { server: PrivateServer } | { server?: undefined; reason: string };

const asRoot = process.getuid?.() === 0;

/** Runs a server binary as `user` when we are root (PostgreSQL refuses to run as root). */
function command(user: string, file: string, args: string[]): [string, string[]] {
  return asRoot ? ['runuser', ['-u', user, '--', file, ...args]] : [file, args];
}

/** A TCP port free on loopback right now. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Whether something accepts TCP connections on loopback `port`. */
export function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/** Polls `condition` every 50 ms until it holds; throws after `ms`. */
export async function until(what: string, condition: () => Promise<boolean> | boolean, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Servers still running when the process exits (a test that crashed) are killed, their folders removed. */
const running = new Map<string, () => number | undefined>();
/** Kills the process `pid()` names and removes `dir` when this process exits, unless `forget` was called. */
export function cleanUpOnExit(dir: string, pid: () => number | undefined): { forget(): void } {
  running.set(dir, pid);
  return { forget: () => running.delete(dir) };
}
process.once('exit', () => {
  for (const [dir, pid] of running) {
    const p = pid();
    if (p && alive(p)) process.kill(p, 'SIGKILL');
    // A server just killed may still be closing files: retry a directory that is not empty yet.
    rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
  }
});

/** A temporary folder owned by `user` (when we are root, who runs servers as that user). */
export async function privateFolder(prefix: string, user: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  if (asRoot) {
    const { stdout } = await run('id', ['-u', user]);
    const { stdout: gid } = await run('id', ['-g', user]);
    await chown(dir, Number(stdout), Number(gid));
  }
  return dir;
}

/** The first of `candidates` that exists. */
export function findBinary(candidates: string[]): string | undefined {
  return candidates.find((file) => existsSync(file));
}

function postgresBin(): string | undefined {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => existsSync(join(root, v, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  return versions[0] ? join(root, versions[0], 'bin') : undefined;
}

/** A PostgreSQL server of its own: `initdb` into a temporary folder, `pg_ctl` on a free port. */
export async function privatePostgres(): Promise<PrivateServer> {
  const bin = postgresBin();
  if (!bin) throw new Error('PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin');
  const dir = await privateFolder('im-pg-', 'postgres');
  const data = join(dir, 'data');
  const port = await freePort();
  const pgCtl = (...args: string[]) =>
    run(...command('postgres', join(bin, 'pg_ctl'), ['-D', data, ...args]));
  const pid = () => {
    try {
      return Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    } catch {
      return undefined;
    }
  };
  running.set(dir, pid);
  await run(
    ...command('postgres', join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync']),
  );
  const options = [
    `-p ${port}`,
    `-k ${dir}`,
    '-c listen_addresses=127.0.0.1',
    '-c fsync=off',
    '-c synchronous_commit=off',
    '-c full_page_writes=off',
    '-c shared_buffers=16MB',
    '-c max_connections=30',
  ].join(' ');
  const start = async () => {
    // After a kill, orphaned backends exit once they notice; the lock file and shared memory go with them.
    await until('a restarted PostgreSQL accepts connections', async () => {
      // Already running (someone else started it): done. Without this, a start() made while the
      // server ran kept trying in the background and restarted it after a later test's stop().
      // (Its port, not `pg_ctl status`: a killed postmaster not yet reaped still looks alive.)
      if (await accepts(port)) return true;
      try {
        await pgCtl('start', '-w', '-t', '20', '-l', join(dir, 'log'), '-o', options);
        return true;
      } catch {
        return false;
      }
    });
  };
  await start();
  return {
    name: 'PostgreSQL',
    provider: 'postgresql',
    url: await migrated(`postgresql://postgres@127.0.0.1:${port}/postgres`),
    start,
    async stop() {
      await pgCtl('stop', '-m', 'fast', '-w');
    },
    async refuseNewConnections() {
      await pgCtl('stop', '-m', 'smart', '--no-wait');
    },
    async kill() {
      const p = pid();
      if (p) process.kill(p, 'SIGKILL');
      await until('the killed postmaster is gone', () => !(p && alive(p)));
    },
    async destroy() {
      const p = pid();
      if (p && alive(p)) await pgCtl('stop', '-m', 'immediate', '-w').catch(() => process.kill(p, 'SIGKILL'));
      running.delete(dir);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Creates a MariaDB data folder with `mariadb-install-db` (as the `mysql` user when run as root). */
export async function installMariaDb(install: string, data: string): Promise<void> {
  await run(install, [
    '--no-defaults',
    `--datadir=${data}`,
    ...(asRoot ? ['--user=mysql'] : []),
    '--auth-root-authentication-method=normal',
    '--skip-test-db',
  ]);
}

/**
 * The `mariadbd` arguments every private server of the tests starts with: its files in `home`,
 * loopback only, no grants, small and without durable flushes.
 */
export function mariaDbArgs(options: {
  data: string;
  home: string;
  port: number;
  bufferPool: string;
}): string[] {
  const { data, home, port, bufferPool } = options;
  return [
    '--no-defaults',
    `--datadir=${data}`,
    `--port=${port}`,
    '--bind-address=127.0.0.1',
    `--socket=${join(home, 'mysqld.sock')}`,
    `--pid-file=${join(home, 'mysqld.pid')}`,
    `--log-error=${join(home, 'error.log')}`,
    `--tmpdir=${home}`,
    ...(asRoot ? ['--user=mysql'] : []),
    '--skip-grant-tables',
    `--innodb-buffer-pool-size=${bufferPool}`,
    '--innodb-log-file-size=16M',
    '--innodb-flush-log-at-trx-commit=0',
  ];
}

/** A MariaDB server of its own: `mariadb-install-db` into a temporary folder, `mariadbd` on a free port. */
export async function privateMariaDb(): Promise<PrivateServer> {
  const server = findBinary(['/usr/sbin/mariadbd', '/usr/sbin/mysqld', '/usr/bin/mariadbd']);
  const install = findBinary(['/usr/bin/mariadb-install-db', '/usr/bin/mysql_install_db']);
  if (!server || !install)
    throw new Error('MariaDB server binaries (mariadbd, mariadb-install-db) not found');
  const dir = await privateFolder('im-maria-', 'mysql');
  const data = join(dir, 'data');
  const port = await freePort();
  let child: ChildProcess | undefined;
  running.set(dir, () => child?.pid);
  await installMariaDb(install, data);
  const args = [
    ...mariaDbArgs({ data, home: dir, port, bufferPool: '32M' }),
    '--skip-log-bin',
    '--max-connections=50',
  ];
  const start = async () => {
    // Already running: done (a second mariadbd would exit on the lock of the first's files).
    if (child && !exited(child) && (await accepts(port))) return;
    const started = spawn(server, args, { stdio: 'ignore', detached: true });
    started.unref();
    child = started;
    await until('MariaDB accepts connections', async () => {
      if (exited(started)) throw new Error(`mariadbd exited: see ${join(dir, 'error.log')}`);
      return accepts(port);
    });
  };
  const exited = (process: ChildProcess) => process.exitCode !== null || process.signalCode !== null;
  const stopped = async (signal: NodeJS.Signals) => {
    const current = child;
    if (!current?.pid || exited(current)) return;
    current.kill(signal);
    await until('mariadbd has exited', () => exited(current), 60_000);
  };
  await start();
  const root = `mysql://root@127.0.0.1:${port}`;
  await createDatabase(`${root}/mysql`, 'test');
  return {
    name: 'MariaDB',
    provider: 'mysql',
    url: await migrated(`${root}/test`),
    start,
    stop: () => stopped('SIGTERM'),
    kill: () => stopped('SIGKILL'),
    async destroy() {
      await stopped('SIGKILL');
      running.delete(dir);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Creates database `name` on the server `url` points at. A server that has just opened its port
 * may still reset the first connections (seen under load): those are tried again for a while.
 */
export async function createDatabase(url: string, name: string): Promise<void> {
  const { adapterForUrl } = await import('../../src/prisma/adapter-for-url.js');
  const { isConnectionError } = await import('../../src/prisma/database-errors.js');
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      const adapter = (await (await adapterForUrl(url)).connect()) as {
        executeRaw(q: { sql: string; args: unknown[]; argTypes: unknown[] }): Promise<number>;
        dispose(): Promise<void>;
      };
      try {
        await adapter.executeRaw({ sql: `CREATE DATABASE IF NOT EXISTS ${name}`, args: [], argTypes: [] });
        return;
      } finally {
        await adapter.dispose();
      }
    } catch (error) {
      if (!isConnectionError(error) || Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}

async function migrated(url: string): Promise<string> {
  await migrate(url);
  return url;
}

/**
 * Starts a private server for a fault suite. When it cannot be started the suite is skipped with
 * the reason, except under CI (`CI` set), where that is a failure.
 */
export async function tryPrivateServer(start: () => Promise<PrivateServer>): Promise<PrivateServerResult> {
  try {
    return { server: await start() };
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    if (process.env.CI) throw new Error(`A private database server is required under CI: ${reason}`);
    console.warn(`Fault suite skipped: could not start a private database server: ${reason}`);
    return { reason };
  }
}
