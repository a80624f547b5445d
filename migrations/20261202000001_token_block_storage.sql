-- Token blocks arrive zstd-compressed from the writer; Postgres trying pglz on each one before
-- moving it out of line cost about 2 % of its ingest CPU for nothing (docs/BENCHMARKS.md,
-- 2026-12-01). EXTERNAL stores them out of line without that attempt; every partition, present
-- and future, follows the parent.
ALTER TABLE requests ALTER COLUMN tokens SET STORAGE EXTERNAL;
