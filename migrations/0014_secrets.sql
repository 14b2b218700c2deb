-- 0014_secrets: issue 14, the secret broker's records (controller/secrets.c).
--
-- secret_refs names every secret the broker keeps; the value itself lives
-- only in sealed_blobs (sealed_ref, through controller/sealed.h), never in a
-- column here. A tenant's own secrets (kind 'user', written by Secrets.Put)
-- have scope 'tenant'; an operator's fleet secrets have scope 'fleet' (in
-- the root tenant). Platform-minted secrets (an instance's sealed user
-- data today; join tokens, host keys and BMC credentials as they move into
-- the sealed store) are recorded with their kind so that a template can
-- never name one. version starts at 1 and every Put of an existing name
-- raises it (a rotation). A row goes with its sealed blob (ON DELETE
-- CASCADE), so deleting an instance's blob drops its record too.
ALTER TABLE sealed_blobs DROP CONSTRAINT IF EXISTS sealed_blobs_owner_kind_check;
ALTER TABLE sealed_blobs ADD CONSTRAINT sealed_blobs_owner_kind_check
  CHECK (owner_kind IN ('instance', 'secret'));

CREATE TABLE secret_refs (
  id          text PRIMARY KEY,                 -- sec_...
  tenant_id   text NOT NULL REFERENCES tenants(id),
  name        text NOT NULL,
  scope       text NOT NULL DEFAULT 'tenant' CHECK (scope IN ('tenant', 'fleet')),
  kind        text NOT NULL DEFAULT 'user'
              CHECK (kind IN ('user', 'sealed-user-data', 'join-token', 'host-key',
                              'bmc-credential')),
  version     bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
  sealed_ref  text NOT NULL REFERENCES sealed_blobs(ref) ON DELETE CASCADE,
  created_by  text NOT NULL DEFAULT '',
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  CHECK (scope = 'tenant' OR kind = 'user')
);
CREATE UNIQUE INDEX secret_refs_name ON secret_refs (tenant_id, scope, name);
CREATE INDEX secret_refs_sealed ON secret_refs (sealed_ref);

-- A template's env: NAME -> the secret:// reference as it was written
-- (resolved by id or name each time an instance is made from it).
ALTER TABLE sandbox_templates ADD COLUMN env jsonb NOT NULL DEFAULT '{}'::jsonb;
-- Whether the template names any secret (env, or user data that is a
-- secret:// reference): the warm pool's staleness checks run only then.
ALTER TABLE sandbox_templates ADD COLUMN names_secrets boolean NOT NULL DEFAULT false;

-- The secret_refs.version of every secret a warm instance was given
-- ({"sec_...": version}), read before the values were resolved; NULL for
-- an instance of a template that names none.
ALTER TABLE instances ADD COLUMN warm_secret_versions jsonb;
