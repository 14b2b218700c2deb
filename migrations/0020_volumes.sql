-- 0019_volumes: issue 17, sandbox volumes (controller/volumes.c,
-- docs/volumes.md). A volume is a persistent sparse disk on one host of a
-- pool, booked there in an allocation owned by it (owner_kind 'volume',
-- allowed since 0001) and charged to the tenant's diskGiB quota from that
-- booking (quota.c). Its id derives from tenant, caller and idempotency
-- key, so a create's retry names the same row.
-- Forward-only: never edit a file once released.
CREATE TABLE volumes (
  id          text PRIMARY KEY,
  tenant_id   text NOT NULL REFERENCES tenants(id),
  pool_id     text NOT NULL REFERENCES pools(id),
  node_id     text NOT NULL REFERENCES nodes(id),
  name        text NOT NULL,
  size_gib    bigint NOT NULL CHECK (size_gib BETWEEN 1 AND 16384),
  serial      text NOT NULL,
  state       text NOT NULL DEFAULT 'ready'
              CHECK (state IN ('ready', 'deleting', 'deleted')),
  created_by  text NOT NULL,
  owner_id    text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  deleting_at timestamptz,
  -- the host's spec generation that no longer lists the volume, set by
  -- the spec stream's take of the deletion's change (node_spec.c): its
  -- booking is released once the host applied it (or is gone)
  deleting_generation bigint,
  deleted_at  timestamptz
);
-- the name is unique among the tenant's volumes that are not deleted
CREATE UNIQUE INDEX volumes_name_live ON volumes (tenant_id, name) WHERE state <> 'deleted';
CREATE INDEX volumes_tenant ON volumes (tenant_id, id DESC);
CREATE INDEX volumes_node_live ON volumes (node_id) WHERE state <> 'deleted';

-- Each host's last reported volume store (StatusReport.volume_storage),
-- written by node_report.c when a value moved by at least 1 GiB, the
-- committed or outstanding bytes changed, or the stored row is 5 minutes
-- old. A host without a row takes no volume.
CREATE TABLE host_volume_storage (
  node_id           text PRIMARY KEY REFERENCES nodes(id),
  available_bytes   bigint NOT NULL,
  reserved_bytes    bigint NOT NULL,
  outstanding_bytes bigint NOT NULL,
  committed_bytes   bigint NOT NULL,
  reported_at       timestamptz NOT NULL DEFAULT now()
);

-- What attaches a volume (attach, issue 17 item 4, writes these): the
-- volumes a template names, in order, and those an instance attaches.
-- Delete is refused while a live template or a live instance has a row.
CREATE TABLE template_volumes (
  template_id text NOT NULL REFERENCES sandbox_templates(id),
  volume_id   text NOT NULL REFERENCES volumes(id),
  position    integer NOT NULL,
  mount_path  text NOT NULL,
  read_only   boolean NOT NULL DEFAULT false,
  PRIMARY KEY (template_id, volume_id)
);
CREATE INDEX template_volumes_volume ON template_volumes (volume_id);
CREATE TABLE instance_volumes (
  instance_id text NOT NULL REFERENCES instances(id),
  volume_id   text NOT NULL REFERENCES volumes(id),
  read_only   boolean NOT NULL DEFAULT false,
  PRIMARY KEY (instance_id, volume_id)
);
CREATE INDEX instance_volumes_volume ON instance_volumes (volume_id);
