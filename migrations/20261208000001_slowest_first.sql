-- The explorer's "slowest first" at fleet scale: a top-N by TTFT, TPOT or end-to-end time over a
-- day of 10 million requests sorted the window whole (seconds); with these, Postgres walks each
-- partition's index from the slowest end and stops after the page (issue 31, docs/BENCHMARKS.md).
-- NULLS LAST as the list orders: a request without a first token comes after every timed one.
CREATE INDEX IF NOT EXISTS requests_ttft_desc ON requests (ttft_ns DESC NULLS LAST);
CREATE INDEX IF NOT EXISTS requests_tpot_desc ON requests (tpot_ns DESC NULLS LAST);
CREATE INDEX IF NOT EXISTS requests_e2e_desc ON requests (e2e_ns DESC NULLS LAST);
