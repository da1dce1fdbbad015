import { describe, expect, it } from 'vitest';
import { redact, redactSecretsOf, redactUrlsIn } from '../../src/prisma/redact.js';

describe('redact', () => {
  it.each([
    ['postgresql://app:s3cret@db.example.com:5432/app', 'postgresql://app:***@db.example.com:5432/app'],
    [
      'postgresql://app@db/app?password=s3cret&sslmode=require',
      'postgresql://app@db/app?password=***&sslmode=require',
    ],
    [
      'postgres://app@db/app?sslmode=require&sslpassword=s3cret',
      'postgres://app@db/app?sslmode=require&sslpassword=***',
    ],
    [
      'prisma+postgres://accelerate.prisma-data.net/?api_key=eyJhbGciOi.s3cret',
      'prisma+postgres://accelerate.prisma-data.net/?api_key=***',
    ],
    ['mysql://root:p%40ss@127.0.0.1:3306/app', 'mysql://root:***@127.0.0.1:3306/app'],
    [
      'mariadb://root:p@ss@127.0.0.1/app?password=x1&connectTimeout=500',
      'mariadb://root:***@127.0.0.1/app?password=***&connectTimeout=500',
    ],
    [
      'cockroachdb://root@127.0.0.1:26257/app?sslmode=disable',
      'cockroachdb://root@127.0.0.1:26257/app?sslmode=disable',
    ],
    ['mysql://app:hun#ter2@db/app', 'mysql://app:***@db/app'],
    ['mariadb://app:hun?ter2@db/app?connectTimeout=500', 'mariadb://app:***@db/app?connectTimeout=500'],
    ['mysql://app:p@ss#w?rd@db:3306/app', 'mysql://app:***@db:3306/app'],
    ['postgresql://app:s3cret@db?sslmode=require', 'postgresql://app:***@db?sslmode=require'],
    ['host=db user=app password=s3cret dbname=app', 'host=db user=app password=*** dbname=app'],
    // A quoted libpq value, spaces and escaped quotes in it: hidden whole.
    ["host=db password='hunter 2 \\'x' dbname=app", 'host=db password=*** dbname=app'],
    ['file:./dev.db', 'file:./dev.db'],
    // A generated password with an unencoded `/`: the user info runs to the `@` before the host.
    ['postgresql://app:s3cr/etPw@db.example/app', 'postgresql://app:***@db.example/app'],
    [
      'mysql://app:/s3cr/etPw@127.0.0.1:3306/app?connectTimeout=500',
      'mysql://app:***@127.0.0.1:3306/app?connectTimeout=500',
    ],
    ['postgresql://app:s3cr/etPw@db', 'postgresql://app:***@db'],
    // An `@` in the query is no user info's end, with or without user info before it.
    [
      'postgresql://db.example.com:5432/app?user=app@corp',
      'postgresql://db.example.com:5432/app?user=app@corp',
    ],
    [
      'postgresql://app:s3cret@db/app?application_name=me@ci',
      'postgresql://app:***@db/app?application_name=me@ci',
    ],
  ])('hides the credentials of %s', (url, expected) => {
    expect(redact(url)).toBe(expected);
  });

  it('hides the URL and its secrets wherever a message repeats them, raw or percent-decoded', () => {
    const url = 'postgresql://app:p%40ssw0rd@db/app?api_key=tok3n';
    const message = `failed for ${url}: password "p@ssw0rd" rejected, token tok3n expired`;
    expect(redactSecretsOf(url, message)).toBe(
      'failed for postgresql://app:***@db/app?api_key=***: password "***" rejected, token *** expired',
    );
  });

  it.each(['mysql://app:hun#ter2@db/app', 'mariadb://app:hun?ter2@db/app'])(
    'hides a password holding # or ? wherever a message repeats it: %s',
    (url) => {
      const message = `Access denied for user 'app'@'db' (using password: hun${url.includes('#') ? '#' : '?'}ter2)`;
      expect(redactSecretsOf(url, message)).toBe("Access denied for user 'app'@'db' (using password: ***)");
    },
  );

  it('leaves a message alone when the URL holds no credential', () => {
    expect(redactSecretsOf('postgresql://app@db/app', 'nothing answers at db:5432')).toBe(
      'nothing answers at db:5432',
    );
  });
});

describe('redactUrlsIn', () => {
  it('hides the credentials of every URL in a text, wherever it starts and ends', () => {
    expect(
      redactUrlsIn(
        "error: unknown option '--database_url=postgresql://app:hun#ter2@db/app?sslpassword=s3cret'\n" +
          "error: unknown command 'mysql://root:s3cret@127.0.0.1/app'",
      ),
    ).toBe(
      "error: unknown option '--database_url=postgresql://app:***@db/app?sslpassword=***'\n" +
        "error: unknown command 'mysql://root:***@127.0.0.1/app'",
    );
  });

  it('leaves a text without a URL as it is', () => {
    expect(redactUrlsIn("error: option '--batch-size <n>' argument '0' is invalid")).toBe(
      "error: option '--batch-size <n>' argument '0' is invalid",
    );
  });
});
