-- Iteration batches name their requests by a key from here instead of by the request id text: a
-- batch may hold hundreds of requests every engine step and engine ids run to 40 bytes, so the
-- text cost more than the tokens themselves. A key is handed out at ingest for each (instance,
-- request id) the first time an iteration names it, possibly long before the
-- request finishes, and never changes. Batches stored before this table keep their ids inline
-- (batch block version 1) and still decode.
--
-- Not partitioned: one short row per request, well under 1 % of what the request itself stores.
CREATE TABLE request_keys (
    key         bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    instance_id integer NOT NULL,
    request_id  text    NOT NULL,
    UNIQUE (instance_id, request_id)
);
