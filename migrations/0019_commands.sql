-- 0019_commands: issue 16 item 1, host commands. A command is one thing a
-- node's bcd does once on the controller's behalf (instance.snapshot first).
-- cmd_enqueue (controller/node_commands.c) inserts it in the caller's
-- transaction and wakes the node's WatchSpec stream, which sends the queued
-- ones in seq order after the spec they need (delivered); a stream that
-- opens again re-sends the delivered ones not settled (bcd dedups by id).
-- A report's CommandResult settles it (succeeded|failed, only from its own
-- node) and NOTIFYs bc_command_settled with its id; the reconciler fails
-- those past their deadline with error 'timeout'. Settled rows are purged
-- after command_retention_seconds.
-- Forward-only: never edit a file once released.
CREATE TABLE commands (
  id            text PRIMARY KEY,
  seq           bigserial NOT NULL UNIQUE,      -- delivery order on a node
  node_id       text NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  instance_id   text,                           -- NULL: a command of the node
  kind          text NOT NULL,
  lane          text NOT NULL DEFAULT 'control' CHECK (lane IN ('control', 'bulk')),
  retry_safe    boolean NOT NULL DEFAULT false,
  key           text UNIQUE,                    -- idempotent enqueue (NULL: none)
  args          jsonb NOT NULL DEFAULT '{}',
  state         text NOT NULL DEFAULT 'queued'
                CHECK (state IN ('queued', 'delivered', 'running', 'succeeded', 'failed')),
  error         text NOT NULL DEFAULT '',
  result        jsonb,
  deadline      timestamptz NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  delivered_at  timestamptz,
  settled_at    timestamptz,
  CHECK ((state IN ('succeeded', 'failed')) = (settled_at IS NOT NULL))
);
-- the stream's read: a node's unsettled commands in order
CREATE INDEX commands_node_open ON commands (node_id, seq)
  WHERE state IN ('queued', 'delivered', 'running');
-- the sweeper's and the purge's reads
CREATE INDEX commands_open_deadline ON commands (deadline)
  WHERE state IN ('queued', 'delivered', 'running');
CREATE INDEX commands_settled_at ON commands (settled_at) WHERE settled_at IS NOT NULL;
