import { createTRPCClient, type TRPCLink } from '@trpc/client';
import type { AnyTRPCRouter } from '@trpc/server';

/** A tRPC client of `links` alone, for tests of the links: its `pay` mutation is whatever they answer. */
export function clientOf({ links }: { links: TRPCLink<AnyTRPCRouter>[] }) {
  return createTRPCClient<AnyTRPCRouter>({ links }) as unknown as {
    pay: { mutate(input: unknown): Promise<unknown> };
  };
}
