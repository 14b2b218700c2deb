-- 0004_iam_rest: issue 5 remainder (pending values, metering, teardown)
SELECT 1;
