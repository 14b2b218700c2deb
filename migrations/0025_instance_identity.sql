-- 0025_instance_identity: issue 18, an instance that carries a workload
-- identity (a sandbox of a template with identity, cold or warm) is placed
-- only on a host that advertises instance.identity (bcd's attestation
-- endpoint runs): elsewhere its guest could never attest. Set at create
-- (controller/instances.c), read by every placement (node_place.c), so a
-- re-placement after a host is lost keeps the requirement.
-- Forward-only: never edit a file once released.
ALTER TABLE instances
  ADD COLUMN needs_identity boolean NOT NULL DEFAULT false;

UPDATE instances i SET needs_identity = true
 WHERE i.identity_bootstrap_ref IS NOT NULL
    OR EXISTS (SELECT 1 FROM sandboxes s WHERE s.instance_id = i.id AND s.identity);
