-- 0015: placeholder on the guesttrust branch only, so that 0016 applies
-- (migrate.c refuses gaps). Tunnelnode's 0015 replaces it at merge: drop
-- this file then.
SELECT 1;
