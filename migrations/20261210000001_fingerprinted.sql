-- The requests that carry a block-hash chain, in arrival order. Compare's "same prompt, different
-- answer" and the prompt families read the first or last N of a window's fingerprinted requests;
-- on a fleet whose engines report no block hashes the planner (rightly) found no index to walk and
-- scanned the whole window to learn there were none: 3.6 s for 2.5 M requests of a 6 h window
-- (issue 31, docs/BENCHMARKS.md). Partial, so requests without a chain cost it nothing.
CREATE INDEX IF NOT EXISTS requests_fingerprinted ON requests (arrival_ns) WHERE prefix_cache IS NOT NULL;
