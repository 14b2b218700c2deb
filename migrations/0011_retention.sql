-- Retention (controller/idem.c idem_purge): idempotency keys are purged by
-- age every 30 s in batches; without this index each pass scans the table.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
