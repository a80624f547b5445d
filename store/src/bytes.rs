//! LEB128 varints and a bounds-checked reader: the primitives of the stored block formats.

use crate::error::{Error, Result};

/// Zigzag keeps small negative numbers small (deltas that go backwards).
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

#[derive(Default)]
pub struct Writer {
    pub buf: Vec<u8>,
}

impl Writer {
    /// A writer with room for `bytes` before it reallocates (for columns whose size is known).
    pub fn with_capacity(bytes: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(bytes),
        }
    }

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

    pub fn signed(&mut self, v: i64) {
        self.varint(zigzag(v));
    }

    pub fn str(&mut self, s: &str) {
        self.varint(s.len() as u64);
        self.buf.extend_from_slice(s.as_bytes());
    }

    /// Writes integers as offsets from the column minimum, in byte planes: all lowest bytes,
    /// then all second bytes, and so on; the top bits that do not fill a byte are bit-packed.
    /// zstd then squeezes each plane on its own and the high bits cost exactly their width,
    /// which byte-aligned varints prevent.
    pub fn planes(&mut self, values: &[u64]) {
        let min = values.iter().copied().min().unwrap_or(0);
        let bits = values
            .iter()
            .map(|v| 64 - (v - min).leading_zeros())
            .max()
            .unwrap_or(0);
        self.varint(values.len() as u64);
        self.varint(min);
        self.u8(bits as u8);
        for byte in 0..bits / 8 {
            self.buf
                .extend(values.iter().map(|v| ((v - min) >> (8 * byte)) as u8));
        }
        let (shift, rest) = (bits / 8 * 8, bits % 8);
        if rest > 0 {
            let mut acc = 0u32;
            let mut filled = 0;
            for v in values {
                acc |= ((((v - min) >> shift) as u32) & ((1 << rest) - 1)) << filled;
                filled += rest;
                if filled >= 8 {
                    self.buf.push(acc as u8);
                    acc >>= 8;
                    filled -= 8;
                }
            }
            if filled > 0 {
                self.buf.push(acc as u8);
            }
        }
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
        Ok(unzigzag(self.varint()?))
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

    /// Reads what [`Writer::planes`] wrote: at most `max` values. A column of equal values takes
    /// no bytes whatever its length, so only the caller can say how long it may be.
    pub fn planes(&mut self, max: usize) -> Result<Vec<u64>> {
        let n = self.varint()? as usize;
        let min = self.varint()?;
        let bits = u32::from(self.u8()?);
        if n > max
            || bits > 64
            || n.checked_mul(bits as usize)
                .is_none_or(|total| total / 8 > self.buf.len())
        {
            return Err(self.corrupt());
        }
        let mut values = vec![0u64; n];
        for byte in 0..bits / 8 {
            for (v, &b) in values.iter_mut().zip(self.bytes(n)?) {
                *v |= u64::from(b) << (8 * byte);
            }
        }
        let (shift, rest) = (bits / 8 * 8, bits % 8);
        if rest > 0 {
            let packed = self.bytes((n * rest as usize).div_ceil(8))?;
            let mut bit = 0usize;
            for v in &mut values {
                let word = u32::from(packed[bit / 8])
                    | u32::from(*packed.get(bit / 8 + 1).unwrap_or(&0)) << 8;
                *v |= u64::from((word >> (bit % 8)) & ((1 << rest) - 1)) << shift;
                bit += rest as usize;
            }
        }
        for v in &mut values {
            *v = v.wrapping_add(min);
        }
        Ok(values)
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
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

    #[test]
    fn planes_round_trip_and_detect_truncation() {
        let cases: [Vec<u64>; 6] = [
            vec![],
            vec![7, 7],
            vec![1, 255, 256, 70_000, u64::MAX],
            (0..1000).map(|i| 18_000_000 + i * 9_001).collect(),
            (0..77).map(|i| (i * 37) % 5).collect(),
            vec![120_000_000, 30_000_000, 30_000_000, 30_000_000],
        ];
        for values in cases {
            let mut w = Writer::default();
            w.planes(&values);
            assert_eq!(
                Reader::new(&w.buf, "test").planes(values.len()).unwrap(),
                values
            );
            let spread = values.iter().max() > values.iter().min();
            if spread {
                let cut = &w.buf[..w.buf.len() - 1];
                assert!(
                    Reader::new(cut, "test").planes(values.len()).is_err(),
                    "truncation is detected"
                );
            }
        }
    }
}
