-- An incident made by a reader scoped to tenants holds only what that reader may see (other
-- tenants' requests under aliases) and is readable, in lists and by slug, only by readers who
-- see all of those tenants. NULL: made by a reader who sees every tenant (readable by those).
ALTER TABLE incidents ADD COLUMN tenants text[];
