-- Iteration batches name their requests by a key from here instead of by the request id text: a
-- batch may hold hundreds of requests every engine step and engine ids run to 40 bytes, so the
-- text cost more than the tokens themselves. A key is handed out at ingest for each (instance,
-- request id) the first time an iteration names it, possibly long before the request finishes,
-- and never changes; writers of one instance hold its advisory lock while they look keys up and
-- add new ones, so an id gets one key. Batches stored before this table keep their ids inline
-- (batch block version 1) and still decode.
--
-- Partitioned by day on `seen_ns` (the start of the first iteration that named the request) like
-- the tables it serves; retention keeps each day of keys one day longer than the iterations, for
-- requests that run across the cut. (Identity columns on partitioned tables need PostgreSQL 17,
-- hence the sequence.)
CREATE SEQUENCE request_keys_key_seq AS bigint;

CREATE TABLE request_keys (
    key         bigint  NOT NULL DEFAULT nextval('request_keys_key_seq'),
    instance_id integer NOT NULL,
    request_id  text    NOT NULL,
    seen_ns     bigint  NOT NULL
) PARTITION BY RANGE (seen_ns);

CREATE INDEX request_keys_key ON request_keys (key);
CREATE INDEX request_keys_instance_request ON request_keys (instance_id, request_id);
