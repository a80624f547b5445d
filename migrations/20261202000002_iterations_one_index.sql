-- No read looks steps up by iteration id alone: pages and diagnosis read an instance's steps over
-- a time range, through the primary key (instance_id, start_ns, iteration_id), and the writer
-- checks for stored steps by that whole key. The second index cost every stored step a btree
-- insert, about a sixth of the iteration insert (docs/BENCHMARKS.md, 2026-12-02), and about a
-- fifth of the table's size. Dropping it on the parent drops it on every partition.
DROP INDEX IF EXISTS iterations_instance_iteration;
