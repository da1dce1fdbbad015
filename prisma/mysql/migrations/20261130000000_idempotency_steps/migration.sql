-- Durable steps of lease-mode calls (`step(name, fn)`), deleted with their call's record.
-- CreateTable
-- utf8mb4_bin, as idempotency_records: scopes, keys and step names compare byte for byte.
CREATE TABLE `idempotency_steps` (
    `scope` VARCHAR(255) NOT NULL,
    `idempotency_key` VARCHAR(255) NOT NULL,
    `name` VARCHAR(255) NOT NULL,
    `ordinal` INTEGER NOT NULL,
    `fingerprint` CHAR(64) NOT NULL,
    `result` LONGTEXT NOT NULL,
    `result_is_error` BOOLEAN NOT NULL DEFAULT false,
    `created_at` DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    `expires_at` DATETIME(3) NOT NULL,

    PRIMARY KEY (`scope`, `idempotency_key`, `name`)
) DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
