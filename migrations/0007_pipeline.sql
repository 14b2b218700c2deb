-- 0007_pipeline: writers no longer queue behind one another on a node's row
-- or on the events lock (issue 7: warm claims at 32 concurrent clients).
-- Forward-only: never edit a file once released.
--
-- 1. A change to what a node runs no longer bumps nodes.spec_generation in
--    the writer's transaction (every writer on one node waited for the
--    previous one's commit on that row). The writer inserts a row here
--    (insert-only: writers never wait for each other) and notifies
--    bc_node_spec; the node's spec stream takes every row its snapshot
--    sees, bumps the generation once and builds the spec in that same
--    snapshot (nodespec.c), so a spec carries every change whose row it
--    took, and a change committed later leaves its row for the next build.
CREATE TABLE node_spec_changes (
  id       bigserial PRIMARY KEY,
  node_id  text NOT NULL
);
CREATE INDEX node_spec_changes_node ON node_spec_changes (node_id, id);

-- 2. Event order is given after commit, by one sequencer at a time
--    (bc_events_sequence, called by every replica when bc_events is
--    notified), not by a lock every writer held from its first event to its
--    commit. Events.List and Events.Watch read by seq: once a seq is
--    visible, every smaller one is too, so "seq > last seen" stays a
--    complete resume point; an event is visible to them once sequenced.
ALTER TABLE events ADD COLUMN seq bigint;
UPDATE events SET seq = id;  -- the lock gave these ids in commit order
CREATE UNIQUE INDEX events_seq ON events (seq);
CREATE INDEX events_tenant_seq ON events (tenant_id, seq);
CREATE INDEX events_unsequenced ON events (id) WHERE seq IS NULL;
DROP INDEX events_tenant;

DROP TRIGGER events_order ON events;
DROP FUNCTION bc_events_order();

-- One notification per transaction, not one per event: the payload (never
-- read) is constant, and PostgreSQL delivers identical notifications of
-- one transaction once. Still a row trigger, so an INSERT of no rows (a
-- report that changed nothing) notifies nobody.
CREATE OR REPLACE FUNCTION bc_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('bc_events', '');
  RETURN NEW;
END $$;

-- Give every committed, unsequenced event the next seq, in id order (the
-- order its transaction inserted them). Two transactions that both
-- committed before one pass come out in the order they drew their ids,
-- which may differ from their commit order; the events of one object keep
-- their order, since every path changes the object's row (and waits for
-- its lock) before it inserts the event. The lock makes sequencers run one
-- at a time; READ COMMITTED takes the UPDATE's snapshot after the lock is
-- held, so it sees every sequencer before it and every event committed
-- by then. Returns how many events it sequenced.
CREATE FUNCTION bc_events_sequence() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  base bigint;
  n bigint;
BEGIN
  PERFORM pg_advisory_xact_lock(4242001);
  SELECT coalesce(max(seq), 0) INTO base FROM events;
  WITH o AS (SELECT id, row_number() OVER (ORDER BY id) AS rn
               FROM events WHERE seq IS NULL),
       u AS (UPDATE events e SET seq = base + o.rn FROM o WHERE e.id = o.id RETURNING 1)
  SELECT count(*) INTO n FROM u;
  RETURN n;
END $$;

-- The readiness trigger of 0005 without the lock.
CREATE OR REPLACE FUNCTION bc_sandbox_instance_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.state = 'running' THEN
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

-- The boot-then-pause trigger of 0006, with a change row instead of a bump.
CREATE OR REPLACE FUNCTION bc_warm_instance_ran() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.desired_state := 'paused';
  IF NEW.node_id IS NOT NULL THEN
    INSERT INTO node_spec_changes (node_id) VALUES (NEW.node_id);
    PERFORM pg_notify('bc_node_spec', NEW.node_id);
  END IF;
  RETURN NEW;
END $$;
