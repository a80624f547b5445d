-- Slices: the tenant, LoRA adapter and priority a request was served with, as columns that lists,
-- charts and compare filter on. They live in `detail` (store/src/write: `Served`); generated from
-- it, so ingest writes nothing new and rows stored before this migration get them too.
ALTER TABLE requests
    ADD COLUMN tenant       text    GENERATED ALWAYS AS (detail ->> 'tenant') STORED,
    ADD COLUMN lora_adapter text    GENERATED ALWAYS AS (detail ->> 'lora_adapter') STORED,
    ADD COLUMN priority     integer GENERATED ALWAYS AS ((detail ->> 'priority')::integer) STORED;

-- A tenant's requests in a window (a customer's own view); adapters and priorities are few and
-- filtered together with a window, where the arrival index serves.
CREATE INDEX requests_tenant_arrival ON requests (tenant, arrival_ns) WHERE tenant IS NOT NULL;
