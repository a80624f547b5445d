-- The explorer's find box takes a W3C trace id as well as a request id: without an index a pasted
-- trace id would scan every request.
CREATE INDEX requests_trace_id ON requests (trace_id) WHERE trace_id IS NOT NULL;
