-- 0021_snapshot_store: issue 16, the snapshot store's secret access key
-- (controller/snapstore.c, docs/snapshots.md). The key is kept like every
-- other platform-minted secret: sealed in sealed_blobs (owner_kind
-- 'secret'), recorded in secret_refs in the root tenant with a kind of its
-- own, so that no template can name it and Secrets.List never shows it.
-- `bc-controller snapshot-store set-secret` writes it (a rotation raises
-- version and drops the old blob in the same transaction).
-- Forward-only: never edit a file once released.
ALTER TABLE secret_refs DROP CONSTRAINT IF EXISTS secret_refs_kind_check;
ALTER TABLE secret_refs ADD CONSTRAINT secret_refs_kind_check
  CHECK (kind IN ('user', 'sealed-user-data', 'join-token', 'host-key', 'bmc-credential',
                  'snapshot-store-key'));
