-- 0024_identity_host: issue 18, a warm claim's bootstrap value delivered
-- through the host (controller/identity.c, docs/identity.md, "Warm claims").
--
-- A warm claim of a template with identity seals the single-use bootstrap
-- value (sealed_blobs, owner the instance) and names it here; the NodeSpec
-- carries the reference (InstanceSpec.identity_bootstrap_ref), never the
-- value; bcd fetches it with Node.GetBootData bound to the instance and
-- hands it once to the guest's identity client. Cleared, and the blob
-- deleted, when the epoch goes live or the instance is deleted.
-- Forward-only: never edit a file once released.
ALTER TABLE instances
  ADD COLUMN identity_bootstrap_ref text;
