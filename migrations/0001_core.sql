-- 0001_core: tenants, identities, tokens, pools, nodes, join tokens,
-- flavors, images, instances, allocations, IP leases, idempotency keys and
-- the events outbox. Forward-only: never edit a file once released.

CREATE TABLE tenants (
  id          text PRIMARY KEY,
  name        text NOT NULL,
  state       text NOT NULL DEFAULT 'active'
              CHECK (state IN ('active', 'suspended', 'deleting', 'deleted')),
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE identities (
  id          text PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants(id),
  kind        text NOT NULL CHECK (kind IN ('user', 'service', 'agent')),
  name        text NOT NULL,
  is_admin    boolean NOT NULL DEFAULT false,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_tokens (
  id          text PRIMARY KEY,
  identity_id text NOT NULL REFERENCES identities(id),
  token_hash  text NOT NULL UNIQUE,
  expires_at  timestamptz,
  revoked_at  timestamptz,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pools (
  id                    text PRIMARY KEY,
  name                  text NOT NULL,
  runtime               text NOT NULL,
  ipam_subnet           cidr,
  ipam_gateway          inet,
  ipam_subnet6          cidr,
  bridge                text NOT NULL,
  recreate_on_host_loss boolean NOT NULL DEFAULT false,
  tenant_ids            text[] NOT NULL DEFAULT '{}',
  created_at            timestamptz NOT NULL DEFAULT now(),
  deleted_at            timestamptz
);
CREATE UNIQUE INDEX pools_name_live ON pools (name) WHERE deleted_at IS NULL;

CREATE TABLE nodes (
  id                 text PRIMARY KEY,
  pool_id            text NOT NULL REFERENCES pools(id),
  hostname           text NOT NULL,
  address            text NOT NULL,
  state              text NOT NULL DEFAULT 'ready'
                     CHECK (state IN ('ready', 'lost', 'retired')),
  labels             jsonb NOT NULL DEFAULT '{}',
  capabilities       text[] NOT NULL DEFAULT '{}',
  cap_vcpus          integer NOT NULL DEFAULT 0,
  cap_memory_mib     bigint NOT NULL DEFAULT 0,
  cap_disk_gib       bigint NOT NULL DEFAULT 0,
  cap_gpus           integer NOT NULL DEFAULT 0,
  spec_generation    bigint NOT NULL DEFAULT 1,
  applied_generation bigint NOT NULL DEFAULT 0,
  cert_serial        text NOT NULL,
  volume_storage     jsonb,
  last_report_at     timestamptz,
  joined_at          timestamptz NOT NULL DEFAULT now(),
  retired_at         timestamptz
);
CREATE INDEX nodes_pool ON nodes (pool_id) WHERE state = 'ready';

CREATE TABLE join_tokens (
  id          text PRIMARY KEY,
  pool_id     text NOT NULL REFERENCES pools(id),
  secret_hash text NOT NULL,
  expires_at  timestamptz NOT NULL,
  used_at     timestamptz,
  node_id     text,
  created_by  text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE flavors (
  id          text PRIMARY KEY,
  name        text NOT NULL,
  vcpus       integer NOT NULL,
  memory_mib  bigint NOT NULL,
  disk_gib    bigint NOT NULL,
  gpus        integer NOT NULL DEFAULT 0,
  huge_pages  text NOT NULL DEFAULT '',
  numa_node   integer NOT NULL DEFAULT -1,
  pin_vcpus   boolean NOT NULL DEFAULT false,
  created_at  timestamptz NOT NULL DEFAULT now(),
  deleted_at  timestamptz
);
CREATE UNIQUE INDEX flavors_name_live ON flavors (name) WHERE deleted_at IS NULL;

CREATE TABLE images (
  id          text PRIMARY KEY,
  name        text NOT NULL,
  format      text NOT NULL CHECK (format IN ('qcow2', 'raw')),
  url         text NOT NULL,
  sha256      text NOT NULL,
  size_bytes  bigint NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  deleted_at  timestamptz
);
CREATE UNIQUE INDEX images_name_live ON images (name) WHERE deleted_at IS NULL;

CREATE TABLE instances (
  id               text PRIMARY KEY,
  tenant_id        text NOT NULL REFERENCES tenants(id),
  pool_id          text NOT NULL REFERENCES pools(id),
  node_id          text REFERENCES nodes(id),
  flavor_id        text NOT NULL REFERENCES flavors(id),
  flavor_name      text NOT NULL,
  image_id         text NOT NULL REFERENCES images(id),
  vcpus            integer NOT NULL,
  memory_mib       bigint NOT NULL,
  disk_gib         bigint NOT NULL,
  gpus             integer NOT NULL DEFAULT 0,
  huge_pages       text NOT NULL DEFAULT '',
  numa_node        integer NOT NULL DEFAULT -1,
  pin_vcpus        boolean NOT NULL DEFAULT false,
  state            text NOT NULL DEFAULT 'provisioning'
                   CHECK (state IN ('provisioning', 'starting', 'running', 'paused', 'stopped',
                                    'error', 'lost', 'deleting', 'deleted')),
  desired_state    text NOT NULL DEFAULT 'running'
                   CHECK (desired_state IN ('running', 'paused', 'stopped', 'deleted')),
  reason           text NOT NULL DEFAULT '',
  network_policy   text NOT NULL DEFAULT 'egress'
                   CHECK (network_policy IN ('egress', 'private', 'none')),
  ssh_from_host_only boolean NOT NULL DEFAULT false,
  ssh_keys         text[] NOT NULL DEFAULT '{}',
  mac              macaddr,
  user_data        text NOT NULL DEFAULT '',
  sandbox_id       text,
  warm_template_id text,
  created_by       text NOT NULL,
  refused_nodes    text[] NOT NULL DEFAULT '{}',
  replacements     integer NOT NULL DEFAULT 0,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now(),
  running_at       timestamptz,
  deleted_at       timestamptz,
  CHECK (sandbox_id IS NULL OR warm_template_id IS NULL)
);
CREATE INDEX instances_node_live ON instances (node_id) WHERE state <> 'deleted';
CREATE INDEX instances_tenant ON instances (tenant_id, id DESC);
CREATE INDEX instances_unplaced ON instances (pool_id) WHERE node_id IS NULL AND state <> 'deleted';

-- The capacity booking: one open allocation per owner.
CREATE TABLE allocations (
  id          bigserial PRIMARY KEY,
  node_id     text NOT NULL REFERENCES nodes(id),
  owner_kind  text NOT NULL CHECK (owner_kind IN ('instance', 'volume')),
  owner_id    text NOT NULL,
  tenant_id   text NOT NULL,
  vcpus       integer NOT NULL,
  memory_mib  bigint NOT NULL,
  disk_gib    bigint NOT NULL,
  gpus        integer NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now(),
  released_at timestamptz
);
CREATE UNIQUE INDEX allocations_owner_open ON allocations (owner_kind, owner_id)
  WHERE released_at IS NULL;
CREATE INDEX allocations_node_open ON allocations (node_id) WHERE released_at IS NULL;

CREATE TABLE ip_leases (
  pool_id     text NOT NULL REFERENCES pools(id),
  address     inet NOT NULL,
  mac         macaddr NOT NULL,
  instance_id text NOT NULL,
  nic_index   integer NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (pool_id, address)
);
CREATE UNIQUE INDEX ip_leases_mac ON ip_leases (pool_id, mac);
CREATE INDEX ip_leases_instance ON ip_leases (instance_id);

CREATE TABLE idempotency_keys (
  tenant_id    text NOT NULL,
  caller_id    text NOT NULL,
  scope        text NOT NULL,
  key          text NOT NULL,
  request_hash text NOT NULL,
  resource_id  text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, caller_id, scope, key)
);

-- The events outbox: every state change publishes here in its own transaction.
CREATE TABLE events (
  id          bigserial PRIMARY KEY,
  type        text NOT NULL,
  subject     text NOT NULL,
  tenant_id   text,
  data        jsonb NOT NULL DEFAULT '{}',
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_tenant ON events (tenant_id, id);
