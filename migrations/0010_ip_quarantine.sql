-- 0010_ip_quarantine: an address released from an instance (deleted,
-- re-placed after its node was lost, refused) is not leased to another
-- instance for ip_quarantine_seconds (controller config). A host cut off
-- from the controller may still run the instance that held it until its
-- fence acts (bcd's node_lost_seconds); two guests must never answer for
-- one address. Every path that deletes a lease is covered by the trigger;
-- lease_try (placement.c) skips addresses released too recently.
-- Forward-only: never edit a file once released.
CREATE TABLE ip_quarantine (
  pool_id     text NOT NULL REFERENCES pools(id) ON DELETE CASCADE,
  address     inet NOT NULL,
  released_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (pool_id, address)
);

CREATE FUNCTION bc_ip_lease_released() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO ip_quarantine (pool_id, address) VALUES (OLD.pool_id, OLD.address)
    ON CONFLICT (pool_id, address) DO UPDATE SET released_at = now();
  RETURN OLD;
END $$;

CREATE TRIGGER ip_leases_released AFTER DELETE ON ip_leases
  FOR EACH ROW EXECUTE FUNCTION bc_ip_lease_released();
