-- The sweep reads expired steps by this index, not by scanning (and locking) every step.
-- CreateIndex
CREATE INDEX `idempotency_steps_expires_at_idx` ON `idempotency_steps`(`expires_at`);
