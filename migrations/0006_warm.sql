-- 0006_warm: issue 7 (warm pools). A warm instance is an instance of a
-- template's pool (warm_template_id set) made from one instance_version of
-- the template; a claim hands it to a sandbox (sandbox_id set,
-- warm_template_id cleared, claimed_at stamped). Forward-only: never edit
-- a file once released.

ALTER TABLE instances
  ADD COLUMN warm_instance_version  integer,      -- the template's instance_version it was made from
  ADD COLUMN claimed_at             timestamptz,  -- when a sandbox claimed it (metering splits here)
  ADD COLUMN host_cert_valid_before timestamptz;  -- until when its host certificate holds (NULL: none)

-- Claims take the oldest claimable instance of a template.
CREATE INDEX instances_warm ON instances (warm_template_id, created_at, id)
  WHERE warm_template_id IS NOT NULL;

-- Boot, then pause: a warm instance that reached running while desired
-- running is desired paused from then on, in the same transaction as the
-- host's report, whichever code path recorded it; its node's spec is
-- bumped so the host hears of it at once.
CREATE FUNCTION bc_warm_instance_ran() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.desired_state := 'paused';
  IF NEW.node_id IS NOT NULL THEN
    UPDATE nodes SET spec_generation = spec_generation + 1 WHERE id = NEW.node_id;
    PERFORM pg_notify('bc_node_spec', NEW.node_id);
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER instances_warm_pause BEFORE UPDATE OF state ON instances
  FOR EACH ROW WHEN (NEW.warm_template_id IS NOT NULL AND NEW.state = 'running'
                     AND NEW.desired_state = 'running')
  EXECUTE FUNCTION bc_warm_instance_ran();
