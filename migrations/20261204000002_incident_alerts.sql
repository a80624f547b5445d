-- The incident each alert opened (`POST /api/v1/alerts/alertmanager`): Alertmanager sends a firing
-- alert again at every group and repeat interval; the same alert (its fingerprint and start)
-- answers with the incident it already opened instead of opening another.
CREATE TABLE incident_alerts (
    alert_key TEXT PRIMARY KEY,
    slug      TEXT NOT NULL REFERENCES incidents (slug) ON DELETE CASCADE
);
