-- 0009_node_identity: what the controller keeps of a node's identity and
-- its operator-set ceiling (issue 12).
--   cert_pem          the certificate issued last (Join, RenewCertificate):
--                     a Join retried with the same token and key gets it again
--   cert_serial_next  a renewed certificate not yet presented: the node's
--                     calls with it promote it to cert_serial, and the old
--                     serial is refused from then on
--   cert_not_after    when the current certificate expires
--   max_*             the operator's capacity ceiling (the value at join,
--                     `bcctl node set-capacity`): reports never raise the
--                     capacity above it
-- Forward-only: never edit a file once released.
ALTER TABLE nodes ADD COLUMN cert_pem text;
ALTER TABLE nodes ADD COLUMN cert_serial_next text;
ALTER TABLE nodes ADD COLUMN cert_not_after timestamptz;
ALTER TABLE nodes ADD COLUMN max_vcpus integer;
ALTER TABLE nodes ADD COLUMN max_memory_mib bigint;
ALTER TABLE nodes ADD COLUMN max_disk_gib bigint;
ALTER TABLE nodes ADD COLUMN max_gpus integer;
UPDATE nodes SET max_vcpus = cap_vcpus, max_memory_mib = cap_memory_mib,
  max_disk_gib = cap_disk_gib, max_gpus = cap_gpus;
ALTER TABLE nodes ALTER COLUMN max_vcpus SET NOT NULL;
ALTER TABLE nodes ALTER COLUMN max_memory_mib SET NOT NULL;
ALTER TABLE nodes ALTER COLUMN max_disk_gib SET NOT NULL;
ALTER TABLE nodes ALTER COLUMN max_gpus SET NOT NULL;
