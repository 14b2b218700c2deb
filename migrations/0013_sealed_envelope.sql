-- 0013_sealed_envelope: issue 14, encryption at rest. Sealed blobs are
-- stored as envelopes (scheme 'envelope-v1', controller/sealed.c and
-- common/envelope.c): AES-256-GCM under a data key of their own, wrapped by
-- the key-encryption key kek_id names (a file outside the database, made by
-- `bc-controller init`). Rows written before stay 'plain' until
-- `bc-controller secrets migrate` seals them; serve refuses to start while
-- any remains. kek_id lets `secrets rotate-kek` find what it must rewrap.
ALTER TABLE sealed_blobs ADD COLUMN kek_id text;
ALTER TABLE sealed_blobs ALTER COLUMN scheme DROP DEFAULT;
ALTER TABLE sealed_blobs ADD CONSTRAINT sealed_blobs_scheme
  CHECK ((scheme = 'plain' AND kek_id IS NULL) OR (scheme = 'envelope-v1' AND kek_id IS NOT NULL));
CREATE INDEX sealed_blobs_kek ON sealed_blobs (kek_id);
