// Starts the payments server: embedded SQLite by default, DATABASE_URL for PostgreSQL or MySQL.
//
//   npx tsx --conditions=source examples/trpc-payments/server.ts      (PORT, default 3000)
import { openDatabase } from '../shared/database.js';
import { createServer } from './app.js';

const prisma = await openDatabase();
const port = Number(process.env.PORT ?? 3000);
createServer(prisma).listen(port, '127.0.0.1');
console.log(`tRPC payments on http://127.0.0.1:${port} (send X-User-Id and an Idempotency-Key)`);
