import { createSchema, createYoga } from 'graphql-yoga';
import { expect, it } from 'vitest';
import { useIdempotency } from '../../src/envelop/index.js';
import { memoryStore } from '../../src/index.js';

/** A Yoga server of one upload mutation with a field key, and how many times its resolver ran. */
function uploadServer() {
  const runs = { upload: 0 };
  const yoga = createYoga<{ userId: string }>({
    schema: createSchema({
      typeDefs: /* GraphQL */ `
        scalar File
        type Query { ok: Boolean }
        type Mutation { upload(file: File!, idempotencyKey: String): String }
      `,
      resolvers: {
        Mutation: {
          upload: async (_: unknown, { file }: { file: File }) => `${++runs.upload}:${await file.text()}`,
        },
      },
    }),
    logging: false,
    context: () => ({ userId: 'u' }),
    plugins: [
      useIdempotency<{ userId: string }>({ store: memoryStore(), scope: (context) => context.userId }),
    ],
  });
  return { yoga, runs };
}

/** A multipart request (the GraphQL multipart request spec) uploading `content` under the key `upload-1`. */
function uploading(content: string): Request {
  const form = new FormData();
  const query = 'mutation ($file: File!) { upload(file: $file, idempotencyKey: "upload-1") }';
  form.set('operations', JSON.stringify({ query, variables: { file: null } }));
  form.set('map', JSON.stringify({ 0: ['variables.file'] }));
  form.set('0', new File([content], 'a.txt', { type: 'text/plain' }));
  return new Request('http://yoga/graphql', {
    method: 'POST',
    body: form,
    headers: { 'graphql-require-preflight': '1' },
  });
}

it('refuses a keyed upload as IDEMPOTENCY_INPUT_UNSUPPORTED, before its resolver runs, on every try', async () => {
  const { yoga, runs } = uploadServer();
  for (let i = 0; i < 2; i++) {
    const response = await yoga.fetch(uploading('same bytes'));
    const body = (await response.json()) as { errors?: { extensions?: { code?: string } }[] };
    expect(response.status).toBe(400);
    expect(body.errors?.[0]?.extensions?.code).toBe('IDEMPOTENCY_INPUT_UNSUPPORTED');
  }
  expect(runs.upload).toBe(0);
});
