-- 0003_runtime: issue 4 (libvirt runtime, boot data, host admission)
SELECT 1;
