-- Findings stored as data: each request's diagnosis, computed once its neighbourhood has settled
-- (server/src/findings.rs), so that lists, filters and counts by cause are queries.

-- One row per request that is not healthy (a settled request without a row is healthy), with
-- the diagnosis as the API returns it. Partitioned and dropped like `requests`.
CREATE TABLE diagnoses (
    instance_id    integer  NOT NULL,
    request_id     text     NOT NULL,
    arrival_ns     bigint   NOT NULL,
    finished_ns    bigint   NOT NULL,
    speed_degraded boolean  NOT NULL,
    words_degraded boolean  NOT NULL,
    -- The window listing's order: the worst finding's severity (0 info, 1 warning, 2 critical),
    -- then how far past its SLO the request was (TTFT or TPOT over its SLO, the larger).
    worst          smallint NOT NULL,
    excess         double precision NOT NULL,
    causes         text[]   NOT NULL,
    -- Every finding's culprits: "which requests did this one hurt?" is `culprits @> {id}`.
    culprits       text[]   NOT NULL,
    -- `Diagnosis` as JSON (core::analysis::diagnosis).
    diagnosis      jsonb    NOT NULL,
    PRIMARY KEY (instance_id, request_id, arrival_ns)
) PARTITION BY RANGE (arrival_ns);

CREATE INDEX diagnoses_arrival ON diagnoses (arrival_ns);
CREATE INDEX diagnoses_causes ON diagnoses USING gin (causes);
CREATE INDEX diagnoses_culprits ON diagnoses USING gin (culprits);

-- Stretches of an instance's time that received data: the requests alive in them are
-- (re)diagnosed once no data has been added for the settle time. Ingest appends one row per
-- stored batch; the worker merges and deletes them.
CREATE TABLE diagnosis_queue (
    id          bigserial   PRIMARY KEY,
    instance_id integer     NOT NULL,
    from_ns     bigint      NOT NULL,
    to_ns       bigint      NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX diagnosis_queue_instance ON diagnosis_queue (instance_id, from_ns);

-- What is already stored is due at once.
INSERT INTO diagnosis_queue (instance_id, from_ns, to_ns, enqueued_at)
SELECT instance_id, min(arrival_ns), max(finished_ns), now() - interval '1 day'
FROM requests GROUP BY instance_id;
