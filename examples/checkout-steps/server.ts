// Starts the checkout server: embedded SQLite by default, DATABASE_URL for PostgreSQL or MySQL.
// CRASH_AFTER=<step> makes it hang after that step (for a demo to kill it); forked, it reports its
// port and the crash to its parent.
//
//   npx tsx --conditions=source examples/checkout-steps/server.ts      (PORT, default 3000; LEASE_MS)
import type { AddressInfo } from 'node:net';
import { openDatabase } from '../shared/database.js';
import { createCheckoutServer, tableGateway } from './app.js';

const prisma = await openDatabase();
const crashAfter = process.env.CRASH_AFTER;
const server = createCheckoutServer(prisma, {
  gateway: tableGateway(prisma),
  leaseMs: process.env.LEASE_MS ? Number(process.env.LEASE_MS) : undefined,
  afterStep: async (name) => {
    if (name !== crashAfter) return;
    process.send?.({ crashedAfter: name });
    await new Promise(() => undefined); // hangs here until the process is killed
  },
});
server.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  const { port } = server.address() as AddressInfo;
  if (process.send) process.send({ port });
  else console.log(`checkout on http://127.0.0.1:${port} (send X-User-Id and an Idempotency-Key)`);
});
