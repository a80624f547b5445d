-- Secrets every server on this database shares, made once by the first server that needs them:
-- `alias_salt`, what scoped readers' aliases of other tenants' requests are digested with (the
-- same alias on every replica and after a restart).
CREATE TABLE secrets (
    name text PRIMARY KEY,
    value text NOT NULL
);
