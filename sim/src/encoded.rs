//! Exports sent as protobuf bytes encoded beforehand: a batch is encoded once, however often it
//! is retried, and what waits to be sent is its compact bytes rather than its message tree.

use prost::Message;
use prost::bytes::BufMut;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{Bytes, http::uri::PathAndQuery};
use tonic::transport::Channel;

use tokenscope_proto::v1;

/// The `tokenscope.v1.TraceIngest/Export` call with a body encoded beforehand.
pub async fn export(channel: Channel, body: Bytes) -> Result<v1::ExportResponse, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel).max_encoding_message_size(256 << 20);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path = PathAndQuery::from_static("/tokenscope.v1.TraceIngest/Export");
    Ok(grpc
        .unary(tonic::Request::new(body), path, Encoded)
        .await?
        .into_inner())
}

/// Sends bytes as they are; decodes the reply.
#[derive(Clone, Copy, Default)]
struct Encoded;

impl Codec for Encoded {
    type Encode = Bytes;
    type Decode = v1::ExportResponse;
    type Encoder = Self;
    type Decoder = Self;
    fn encoder(&mut self) -> Self {
        Self
    }
    fn decoder(&mut self) -> Self {
        Self
    }
}

impl Encoder for Encoded {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for Encoded {
    type Item = v1::ExportResponse;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut DecodeBuf<'_>,
    ) -> Result<Option<v1::ExportResponse>, tonic::Status> {
        v1::ExportResponse::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(e.to_string()))
    }
}
