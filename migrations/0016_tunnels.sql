-- 0016_tunnels: issue 15, Sandboxes.Exec and the tunnel gateway
-- (controller/sandbox_exec.c, controller/tunnels.c).
--
-- One row per exec grant. The ticket itself is never stored: ticket_hash is
-- its SHA-256, and the row's ticket is spent (opened_at set) by the first
-- Tunnels.Connect that presents it before ticket_expires_at, on whichever
-- replica. token_hash names the caller's API token (its SHA-256, as in
-- api_tokens) so that the replica holding the open tunnel can re-check the
-- caller every 60 seconds: a revoked token, a withdrawn policy, a deleted or
-- expired sandbox closes it. close_requested_at is Tunnels.Close's request,
-- which the holding replica carries out within seconds.
CREATE TABLE tunnels (
  id                  text PRIMARY KEY,                 -- tun_...
  tenant_id           text NOT NULL REFERENCES tenants(id),
  sandbox_id          text NOT NULL REFERENCES sandboxes(id),
  instance_id         text NOT NULL REFERENCES instances(id),
  node_id             text NOT NULL,
  identity_id         text NOT NULL,
  token_hash          text NOT NULL,
  grant_id            text NOT NULL,                    -- ssh_... (the key id's last part)
  serial              numeric(20, 0) NOT NULL,
  cert_valid_before   timestamptz NOT NULL,
  ticket_hash         text NOT NULL UNIQUE,
  ticket_expires_at   timestamptz NOT NULL,
  created_at          timestamptz NOT NULL DEFAULT now(),
  opened_at           timestamptz,
  replica             text,
  close_requested_at  timestamptz,
  closed_at           timestamptz,
  close_reason        text
);
CREATE INDEX tunnels_sandbox ON tunnels (sandbox_id, created_at);
CREATE INDEX tunnels_open ON tunnels (opened_at) WHERE closed_at IS NULL;
