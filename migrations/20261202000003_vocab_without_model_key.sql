-- The vocabulary's reference to `models` is dropped: the check cost Postgres about 10 µs per
-- stored id (half of what storing one cost), paid thousands of times in each of a new model's
-- first batches (docs/BENCHMARKS.md, 2026-12-02 morning). It guarded nothing: the server writes
-- vocabulary rows only for a model id it has just read from `models`, and models are never deleted.
ALTER TABLE vocab DROP CONSTRAINT vocab_model_id_fkey;
