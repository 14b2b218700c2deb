-- 0013 belongs to the "seal" branch of issue 14 (encryption at rest). This
-- placeholder keeps the migration numbers gapless on the "secrets" branch
-- alone; the merge drops it for seal's own 0013.
SELECT 1;
