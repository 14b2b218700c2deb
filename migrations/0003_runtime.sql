-- 0003_runtime: issue 4 (real VMs). Boot data sealed behind one interface,
-- and the columns of host admission and re-placement.
--
-- sealed_blobs holds opaque bytes by reference (controller/sealed.c): today
-- an instance's rendered user data, kept as given (scheme 'plain'); the
-- secret broker will store AES-256-GCM ciphertext behind the same calls
-- (another scheme). A blob belongs to one owner and goes with it.
CREATE TABLE sealed_blobs (
  ref         text PRIMARY KEY,
  owner_kind  text NOT NULL CHECK (owner_kind IN ('instance')),
  owner_id    text NOT NULL,
  tenant_id   text,
  scheme      text NOT NULL DEFAULT 'plain',
  data        bytea NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sealed_blobs_owner ON sealed_blobs (owner_kind, owner_id);

-- The sealed user data an instance boots with (InstanceSpec.user_data_ref);
-- instances.user_data is no longer written.
ALTER TABLE instances ADD COLUMN user_data_ref text;
-- Since when the instance's host refuses it (ResourcesExhausted, never
-- run); NULL while no refusal stands. refused_nodes and replacements (0001)
-- count the re-placements.
ALTER TABLE instances ADD COLUMN refused_at timestamptz;
CREATE INDEX instances_refused ON instances (refused_at) WHERE refused_at IS NOT NULL;
UPDATE instances SET user_data = '' WHERE user_data <> '';
