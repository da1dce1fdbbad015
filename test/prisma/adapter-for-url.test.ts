import { readdirSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { beforeAll, describe, expect, it } from 'vitest';
import { adapterForUrl, sqliteFileOfUrl } from '../../src/prisma/adapter-for-url.js';

interface RawAdapter {
  executeRaw(query: { sql: string; args: unknown[]; argTypes: unknown[] }): Promise<number>;
  queryRaw(query: { sql: string; args: unknown[]; argTypes: unknown[] }): Promise<{ rows: unknown[][] }>;
  dispose(): Promise<void>;
}

async function connected(url: string): Promise<RawAdapter> {
  return (await (await adapterForUrl(url)).connect()) as RawAdapter;
}

const sql = (text: string) => ({ sql: text, args: [], argTypes: [] });

describe('adapterForUrl on SQLite URLs', () => {
  it.each([
    ['file:./app.db', './app.db'],
    ['file:app.db', 'app.db'],
    ['FILE:data/app.db', 'data/app.db'],
    ['sqlite:./app.db', './app.db'],
    ['sqlite://./app.db', './app.db'],
    ['file://./app.db', './app.db'],
    ['file:///srv/app.db', '/srv/app.db'],
    ['sqlite:///srv/app.db', '/srv/app.db'],
    ['file:./app.db?connection_limit=1', './app.db'],
    ['file:./app.db?connection_limit=1&socket_timeout=10', './app.db'],
    ['sqlite://./app.db?pool_timeout=5', './app.db'],
    ['file::memory:', ':memory:'],
  ])('reads %s as the file %s', (url, file) => {
    expect(sqliteFileOfUrl(url)).toBe(file);
  });

  it.each([
    ['file:./app.db?mode=ro', /^Unsupported in the SQLite URL file:\.\/app\.db\?mode=ro: mode\./],
    ['file:./app.db?connection_limit=1&cache=shared', /: cache\./],
    ['file:', /^No file path in the SQLite URL file:/],
    ['sqlite://?connection_limit=1', /^No file path/],
  ])('refuses %s instead of opening another file', async (url, message) => {
    expect(() => sqliteFileOfUrl(url)).toThrow(message);
    await expect(adapterForUrl(url)).rejects.toThrow(message);
  });

  describe('opening the file', () => {
    const folder = '.tmp/adapter-for-url';
    beforeAll(async () => {
      await rm(folder, { recursive: true, force: true });
      await mkdir(folder, { recursive: true });
    });

    it.each([
      [`sqlite://${folder}/slashes.db`, 'slashes.db'],
      [`sqlite:${folder}/scheme.db`, 'scheme.db'],
      [`file:${folder}/prisma6.db?connection_limit=1&socket_timeout=10`, 'prisma6.db'],
    ])('writes %s to the file %s, and to no other', async (url, name) => {
      const writer = await connected(url);
      try {
        await writer.executeRaw(sql('CREATE TABLE probe (n INTEGER)'));
        await writer.executeRaw(sql('INSERT INTO probe VALUES (42)'));
      } finally {
        await writer.dispose();
      }
      expect(readdirSync(folder)).toContain(name);
      expect(readdirSync(folder).filter((file) => file.startsWith(name))).toEqual([name]);
      const reader = await connected(`file:${folder}/${name}`);
      try {
        expect((await reader.queryRaw(sql('SELECT n FROM probe'))).rows.map(([n]) => Number(n))).toEqual([
          42,
        ]);
      } finally {
        await reader.dispose();
      }
    });
  });
});
