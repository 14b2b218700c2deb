-- 0008_spec_delta: a change row may name the one instance it changed, so
-- the node's spec stream re-reads only the instances named since its last
-- build instead of every instance of the node (nodespec.c; a host holds
-- hundreds). A row without one (NULL: the node's or anything else) makes
-- the next build whole, as every build was before.
-- Forward-only: never edit a file once released.
ALTER TABLE node_spec_changes ADD COLUMN instance_id text;

-- The boot-then-pause trigger of 0007: it changes only its own instance.
CREATE OR REPLACE FUNCTION bc_warm_instance_ran() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.desired_state := 'paused';
  IF NEW.node_id IS NOT NULL THEN
    INSERT INTO node_spec_changes (node_id, instance_id) VALUES (NEW.node_id, NEW.id);
    PERFORM pg_notify('bc_node_spec', NEW.node_id);
  END IF;
  RETURN NEW;
END $$;
