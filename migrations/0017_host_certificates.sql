-- 0017_host_certificates: issue 15 item 3 (certifyHostKey). A sandbox or
-- warm instance created while the deployment has a sandbox SSH CA and
-- sandbox_certify_host_key on gets a host key and its host certificate
-- (principal: the instance id) in its sealed user data; host_certified
-- records that it did, and host_cert_valid_before (added by 0006) until
-- when the certificate holds. Nothing renews one: a claim, an expiry and
-- an extend are bounded by it (controller/warm.h, sandboxes.c).
-- Forward-only: never edit a file once released.
ALTER TABLE instances ADD COLUMN host_certified boolean NOT NULL DEFAULT false;
