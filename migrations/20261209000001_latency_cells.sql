-- Latency cells (core/src/analysis/latency_cells.rs): a minute of requests as counts, so the
-- latency chart and compare read a day of a fleet as thousands of rows, not millions (issue 31).
-- Written by the findings worker with the diagnoses (server/src/query/cells.rs): a stretch that
-- received data has the minutes of the requests alive in it recomputed.
--
-- A histogram is dense from its first bin: `<metric>_lo` is that bin (16 per octave, bin 0
-- starting at 1 ms) and `<metric>` the requests per bin from there.
CREATE TABLE latency_cells (
    instance_id     integer  NOT NULL,
    model_id        integer  NOT NULL,
    -- Start of the minute the requests arrived in.
    cell_ns         bigint   NOT NULL,
    requests        integer  NOT NULL,
    -- Over the default SLOs (2 s TTFT, 50 ms TPOT); other SLOs are counted from the requests.
    ttft_over       integer  NOT NULL,
    tpot_over       integer  NOT NULL,
    ttft_lo         integer  NOT NULL,
    ttft            integer[] NOT NULL,
    tpot_lo         integer  NOT NULL,
    tpot            integer[] NOT NULL,
    queue_lo        integer  NOT NULL,
    queue           integer[] NOT NULL,
    e2e_lo          integer  NOT NULL,
    e2e             integer[] NOT NULL,
    -- Word sums (core::model::metrics::WordSums) of the requests that have them.
    answers         integer  NOT NULL,
    answer_tokens   float8   NOT NULL,
    word_tokens     float8   NOT NULL,
    probability_sum float8   NOT NULL,
    entropy_tokens  float8   NOT NULL,
    entropy_sum     float8   NOT NULL,
    eos             integer  NOT NULL,
    unlikely        float8   NOT NULL,
    PRIMARY KEY (instance_id, cell_ns, model_id)
) PARTITION BY RANGE (cell_ns);

-- The same minutes summed over the instances of one engine release: what a chart without an
-- instance filter reads (100 instances' day is 144,000 cells; this, 1,440 per release).
CREATE TABLE latency_cells_fleet (
    engine          text     NOT NULL,
    -- '' for none: a key column cannot be null.
    engine_version  text     NOT NULL,
    model_id        integer  NOT NULL,
    cell_ns         bigint   NOT NULL,
    requests        integer  NOT NULL,
    ttft_over       integer  NOT NULL,
    tpot_over       integer  NOT NULL,
    ttft_lo         integer  NOT NULL,
    ttft            integer[] NOT NULL,
    tpot_lo         integer  NOT NULL,
    tpot            integer[] NOT NULL,
    queue_lo        integer  NOT NULL,
    queue           integer[] NOT NULL,
    e2e_lo          integer  NOT NULL,
    e2e             integer[] NOT NULL,
    answers         integer  NOT NULL,
    answer_tokens   float8   NOT NULL,
    word_tokens     float8   NOT NULL,
    probability_sum float8   NOT NULL,
    entropy_tokens  float8   NOT NULL,
    entropy_sum     float8   NOT NULL,
    eos             integer  NOT NULL,
    unlikely        float8   NOT NULL,
    PRIMARY KEY (engine, engine_version, cell_ns, model_id)
) PARTITION BY RANGE (cell_ns);

CREATE INDEX latency_cells_fleet_cell ON latency_cells_fleet (cell_ns);

-- What is already stored gets its cells from the worker: its stretches are due at once.
INSERT INTO diagnosis_queue (instance_id, from_ns, to_ns, enqueued_at)
SELECT instance_id, min(arrival_ns), max(finished_ns), now() - interval '1 day'
FROM requests GROUP BY instance_id;
