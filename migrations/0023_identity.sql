-- 0023_identity: issue 18, workload identity (controller/identity.c,
-- identity_api.c, docs/identity.md).
--
-- A sandbox may carry the task, run and agent it was bound to (given at
-- create), and its lifecycle state: bound (claimed from the warm pool),
-- created-on-demand (a cold create), identity-live, runtime-ready,
-- running, idle (reported by the guest), identity-revoked, deleted.
-- A sandbox with identity on (the template's switch, or the deployment's
-- identity_enabled for a template that leaves it to the deployment) gets
-- an identity epoch at create: a single-use bootstrap value stored as its
-- SHA-256 with a short expiry; a node's Attest makes it live, bound to the
-- instance and its address, with a renewable capability token (stored
-- hashed). One live epoch per address, ever: a partial unique index.
-- Deleting a sandbox revokes its epoch first; the instance is deleted only
-- once identity_cache_seconds (the recognition cache lifetime) have passed
-- since identity_revoked_at, by the leader's pass.
-- Without identity, the sandbox gets an API token (api_tokens) for its
-- creator, scoped to the sandbox and its run, expiring after 24 h, revoked
-- when the sandbox ends.
-- Forward-only: never edit a file once released.
ALTER TABLE sandbox_templates
  ADD COLUMN identity text NOT NULL DEFAULT 'default'
             CHECK (identity IN ('default', 'on', 'off'));

ALTER TABLE sandboxes
  ADD COLUMN task_id     text,
  ADD COLUMN run_id      text,
  ADD COLUMN agent_label text,
  ADD COLUMN bound_at    timestamptz,       -- when a task was bound (the 2-day limit)
  ADD COLUMN identity    boolean NOT NULL DEFAULT false,
  ADD COLUMN identity_revoked_at timestamptz, -- a live epoch revoked: the instance waits
  ADD COLUMN lifecycle   text NOT NULL DEFAULT 'created-on-demand'
             CHECK (lifecycle IN ('bound', 'created-on-demand', 'identity-live',
                                  'runtime-ready', 'running', 'idle',
                                  'identity-revoked', 'deleted'));
CREATE INDEX sandboxes_bound ON sandboxes (bound_at) WHERE bound_at IS NOT NULL
  AND deleting_at IS NULL;
CREATE INDEX sandboxes_identity_revoked ON sandboxes (identity_revoked_at)
  WHERE identity_revoked_at IS NOT NULL AND deleting_at IS NULL;

CREATE TABLE identity_epochs (
  id                   text PRIMARY KEY,          -- ide_...
  sandbox_id           text NOT NULL REFERENCES sandboxes(id),
  tenant_id            text NOT NULL REFERENCES tenants(id),
  instance_id          text NOT NULL REFERENCES instances(id),
  state                text NOT NULL DEFAULT 'pending'
                       CHECK (state IN ('pending', 'live', 'revoked')),
  bootstrap_hash       text NOT NULL UNIQUE,      -- SHA-256 hex of the bootstrap value
  bootstrap_expires_at timestamptz NOT NULL,
  node_id              text,                      -- the attesting node
  address              inet,                      -- bound at attestation
  capability_hash      text UNIQUE,               -- SHA-256 hex of the capability token
  lease_expires_at     timestamptz,
  created_at           timestamptz NOT NULL DEFAULT now(),
  live_at              timestamptz,
  revoked_at           timestamptz,
  revoke_reason        text
);
-- only one live identity per address, whichever replica attests
CREATE UNIQUE INDEX identity_epochs_live_address ON identity_epochs (address)
  WHERE state = 'live';
-- one open (pending or live) epoch per sandbox
CREATE UNIQUE INDEX identity_epochs_open ON identity_epochs (sandbox_id)
  WHERE state <> 'revoked';
CREATE INDEX identity_epochs_lease ON identity_epochs (lease_expires_at) WHERE state = 'live';

-- the 24 h token of a sandbox without identity
ALTER TABLE api_tokens
  ADD COLUMN sandbox_id text,
  ADD COLUMN run_id     text;
CREATE INDEX api_tokens_sandbox ON api_tokens (sandbox_id) WHERE sandbox_id IS NOT NULL;

-- The readiness gate: a sandbox with identity on stays starting until its
-- epoch is live, whichever path (the instance trigger of 0018, the
-- reconciler) tries to make it ready; the attestation makes it ready once
-- the instance runs and its guest is up (identity.c). A row update that is
-- skipped returns nothing, so no sandbox.ready is published for it.
-- Readiness moves the lifecycle to runtime-ready, deletion to deleted.
CREATE FUNCTION bc_sandbox_identity_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'ready' AND OLD.state = 'starting' THEN
    IF NEW.identity AND NOT EXISTS (SELECT 1 FROM identity_epochs e
                                     WHERE e.sandbox_id = NEW.id AND e.state = 'live') THEN
      RETURN NULL;
    END IF;
    IF NEW.lifecycle IN ('bound', 'created-on-demand', 'identity-live') THEN
      NEW.lifecycle := 'runtime-ready';
    END IF;
  ELSIF NEW.state = 'deleted' AND OLD.state <> 'deleted' THEN
    NEW.lifecycle := 'deleted';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER sandboxes_identity_gate BEFORE UPDATE OF state ON sandboxes
  FOR EACH ROW EXECUTE FUNCTION bc_sandbox_identity_gate();
