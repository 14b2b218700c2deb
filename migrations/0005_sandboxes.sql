-- 0005_sandboxes: issue 6 (sandbox templates and sandboxes), and the
-- pending values of the authorization projection (issue 5).

-- One pending value per resource: who staged it (a server-minted hold) and
-- when, by the database clock (a hold older than the caller's takeover age
-- is taken over).
ALTER TABLE authz_resources
  ADD COLUMN pending_hold text,
  ADD COLUMN pending_at   timestamptz;

CREATE TABLE sandbox_templates (
  id                  text PRIMARY KEY,
  tenant_id           text NOT NULL REFERENCES tenants(id),
  name                text NOT NULL,
  pool_id             text NOT NULL REFERENCES pools(id),
  runtime             text NOT NULL,
  flavor_id           text NOT NULL REFERENCES flavors(id),
  image_id            text NOT NULL REFERENCES images(id),
  user_data           text NOT NULL DEFAULT '',
  network             text NOT NULL DEFAULT 'egress'
                      CHECK (network IN ('egress', 'private', 'none')),
  default_ttl_seconds integer NOT NULL,
  max_ttl_seconds     integer NOT NULL,
  warm_min            integer NOT NULL DEFAULT 0,
  warm_max            integer NOT NULL DEFAULT 0,
  version             integer NOT NULL DEFAULT 1,
  instance_version    integer NOT NULL DEFAULT 1,
  created_by          text NOT NULL,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz NOT NULL DEFAULT now(),
  deleted_at          timestamptz,
  CHECK (default_ttl_seconds BETWEEN 1 AND max_ttl_seconds),
  CHECK (warm_min BETWEEN 0 AND warm_max)
);
CREATE UNIQUE INDEX sandbox_templates_name_live ON sandbox_templates (tenant_id, name)
  WHERE deleted_at IS NULL;

-- starting -> ready -> deleting -> deleted; failed when the instance fails
-- (never replaced: it ends with its TTL or a delete).
CREATE TABLE sandboxes (
  id           text PRIMARY KEY,
  tenant_id    text NOT NULL REFERENCES tenants(id),
  template_id  text NOT NULL REFERENCES sandbox_templates(id),
  pool_id      text NOT NULL REFERENCES pools(id),
  instance_id  text NOT NULL REFERENCES instances(id),
  state        text NOT NULL DEFAULT 'starting'
               CHECK (state IN ('starting', 'ready', 'failed', 'deleting', 'deleted')),
  warm         boolean NOT NULL DEFAULT false,
  ttl_seconds  integer NOT NULL,
  expires_at   timestamptz NOT NULL,
  expiring_at  timestamptz,          -- the expires_at that sandbox.expiring was published for
  created_by   text NOT NULL,
  owner_id     text NOT NULL,        -- the user an agent acted for, else created_by
  agent_id     text,                 -- the agent that created it, if any
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  ready_at     timestamptz,
  ready_source text,                 -- report (the instance's own transaction) | reconciler
  expired_at   timestamptz,
  deleting_at  timestamptz,
  deleted_at   timestamptz
);
CREATE INDEX sandboxes_tenant ON sandboxes (tenant_id, id DESC);
CREATE INDEX sandboxes_open_expiry ON sandboxes (expires_at) WHERE deleting_at IS NULL;
CREATE INDEX sandboxes_instance ON sandboxes (instance_id);
CREATE INDEX sandboxes_unsettled ON sandboxes (state) WHERE state IN ('starting', 'deleting');

-- The instance behind a sandbox moves its sandbox in the same transaction
-- as the instance's own change, whichever code path changed it (a host
-- report, node loss, re-placement): running stamps readyAt and publishes
-- sandbox.ready; error fails the sandbox; a recreate after host loss takes
-- it back to starting; a finished deletion wakes the sandbox reconciler,
-- which marks the sandbox deleted right away.
CREATE FUNCTION bc_sandbox_instance_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'running' THEN
    PERFORM pg_advisory_xact_lock(4242001);   -- event ids in commit order (events.c)
    WITH s AS (
      UPDATE sandboxes SET state = 'ready', ready_at = now(), ready_source = 'report',
             updated_at = now()
       WHERE id = NEW.sandbox_id AND state = 'starting'
      RETURNING id, tenant_id, template_id, instance_id, pool_id, warm)
    INSERT INTO events (type, subject, tenant_id, data)
    SELECT 'sandbox.ready', 'sandbox/' || id, tenant_id,
           jsonb_build_object('templateId', template_id, 'instanceId', instance_id,
                              'poolId', pool_id, 'warm', warm)
      FROM s;
  ELSIF NEW.state = 'error' THEN
    PERFORM pg_advisory_xact_lock(4242001);
    WITH s AS (
      UPDATE sandboxes SET state = 'failed', updated_at = now()
       WHERE id = NEW.sandbox_id AND state IN ('starting', 'ready')
      RETURNING id, tenant_id, template_id, instance_id, pool_id)
    INSERT INTO events (type, subject, tenant_id, data)
    SELECT 'sandbox.failed', 'sandbox/' || id, tenant_id,
           jsonb_build_object('templateId', template_id, 'instanceId', instance_id,
                              'poolId', pool_id, 'reason', NEW.reason)
      FROM s;
  ELSIF NEW.state = 'provisioning' AND OLD.state = 'lost' THEN
    UPDATE sandboxes SET state = 'starting', updated_at = now()
     WHERE id = NEW.sandbox_id AND state = 'ready';
  ELSIF NEW.state = 'deleted' THEN
    PERFORM pg_notify('bc_sandboxes', NEW.sandbox_id);
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER instances_sandbox AFTER UPDATE OF state ON instances
  FOR EACH ROW WHEN (NEW.sandbox_id IS NOT NULL AND NEW.state IS DISTINCT FROM OLD.state)
  EXECUTE FUNCTION bc_sandbox_instance_changed();
