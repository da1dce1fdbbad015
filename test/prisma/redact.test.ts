import { describe, expect, it } from 'vitest';
import { redact, redactSecretsOf } from '../../src/prisma/redact.js';

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
    ['host=db user=app password=s3cret dbname=app', 'host=db user=app password=*** dbname=app'],
    ['file:./dev.db', 'file:./dev.db'],
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

  it('leaves a message alone when the URL holds no credential', () => {
    expect(redactSecretsOf('postgresql://app@db/app', 'nothing answers at db:5432')).toBe(
      'nothing answers at db:5432',
    );
  });
});
