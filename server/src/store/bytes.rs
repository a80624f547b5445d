//! LEB128 varints and a bounds-checked reader: the primitives of the stored block formats.

use crate::error::{Error, Result};

#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    /// Zigzag keeps small negative numbers small (deltas that go backwards).
    pub fn signed(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }

    pub fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
    }

    /// Appends another writer as a length-prefixed section, so each column stays contiguous.
    pub fn section(&mut self, column: Writer) {
        self.varint(column.buf.len() as u64);
        self.buf.extend_from_slice(&column.buf);
    }
}

pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Self { buf, what }
    }

    fn corrupt(&self) -> Error {
        Error::Internal(format!("stored {} is corrupt (truncated)", self.what))
    }

    pub fn u8(&mut self) -> Result<u8> {
        let (&b, rest) = self.buf.split_first().ok_or_else(|| self.corrupt())?;
        self.buf = rest;
        Ok(b)
    }

    pub fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(self.corrupt())
    }

    pub fn u32(&mut self) -> Result<u32> {
        u32::try_from(self.varint()?).map_err(|_| self.corrupt())
    }

    pub fn signed(&mut self) -> Result<i64> {
        let z = self.varint()?;
        Ok(((z >> 1) as i64) ^ -((z & 1) as i64))
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.buf.len() {
            return Err(self.corrupt());
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub fn str(&mut self) -> Result<String> {
        let n = self.varint()? as usize;
        let bytes = self.bytes(n)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.corrupt())
    }

    pub fn section(&mut self) -> Result<Reader<'a>> {
        let n = self.varint()? as usize;
        Ok(Reader::new(self.bytes(n)?, self.what))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_zigzag_round_trip() {
        let values = [0i64, 1, -1, 63, -64, 300, -300, i64::MAX, i64::MIN];
        let mut w = Writer::default();
        for v in values {
            w.signed(v);
            w.varint(v as u64);
        }
        let mut r = Reader::new(&w.buf, "test");
        for v in values {
            assert_eq!(r.signed().unwrap(), v);
            assert_eq!(r.varint().unwrap(), v as u64);
        }
        assert!(
            r.u8().is_err(),
            "reading past the end is an error, not a panic"
        );
    }
}
