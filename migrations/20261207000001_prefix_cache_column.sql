-- The prefix cache's part in a request (its block-hash chain: up to 64 hashes) gets its own column.
-- Inside `detail` it was two thirds of the JSON, so detail went out of line and every read of its
-- small parts (compare's word sums, the stage times) decompressed the chain too: compare of two
-- half-hours of 50,000 requests each spent 830 ms per side there. In its own column the chain is
-- read only by the views that want it.
ALTER TABLE requests ADD COLUMN prefix_cache jsonb;
UPDATE requests
SET prefix_cache = detail -> 'prefix_cache', detail = detail - 'prefix_cache'
WHERE detail ? 'prefix_cache';
-- The prompt's key: equal keys, equal prompts as far as the engine's hashes tell (the chain's start,
-- its length and the prompt's length). Compare pairs the requests of both sides by it without
-- reading the chains.
ALTER TABLE requests ADD COLUMN prompt_key text GENERATED ALWAYS AS (
    md5((prefix_cache -> 'block_hashes')::text || ':' || (prefix_cache ->> 'blocks') || ':' || prompt_tokens)
) STORED;
