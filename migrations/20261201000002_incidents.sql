-- Incidents: a view frozen into an unguessable, revocable link. The snapshot holds everything the
-- incident page and its preview redraw (the window's waterfall, each victim's tokens, stages and
-- diagnosis), so an incident outlives the retention of the raw traces it was made from.
CREATE TABLE incidents (
    slug        TEXT PRIMARY KEY,          -- 128 random bits from the OS, hex
    title       TEXT NOT NULL,
    note        TEXT NOT NULL DEFAULT '',
    created_ns  BIGINT NOT NULL,
    revoked_ns  BIGINT,
    instances   TEXT[] NOT NULL,
    from_ns     BIGINT NOT NULL,
    to_ns       BIGINT NOT NULL,
    victims     TEXT[] NOT NULL,
    culprits    TEXT[] NOT NULL,
    headline    TEXT NOT NULL,
    snapshot    BYTEA NOT NULL,            -- zstd of the snapshot (see store/incidents.rs)
    preview_png BYTEA                      -- rendered once, on first request
);

CREATE INDEX incidents_by_created ON incidents (created_ns DESC);
