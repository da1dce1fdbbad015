// Starts the orders server: embedded SQLite by default, DATABASE_URL for PostgreSQL or MySQL.
//
//   npx tsx --conditions=source examples/yoga-orders/server.ts      (PORT, default 4000)
import { createServer } from 'node:http';
import { openDatabase } from '../shared/database.js';
import { createOrderServer } from './app.js';

const prisma = await openDatabase();
const port = Number(process.env.PORT ?? 4000);
createServer(createOrderServer(prisma)).listen(port, '127.0.0.1');
console.log(`GraphQL Yoga orders on http://127.0.0.1:${port}/graphql (send X-User-Id)`);
