-- Speculative decoding in the rollup cells (the waterfall's lane over wide windows): request-steps
-- that verified drafts, drafts verified, drafts accepted. Cells written before this hold zeros,
-- which read as "no speculation" (the raw steps keep the counts; a narrow window shows them).
ALTER TABLE iteration_rollups
    ADD COLUMN draft_entries  bigint NOT NULL DEFAULT 0,
    ADD COLUMN draft_proposed bigint NOT NULL DEFAULT 0,
    ADD COLUMN draft_accepted bigint NOT NULL DEFAULT 0;
