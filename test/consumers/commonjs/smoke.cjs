// A CommonJS app: the package is ESM, and `require` loads it through Node's require(esm)
// (Node 20.19 or later).
const { memoryStore, runIdempotent } = require('idempotent-mutations');
const { idempotentFetch } = require('idempotent-mutations/client/fetch');

async function main() {
  const store = memoryStore();
  let runs = 0;
  /** @param {string} key */
  const pay = (key) =>
    runIdempotent({ store, scope: 'alice', key, operation: 'pay', input: { amount: '5.00' } }, async () => {
      runs++;
      return { paid: '5.00', at: new Date() };
    });
  const first = await pay('key-1');
  const retry = await pay('key-1');
  console.log({ first: first.value, retry: retry.value, replayed: retry.replayed, runs });
  // superjson keeps the Date a Date on replay.
  if (runs !== 1 || !retry.replayed || retry.value.at.getTime() !== first.value.at.getTime()) {
    throw new Error('the retry was not replayed');
  }
  if (typeof idempotentFetch !== 'function') throw new Error('a subpath did not load');
  console.log('replayed through require(esm): one run for two calls');
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
