-- 0026_identity_rebind: issue 16 item 6, a memory restore's own identity
-- (controller/rebind.c, docs/snapshots.md "A restore's own SSH identity").
--
-- A memory restore on a deployment with the sandbox SSH CA and the secret
-- broker gets a sealed bundle (sealed_blobs, owner the instance): its own
-- principals file, with certifyHostKey a fresh host key and certificate,
-- and its own network (MAC, addresses, gateway). identity_rebind_ref names
-- it (InstanceSpec.identity_rebind_ref), rebind_cert_valid_before is the
-- bundle certificate's end. identity_rebound_at is set when the host
-- reports InstanceStatus.identity_rebound_ref equal to the ref: the
-- instance then answers to its own principal and host certificate, and no
-- longer shares its source's identity. Cleared when the instance is
-- recreated elsewhere (its memory holds the source's identity again).
-- Forward-only: never edit a file once released.
ALTER TABLE instances
  ADD COLUMN identity_rebind_ref text,
  ADD COLUMN rebind_cert_valid_before timestamptz,
  ADD COLUMN identity_rebound_at timestamptz;
