//! The `tokenscope.v1.TraceIngest` gRPC service.

use tonic::{Request, Response, Status};

use super::{Sink, granted, native, store_decoded};
use crate::metrics::Source;
use tokenscope_proto::v1::{self, trace_ingest_server::TraceIngest};
pub struct IngestService {
    pub sink: Sink,
}

#[tonic::async_trait]
impl TraceIngest for IngestService {
    async fn export(
        &self,
        request: Request<v1::ExportRequest>,
    ) -> Result<Response<v1::ExportResponse>, Status> {
        let grant = granted(&request)?;
        let decoded = native::decode(request.into_inner());
        let reply = store_decoded(&self.sink, Source::NativeGrpc, &grant, decoded).await?;
        Ok(Response::new(reply))
    }
}
