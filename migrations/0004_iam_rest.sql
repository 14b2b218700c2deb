-- 0004_iam_rest: issue 5's remainder: metered usage in hourly windows
-- (spend at the prices of the tenant's offer) and the metering pass's
-- watermark. Forward-only: never edit a file once released.

-- One row per (resource, meter, hourly window), written by the leader's
-- metering pass (controller/meter.c) from the bookings (allocations) and
-- recomputed, never added to, until its window is closed; so a pass that
-- runs twice, or on two replicas, never counts anything twice. Rows
-- without a resource_id (recorded by hand) are left as they are.
ALTER TABLE usage
  ADD COLUMN identity_id  text,
  ADD COLUMN resource_id  text,
  ADD COLUMN window_start timestamptz,
  ADD COLUMN updated_at   timestamptz NOT NULL DEFAULT now(),
  ALTER COLUMN cost_cents TYPE numeric USING cost_cents::numeric;
CREATE UNIQUE INDEX usage_window ON usage (resource_id, meter, window_start)
  WHERE resource_id IS NOT NULL;
CREATE INDEX usage_tenant_window ON usage (tenant_id, window_start);

-- Windows starting before closed_before are final: later passes recompute
-- only the windows from there on. NULL: nothing metered yet.
CREATE TABLE metering (
  id            boolean PRIMARY KEY DEFAULT true CHECK (id),
  closed_before timestamptz,
  last_pass_at  timestamptz
);
INSERT INTO metering DEFAULT VALUES;

-- Quotas are charged from a tenant's open bookings (controller/quota.c).
CREATE INDEX allocations_tenant_open ON allocations (tenant_id) WHERE released_at IS NULL;

-- Event ids in commit order, whatever inserts them: every INSERT into
-- events takes events.c's transaction-scoped lock before its first row
-- draws an id (a statement trigger fires before any row is computed), so
-- the bulk inserts of other code paths keep Events.Watch's resume point
-- ("id > last seen") complete.
CREATE FUNCTION bc_events_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_advisory_xact_lock(4242001);
  RETURN NULL;
END $$;
CREATE TRIGGER events_order BEFORE INSERT ON events
  FOR EACH STATEMENT EXECUTE FUNCTION bc_events_order();
