-- Host warnings (controller/node_report.c report_node): what a node's last
-- report wanted its operator to know, e.g. "cert-expiring: ...", one
-- "code: message" entry each; replaced whole by every report.
ALTER TABLE nodes ADD COLUMN warnings text[] NOT NULL DEFAULT '{}';
