-- The first block hash of a request's prompt (what the slow set tallies as "prompt start"), kept
-- beside the row: read out of `prefix_cache` it decompressed the whole chain per request, 550 ms
-- of the slow set's 850 on an hour of 100,000 requests with 64-hash chains.
ALTER TABLE requests ADD COLUMN prompt_start text GENERATED ALWAYS AS (prefix_cache -> 'block_hashes' ->> 0) STORED;
