-- Durable steps of lease-mode calls (`step(name, fn)`), deleted with their call's record.
-- CreateTable
CREATE TABLE "idempotency_steps" (
    "scope" TEXT NOT NULL,
    "idempotency_key" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "ordinal" INTEGER NOT NULL,
    "fingerprint" TEXT NOT NULL,
    "result" TEXT NOT NULL,
    "result_is_error" BOOLEAN NOT NULL DEFAULT false,
    "created_at" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "expires_at" DATETIME NOT NULL,

    PRIMARY KEY ("scope", "idempotency_key", "name")
);
