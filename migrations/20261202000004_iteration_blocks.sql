-- Engine steps stored many to a row: the steps of one written batch that start in the same
-- second, as columns (format: server/src/store/step_block.rs). A row per step cost Postgres
-- about 2.5 µs whatever its bytes, the heap tuple and its primary-key entry, which at a step per
-- 16 tokens was a third of its ingest work (docs/BENCHMARKS.md, 2026-12-02 (afternoon)).
CREATE TABLE iteration_blocks (
    instance_id        integer NOT NULL,
    -- Every step of the block starts in [second_ns, second_ns + 1 s): readers select blocks by
    -- the seconds their range touches.
    second_ns          bigint  NOT NULL,
    first_start_ns     bigint  NOT NULL,
    first_iteration_id bigint  NOT NULL,
    last_start_ns      bigint  NOT NULL,
    steps              integer NOT NULL,
    block              bytea   NOT NULL,
    PRIMARY KEY (instance_id, second_ns, first_start_ns, first_iteration_id)
) PARTITION BY RANGE (second_ns);

-- Blocks arrive zstd-compressed from the writer (as token blocks do, 20261202000001).
ALTER TABLE iteration_blocks ALTER COLUMN block SET STORAGE EXTERNAL;

-- The stored steps move into blocks of the raw version (1), which SQL can write: one partition
-- per day that has steps, then a block per instance and second, its columns big-endian in
-- (start, iteration id) order.
DO $$
DECLARE
    day bigint;
BEGIN
    FOR day IN SELECT DISTINCT start_ns / 86400000000000 FROM iterations LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS %I PARTITION OF iteration_blocks FOR VALUES FROM (%s) TO (%s)',
            'iteration_blocks_p' || to_char(to_timestamp(day * 86400) AT TIME ZONE 'UTC', 'YYYYMMDD'),
            day * 86400000000000,
            (day + 1) * 86400000000000);
    END LOOP;
END $$;

INSERT INTO iteration_blocks
SELECT instance_id, second_ns, min(start_ns),
       (array_agg(iteration_id ORDER BY start_ns, iteration_id))[1], max(start_ns), count(*)::int,
       '\x01'::bytea || int4send(count(*)::int)
       || string_agg(int8send(iteration_id), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(int8send(start_ns), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(int8send(end_ns), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(int4send(running), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(int4send(waiting), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(float4send(kv_cache_usage), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(int4send(batch_size), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(int4send(prefill_tokens), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(int4send(decode_tokens), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(int4send(length(batch)), ''::bytea ORDER BY start_ns, iteration_id)
       || string_agg(batch, ''::bytea ORDER BY start_ns, iteration_id)
FROM (SELECT *, start_ns - start_ns % 1000000000 AS second_ns FROM iterations) AS s
GROUP BY instance_id, second_ns;

DROP TABLE iterations;
