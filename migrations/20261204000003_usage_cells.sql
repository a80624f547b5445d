-- Who used the GPU: each instance's busy time per minute, split across the requests its steps ran
-- by the tokens each computed (core/src/analysis/usage.rs), summed by what a request was served
-- for. Written by the findings worker with the diagnoses (server/src/query/usage.rs): a stretch
-- that received data has the cells it touches recomputed, so late requests move their steps' time
-- from "not stored" to their tenant one settle period later.
CREATE TABLE usage_cells (
    instance_id    integer NOT NULL,
    -- Start of the minute.
    cell_ns        bigint  NOT NULL,
    -- The request's model; 0 for steps whose request has no record (yet).
    model_id       integer NOT NULL,
    -- '' for none (no tenant, the base model): a key column cannot be null.
    tenant         text    NOT NULL,
    lora_adapter   text    NOT NULL,
    -- Estimated from request intervals: the instance reported no steps in this minute.
    estimated      boolean NOT NULL,
    gpu_ns         bigint  NOT NULL,
    prefill_tokens bigint  NOT NULL,
    decode_tokens  bigint  NOT NULL,
    PRIMARY KEY (instance_id, cell_ns, model_id, tenant, lora_adapter)
) PARTITION BY RANGE (cell_ns);

CREATE INDEX usage_cells_cell ON usage_cells (cell_ns);

-- What is already stored gets its usage from the worker: its stretches are due at once.
INSERT INTO diagnosis_queue (instance_id, from_ns, to_ns, enqueued_at)
SELECT instance_id, min(arrival_ns), max(finished_ns), now() - interval '1 day'
FROM requests GROUP BY instance_id;
