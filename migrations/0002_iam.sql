-- 0002_iam: identities' states, delegations, policies and their attachments,
-- the authorization projection (authz_resources), quotas and offers
-- (budgets). Forward-only: never edit a file once released.

ALTER TABLE tenants ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();

ALTER TABLE identities
  ADD COLUMN state text NOT NULL DEFAULT 'active'
    CHECK (state IN ('active', 'suspended', 'deleted')),
  ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX identities_tenant ON identities (tenant_id, id);

ALTER TABLE api_tokens ADD COLUMN name text NOT NULL DEFAULT '';
CREATE INDEX api_tokens_identity ON api_tokens (identity_id);

-- An agent identity acting for a user of its tenant. At most one live
-- delegation per agent; a revoked one cuts the agent off at once.
CREATE TABLE delegations (
  id          text PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants(id),
  agent_id    text NOT NULL REFERENCES identities(id),
  user_id     text NOT NULL REFERENCES identities(id),
  created_at  timestamptz NOT NULL DEFAULT now(),
  revoked_at  timestamptz
);
CREATE UNIQUE INDEX delegations_agent_live ON delegations (agent_id) WHERE revoked_at IS NULL;

-- Policies: JSON documents of statements (see docs/iam.md), validated by
-- controller/policy.c before they are stored.
CREATE TABLE policies (
  id          text PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants(id),
  name        text NOT NULL,
  document    text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  deleted_at  timestamptz
);
CREATE UNIQUE INDEX policies_name_live ON policies (tenant_id, name) WHERE deleted_at IS NULL;

-- A policy applies to one identity, or to every identity of a tenant.
CREATE TABLE policy_attachments (
  policy_id   text NOT NULL REFERENCES policies(id),
  target_kind text NOT NULL CHECK (target_kind IN ('identity', 'tenant')),
  target_id   text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (policy_id, target_kind, target_id)
);
CREATE INDEX policy_attachments_target ON policy_attachments (target_kind, target_id);

-- The authorization projection: one row per resource a decision can name,
-- written in the same transaction as the resource. A draft exists only
-- while its create is being decided; pending holds the one staged change
-- (extend, resize) a decision sees.
CREATE TABLE authz_resources (
  type        text NOT NULL,
  id          text NOT NULL,
  tenant_id   text NOT NULL REFERENCES tenants(id),
  parent      text NOT NULL DEFAULT '',
  owner_id    text NOT NULL DEFAULT '',
  agent_id    text,
  attrs       jsonb NOT NULL DEFAULT '{}',
  pending     jsonb,
  draft       boolean NOT NULL DEFAULT false,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (type, id)
);
CREATE INDEX authz_resources_tenant ON authz_resources (tenant_id, type);

-- Per-tenant limits; NULL is unlimited. Charged from open allocations.
CREATE TABLE quotas (
  tenant_id   text PRIMARY KEY REFERENCES tenants(id),
  vcpus       integer,
  memory_gib  bigint,
  disk_gib    bigint,
  gpus        integer,
  instances   integer,
  updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A tenant's offer: prices and a spend limit (budget).
CREATE TABLE offers (
  tenant_id          text PRIMARY KEY REFERENCES tenants(id),
  spend_limit_cents  bigint,
  on_budget_exceeded text NOT NULL DEFAULT 'none'
                     CHECK (on_budget_exceeded IN ('none', 'stop-new', 'drain')),
  prices             jsonb NOT NULL DEFAULT '{}',
  updated_at         timestamptz NOT NULL DEFAULT now()
);

-- Metered usage: spend per tenant, in cents, by meter.
CREATE TABLE usage (
  id          bigserial PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants(id),
  meter       text NOT NULL,
  quantity    double precision NOT NULL,
  cost_cents  bigint NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX usage_tenant ON usage (tenant_id);

ALTER TABLE pools ADD COLUMN budget_check text NOT NULL DEFAULT 'none'
  CHECK (budget_check IN ('none', 'meter'));

-- Events.Watch wakes on NOTIFY bc_events '<id>'.
CREATE FUNCTION bc_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('bc_events', NEW.id::text);
  RETURN NEW;
END $$;
CREATE TRIGGER events_notify AFTER INSERT ON events
  FOR EACH ROW EXECUTE FUNCTION bc_events_notify();
