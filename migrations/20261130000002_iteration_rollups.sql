-- Iterations summed per instance over fixed cells of time, so that a wide waterfall window reads a
-- few thousand cells instead of every engine step. Written in the same transaction as the
-- iterations they sum (server/src/store/write.rs), only for rows actually inserted, so a resent
-- iteration is never counted twice. A cell is keyed by its start, a multiple of its resolution;
-- every resolution divides a day, so a cell never straddles the daily partitions, which are named
-- and dropped like those of `iterations`.
CREATE TABLE iteration_rollups (
    instance_id    integer NOT NULL,
    resolution_ns  bigint  NOT NULL,
    cell_ns        bigint  NOT NULL,
    steps          integer NOT NULL,
    -- Latest end of a step that starts in the cell.
    end_ns         bigint  NOT NULL,
    prefill_tokens bigint  NOT NULL,
    decode_tokens  bigint  NOT NULL,
    max_batch_size integer NOT NULL,
    PRIMARY KEY (instance_id, resolution_ns, cell_ns)
) PARTITION BY RANGE (cell_ns);

-- Databases that already hold iterations get their rollups now: one partition per day that has
-- iterations, then every resolution summed from the stored rows. The resolutions must match
-- ROLLUP_NS in app/src/analysis/waterfall.rs.
DO $$
DECLARE
    day bigint;
BEGIN
    FOR day IN SELECT DISTINCT start_ns / 86400000000000 FROM iterations LOOP
        EXECUTE format(
            'CREATE TABLE IF NOT EXISTS %I PARTITION OF iteration_rollups FOR VALUES FROM (%s) TO (%s)',
            'iteration_rollups_p' || to_char(to_timestamp(day * 86400) AT TIME ZONE 'UTC', 'YYYYMMDD'),
            day * 86400000000000,
            (day + 1) * 86400000000000);
    END LOOP;
END $$;

INSERT INTO iteration_rollups
SELECT instance_id, r, start_ns / r * r, count(*), max(end_ns), sum(prefill_tokens), sum(decode_tokens),
       max(batch_size)
FROM iterations CROSS JOIN unnest(ARRAY[100000000, 1000000000, 10000000000, 100000000000]::bigint[]) AS r
GROUP BY 1, 2, 3;
