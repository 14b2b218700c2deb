-- 0018_guest_ready: issue 20 items 2-3. A host reports, per instance, when
-- it accepted this boot's "guest is up" signal (InstanceStatus.
-- guest_ready_at, unix ms; 0: not up yet); the report's instance UPDATE
-- records it here (node_report.c), NULL when the host says 0. Placing or
-- recreating an instance clears it (node_place.c, node_replace.c).
-- A sandbox is ready when its instance runs AND its guest reported up; a
-- warm instance is claimable when paused AND its guest reported up
-- (controller/warm.h), and one that never reports within
-- warm_boot_timeout_seconds is drained (guest-never-ready).
-- Forward-only: never edit a file once released.
ALTER TABLE instances ADD COLUMN guest_ready_at timestamptz;

-- The readiness trigger of 0007, ready only once the guest is up: it now
-- also fires when guest_ready_at changes (a report that sees the guest up
-- while the instance already runs).
CREATE OR REPLACE FUNCTION bc_sandbox_instance_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'running' AND NEW.guest_ready_at IS NOT NULL THEN
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
  ELSIF NEW.state IS NOT DISTINCT FROM OLD.state THEN
    NULL;  -- only guest_ready_at changed: nothing else to do
  ELSIF NEW.state = 'error' THEN
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

DROP TRIGGER instances_sandbox ON instances;
CREATE TRIGGER instances_sandbox AFTER UPDATE OF state, guest_ready_at ON instances
  FOR EACH ROW WHEN (NEW.sandbox_id IS NOT NULL AND (NEW.state IS DISTINCT FROM OLD.state
                     OR NEW.guest_ready_at IS DISTINCT FROM OLD.guest_ready_at))
  EXECUTE FUNCTION bc_sandbox_instance_changed();

