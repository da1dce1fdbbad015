-- CreateTable
-- utf8mb4_bin: idempotency keys and scopes compare byte for byte ("abc" and "ABC" are two keys).
CREATE TABLE `idempotency_records` (
    `scope` VARCHAR(255) NOT NULL,
    `idempotency_key` VARCHAR(255) NOT NULL,
    `operation` VARCHAR(255) NOT NULL,
    `fingerprint` CHAR(64) NOT NULL,
    `status` VARCHAR(16) NOT NULL,
    `result` LONGTEXT NULL,
    `result_is_error` BOOLEAN NOT NULL DEFAULT false,
    `owner_token` CHAR(64) NULL,
    `locked_until` DATETIME(3) NULL,
    `created_at` DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    `completed_at` DATETIME(3) NULL,
    `expires_at` DATETIME(3) NOT NULL,

    INDEX `idempotency_records_expires_at_idx`(`expires_at`),
    PRIMARY KEY (`scope`, `idempotency_key`)
) DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;
