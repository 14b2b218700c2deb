-- Agent.Tunnel (controller/node_tunnel.c): the host:port where the
-- controller dials a node's bcd for a tunnel into one of its instances,
-- as the node said at join and in its reports ('' = none).
ALTER TABLE nodes ADD COLUMN tunnel_address text NOT NULL DEFAULT '';
