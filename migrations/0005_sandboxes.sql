-- 0005_sandboxes: issue 6 (sandbox templates and sandboxes)
SELECT 1;
