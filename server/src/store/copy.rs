//! Binary `COPY … FROM STDIN` bodies: how a batch's new rows reach Postgres. `COPY` writes many
//! tuples per heap page and WAL record, where `INSERT … SELECT FROM UNNEST` writes one each
//! (measured: docs/BENCHMARKS.md, 2026-12-02 morning).
//!
//! The format is Postgres's own (`COPY` documentation, "Binary Format"): a signature, then per
//! row a field count and each field as a big-endian length and its binary send form.

use crate::error::Result;

const SIGNATURE: &[u8] = b"PGCOPY\n\xff\r\n\0";

/// One `COPY` body under construction. Each row starts with [`CopyRows::row`], naming how many
/// fields follow; the fields are written in the statement's column order.
pub(super) struct CopyRows {
    buf: Vec<u8>,
    rows: u64,
}

impl CopyRows {
    /// An empty body, with room for about `bytes` of rows.
    pub fn with_capacity(bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(bytes + SIGNATURE.len() + 10);
        buf.extend_from_slice(SIGNATURE);
        buf.extend_from_slice(&0i32.to_be_bytes()); // flags: no OIDs
        buf.extend_from_slice(&0i32.to_be_bytes()); // no header extension
        Self { buf, rows: 0 }
    }

    pub fn row(&mut self, fields: i16) -> &mut Self {
        self.rows += 1;
        self.buf.extend_from_slice(&fields.to_be_bytes());
        self
    }

    fn field(&mut self, value: &[u8]) -> &mut Self {
        // Fields are bounded well below 1 GB by the gRPC message limit; a longer one would be
        // refused by Postgres, not misread.
        let len = i32::try_from(value.len()).unwrap_or(i32::MAX);
        self.buf.extend_from_slice(&len.to_be_bytes());
        self.buf.extend_from_slice(value);
        self
    }

    pub fn int4(&mut self, v: i32) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    pub fn int8(&mut self, v: i64) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    pub fn float4(&mut self, v: f32) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    /// `text` and `bytea` both send their bytes as they are.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.field(v)
    }

    pub fn null(&mut self) -> &mut Self {
        self.buf.extend_from_slice(&(-1i32).to_be_bytes());
        self
    }

    pub fn opt_int8(&mut self, v: Option<i64>) -> &mut Self {
        match v {
            Some(v) => self.int8(v),
            None => self.null(),
        }
    }

    pub fn opt_bytes(&mut self, v: Option<&[u8]>) -> &mut Self {
        match v {
            Some(v) => self.bytes(v),
            None => self.null(),
        }
    }

    /// `jsonb`'s binary form: format version 1, then the JSON text.
    pub fn jsonb(&mut self, json: &[u8]) -> &mut Self {
        let len = i32::try_from(json.len() + 1).unwrap_or(i32::MAX);
        self.buf.extend_from_slice(&len.to_be_bytes());
        self.buf.push(1);
        self.buf.extend_from_slice(json);
        self
    }

    /// Runs `statement` (a `COPY … FROM STDIN (FORMAT binary)`) with these rows; returns how
    /// many Postgres stored.
    pub async fn send(mut self, conn: &mut sqlx::PgConnection, statement: &str) -> Result<u64> {
        if self.rows == 0 {
            return Ok(0);
        }
        self.buf.extend_from_slice(&(-1i16).to_be_bytes()); // trailer
        let mut copy = conn.copy_in_raw(statement).await?;
        copy.send(self.buf).await?;
        Ok(copy.finish().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_its_field_count_then_length_prefixed_fields() {
        let mut c = CopyRows::with_capacity(0);
        c.row(4).int4(7).null().bytes(b"ab").jsonb(b"{}");
        let body = &c.buf[SIGNATURE.len() + 8..];
        assert_eq!(
            body,
            [
                &[0, 4][..],
                &[0, 0, 0, 4, 0, 0, 0, 7],
                &[0xff, 0xff, 0xff, 0xff],
                &[0, 0, 0, 2, b'a', b'b'],
                &[0, 0, 0, 3, 1, b'{', b'}'],
            ]
            .concat()
        );
        assert_eq!(c.rows, 1);
    }
}
