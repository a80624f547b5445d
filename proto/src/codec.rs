//! The gRPC codec of our own service: protobuf as tonic-prost writes it, read from one
//! contiguous buffer.
//!
//! tonic hands a decoder a view over its receive buffer whose every `advance` goes through two
//! layers of checks; prost's readers call it for each varint, and a native export is mostly
//! packed varints (token ids, times, candidate ids). Taking the message as one `Bytes` (no copy:
//! it splits the buffer) and decoding from a slice reads them at slice speed. Measured in
//! docs/BENCHMARKS.md.

use std::marker::PhantomData;

use prost::Message;
use prost::bytes::Buf;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// `tonic_prost::ProstCodec` with a slice decoder (named by `build.rs` as the codec of the
/// `tokenscope.v1` services).
#[derive(Debug, Clone)]
pub struct SliceCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for SliceCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for SliceCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = SliceDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        SliceDecoder(PhantomData)
    }
}

#[derive(Debug)]
pub struct SliceDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for SliceDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        let message = buf.copy_to_bytes(buf.remaining());
        U::decode(&message[..]).map(Some).map_err(|e| {
            Status::invalid_argument(format!("the message is not valid protobuf: {e}"))
        })
    }
}
