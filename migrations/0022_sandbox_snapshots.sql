-- 0022_sandbox_snapshots: issue 16 items 3, 5 and 7, sandbox snapshots
-- (controller/snapshots.c, docs/snapshots.md). A snapshot is a sandbox's
-- disk and (include_memory) memory, captured by its host's runtime through
-- the instance.snapshot command (0019) and uploaded to the snapshot store
-- (0021) under object_key. It belongs to its sandbox's owner (owner_id)
-- and, when an agent created the sandbox, to that agent's lineage
-- (agent_id): only they restore it. state is the upload's: pending until
-- the command settles, then ready or failed. deleted_at hides it (deleted
-- with its sandbox unless keep, by SandboxSnapshots.Delete, a tenant
-- teardown or an owner's departure); purged_at is set once the store's
-- DELETE removed its object, which waits until the upload settled and no
-- live instance restores from it.
-- Forward-only: never edit a file once released.
CREATE TABLE sandbox_snapshots (
  id              text PRIMARY KEY,                 -- snap_...
  tenant_id       text NOT NULL REFERENCES tenants(id),
  sandbox_id      text NOT NULL REFERENCES sandboxes(id),
  template_id     text NOT NULL,
  instance_id     text NOT NULL,                    -- the instance captured
  -- whose sshd identity the memory holds: the captured instance's own, or
  -- for a memory restore the principal it inherited
  principal_instance_id text NOT NULL,
  runtime         text NOT NULL,
  include_memory  boolean NOT NULL,
  keep            boolean NOT NULL,
  owner_id        text NOT NULL,
  agent_id        text,
  created_by      text NOT NULL,
  idempotency_key text,                             -- the id derives from it
  command_id      text,
  object_key      text NOT NULL,
  state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'ready', 'failed')),
  sha256          text NOT NULL DEFAULT '',
  size_bytes      bigint NOT NULL DEFAULT 0,
  cpu_model       text NOT NULL DEFAULT '',
  paused_ms       bigint,
  reason          text NOT NULL DEFAULT '',
  created_at      timestamptz NOT NULL DEFAULT now(),
  ready_at        timestamptz,
  settled_at      timestamptz,
  deleted_at      timestamptz,
  purged_at       timestamptz,
  CHECK ((state = 'pending') = (settled_at IS NULL)),
  CHECK (purged_at IS NULL OR deleted_at IS NOT NULL)
);
CREATE INDEX sandbox_snapshots_tenant ON sandbox_snapshots (tenant_id, id DESC);
CREATE INDEX sandbox_snapshots_sandbox ON sandbox_snapshots (sandbox_id);
CREATE INDEX sandbox_snapshots_command ON sandbox_snapshots (command_id) WHERE state = 'pending';
CREATE INDEX sandbox_snapshots_unpurged ON sandbox_snapshots (deleted_at)
  WHERE deleted_at IS NOT NULL AND purged_at IS NULL;

-- The snapshot an instance restores from (Sandboxes.Create fromSnapshot):
-- its spec carries restore_from, and the snapshot's object is not purged
-- while the instance lives.
ALTER TABLE instances ADD COLUMN restore_snapshot_id text REFERENCES sandbox_snapshots(id);
CREATE INDEX instances_restore_snapshot ON instances (restore_snapshot_id)
  WHERE restore_snapshot_id IS NOT NULL;
