-- tokenscope storage: one row per request (tokens in one encoded block), one row per engine iteration.
-- Times are integer nanoseconds since the Unix epoch. `requests` and `iterations` are partitioned by
-- day on their time column so that retention drops whole partitions; partitions are created on demand
-- by the server (see server/src/store/partitions.rs) and named <table>_pYYYYMMDD.

CREATE TABLE models (
    id   integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE
);

-- Token texts are a function of (model, token id): stored once here instead of in every request.
-- Insert-only and first-writer-wins, so a cached copy in the server never goes stale. A request
-- whose engine decoded a token differently keeps its own text in its block.
CREATE TABLE vocab (
    model_id integer NOT NULL REFERENCES models (id),
    token_id integer NOT NULL,
    text     text    NOT NULL,
    PRIMARY KEY (model_id, token_id)
);

CREATE TABLE instances (
    id             integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_key   text    NOT NULL UNIQUE,
    engine         text    NOT NULL,
    engine_version text    NOT NULL,
    model_id       integer NOT NULL REFERENCES models (id),
    role           text    NOT NULL,
    host           text    NOT NULL,
    first_seen_ns  bigint  NOT NULL,
    last_seen_ns   bigint  NOT NULL
);

CREATE TABLE requests (
    instance_id    integer NOT NULL,
    -- The model that served this request (an instance may be redeployed with another model).
    model_id       integer NOT NULL,
    request_id     text    NOT NULL,
    arrival_ns     bigint  NOT NULL,
    finished_ns    bigint  NOT NULL,
    -- Derived at ingest so that lists can filter and sort without decoding anything.
    ttft_ns        bigint,
    tpot_ns        bigint,
    e2e_ns         bigint  NOT NULL,
    queue_ns       bigint,
    prompt_tokens  integer NOT NULL,
    output_tokens  integer NOT NULL,
    cached_tokens  integer NOT NULL,
    finish_reason  text    NOT NULL,
    trace_id       bytea,
    parent_span_id bytea,
    -- Small, rarely filtered parts: stage timestamps, prefill chunks, preemptions, KV transfer, sampling.
    detail         jsonb   NOT NULL,
    -- Columnar, zstd-compressed token block (format: server/src/store/token_block.rs).
    tokens         bytea,
    PRIMARY KEY (instance_id, request_id, arrival_ns)
) PARTITION BY RANGE (arrival_ns);

CREATE INDEX requests_arrival ON requests (arrival_ns);
CREATE INDEX requests_instance_arrival ON requests (instance_id, arrival_ns);
CREATE INDEX requests_request_id ON requests (request_id);

CREATE TABLE iterations (
    instance_id    integer NOT NULL,
    iteration_id   bigint  NOT NULL,
    start_ns       bigint  NOT NULL,
    end_ns         bigint  NOT NULL,
    running        integer NOT NULL,
    waiting        integer NOT NULL,
    kv_cache_usage real    NOT NULL,
    batch_size     integer NOT NULL,
    prefill_tokens integer NOT NULL,
    decode_tokens  integer NOT NULL,
    -- The batch entries, encoded (format: server/src/store/batch_block.rs).
    batch          bytea   NOT NULL,
    PRIMARY KEY (instance_id, start_ns, iteration_id)
) PARTITION BY RANGE (start_ns);

CREATE INDEX iterations_instance_iteration ON iterations (instance_id, iteration_id);
