-- Requests whose diagnosis is healthy whatever ran beside them (they broke no SLO, never stalled,
-- were never preempted, and their words raise nothing: `diagnosis::healthy_alone`, with the
-- default thresholds). The findings worker rediagnoses every request alive in a stretch that got
-- new data, several times over a busy request's life; these it skips unless steps that verified
-- drafts lie in their lifetime (speculation is judged against the other requests in its steps).
-- Rows stored before this read false: diagnosed as they always were.
ALTER TABLE requests ADD COLUMN healthy_alone boolean NOT NULL DEFAULT false;
