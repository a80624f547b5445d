//! Latency cells: a minute of requests kept as counts — log-binned TTFT, TPOT, queue and
//! end-to-end histograms, SLO breaches and word sums — so that a day of a fleet is read as a
//! few thousand rows instead of ten million (issue 31). Counts, not analysis: the store keeps
//! them, the findings worker fills them, the latency chart and compare merge them.
//!
//! A percentile read from bins is not the exact one: bins are 2^(1/16) wide (4.4 %), and the
//! value is placed inside its bin by its rank, so it is within a bin of `percentile_disc` and
//! usually much closer. Counts (requests, SLO breaches, compare's 4-per-octave histogram, word
//! sums) are exact.

use serde::{Deserialize, Serialize};

use super::Nanos;
use super::metrics::{WordStats, WordSums};

/// Bins per doubling of the latency. Compare's histogram (4 per octave) is groups of 4.
pub const BINS_PER_OCTAVE: i32 = 16;

/// The bin of a latency: bin 0 starts at 1 ms; below 1 µs counts as 1 µs. The same formula
/// as compare's bins in SQL, at 16 per octave.
pub fn bin_of(ns: Nanos) -> i32 {
    let ms = ns.max(1000) as f64 / 1e6;
    (f64::from(BINS_PER_OCTAVE) * ms.log2()).floor() as i32
}

/// Lower edge of bin `k` in nanoseconds.
fn edge_ns(k: f64) -> f64 {
    1e6 * (k / f64::from(BINS_PER_OCTAVE)).exp2()
}

/// Requests per bin, dense from bin `lo` (a minute's latencies span a few octaves).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Histogram {
    pub lo: i32,
    pub counts: Vec<i32>,
}

impl Histogram {
    pub fn add(&mut self, ns: Nanos) {
        self.add_bin(bin_of(ns), 1);
    }

    fn add_bin(&mut self, k: i32, n: i32) {
        if n == 0 {
            return;
        }
        if self.counts.is_empty() {
            self.lo = k;
        }
        if k < self.lo {
            let grow = (self.lo - k) as usize;
            self.counts.splice(0..0, std::iter::repeat_n(0, grow));
            self.lo = k;
        }
        let i = (k - self.lo) as usize;
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += n;
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (k, n) in other.bins() {
            self.add_bin(k, n);
        }
    }

    /// The non-empty bins: (bin, requests).
    pub fn bins(&self) -> impl Iterator<Item = (i32, i32)> + '_ {
        (self.lo..)
            .zip(self.counts.iter().copied())
            .filter(|&(_, n)| n > 0)
    }

    pub fn total(&self) -> i64 {
        self.counts.iter().map(|&n| i64::from(n)).sum()
    }

    /// The `q` quantile (0 < q ≤ 1) as `percentile_disc` ranks it (the first value whose
    /// cumulative share reaches `q`), placed inside its bin by its rank there.
    pub fn quantile(&self, q: f64) -> Option<Nanos> {
        let n = self.total();
        if n == 0 {
            return None;
        }
        let rank = ((q * n as f64).ceil() as i64).clamp(1, n);
        let mut below = 0i64;
        for (k, c) in self.bins() {
            let c = i64::from(c);
            if below + c >= rank {
                let inside = (rank - below) as f64 - 0.5;
                return Some(edge_ns(f64::from(k) + inside / c as f64).round() as Nanos);
            }
            below += c;
        }
        None
    }

    /// Requests per coarser bin of `per` of these bins: compare's 4 per octave with `per` 4.
    pub fn coarse(&self, per: i32) -> Vec<(i32, i32)> {
        let mut out: Vec<(i32, i32)> = Vec::new();
        for (k, n) in self.bins() {
            let c = k.div_euclid(per);
            match out.last_mut() {
                Some((last, sum)) if *last == c => *sum += n,
                _ => out.push((c, n)),
            }
        }
        out
    }
}

/// What a cell keeps of one request (the store's per-request columns).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CellInput {
    pub arrival_ns: Nanos,
    pub ttft_ns: Option<Nanos>,
    pub tpot_ns: Option<Nanos>,
    pub queue_ns: Option<Nanos>,
    pub e2e_ns: Nanos,
    pub output_tokens: u32,
    pub words: Option<WordStats>,
}

/// A set of requests as counts: a minute of one instance and model, or any sum of those.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Cell {
    pub requests: i64,
    /// Requests over the TTFT and TPOT SLOs the cell was counted with.
    pub ttft_over: i64,
    pub tpot_over: i64,
    pub ttft: Histogram,
    pub tpot: Histogram,
    pub queue: Histogram,
    pub e2e: Histogram,
    pub words: WordSums,
}

impl Cell {
    /// Counts a request, with breaches of the SLOs `(ttft, tpot)` (over, not at).
    pub fn add(&mut self, r: &CellInput, (ttft_slo, tpot_slo): (Nanos, Nanos)) {
        self.requests += 1;
        if let Some(t) = r.ttft_ns {
            self.ttft.add(t);
            self.ttft_over += i64::from(t > ttft_slo);
        }
        if let Some(t) = r.tpot_ns {
            self.tpot.add(t);
            self.tpot_over += i64::from(t > tpot_slo);
        }
        if let Some(t) = r.queue_ns {
            self.queue.add(t);
        }
        self.e2e.add(r.e2e_ns);
        if let Some(w) = &r.words {
            self.words.add(w, r.output_tokens);
        }
    }

    pub fn merge(&mut self, o: &Cell) {
        self.requests += o.requests;
        self.ttft_over += o.ttft_over;
        self.tpot_over += o.tpot_over;
        self.ttft.merge(&o.ttft);
        self.tpot.merge(&o.tpot);
        self.queue.merge(&o.queue);
        self.e2e.merge(&o.e2e);
        self.words.merge(&o.words);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `percentile_disc` as Postgres computes it, on sorted values.
    fn disc(sorted: &[Nanos], q: f64) -> Nanos {
        let n = sorted.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        sorted[rank - 1]
    }

    fn width() -> f64 {
        (1.0 / f64::from(BINS_PER_OCTAVE)).exp2()
    }

    proptest! {
        #[test]
        fn a_quantile_from_bins_is_within_a_bin_of_the_exact_one(
            mut values in prop::collection::vec(1_000i64..200_000_000_000, 1..400),
            q in prop::sample::select(vec![0.5, 0.9, 0.99, 1.0]),
        ) {
            let mut h = Histogram::default();
            for &v in &values {
                h.add(v);
            }
            values.sort_unstable();
            let exact = disc(&values, q) as f64;
            let got = h.quantile(q).unwrap() as f64;
            prop_assert!(got / exact < width() * 1.000_001 && exact / got < width() * 1.000_001,
                "q{q}: {got} from bins against {exact}");
        }

        #[test]
        fn merged_halves_count_what_the_whole_counts(
            values in prop::collection::vec(0i64..100_000_000_000, 0..200),
            split in 0usize..200,
        ) {
            let cut = split.min(values.len());
            let (mut a, mut b, mut whole) = (Histogram::default(), Histogram::default(), Histogram::default());
            values[..cut].iter().for_each(|&v| a.add(v));
            values[cut..].iter().for_each(|&v| b.add(v));
            values.iter().for_each(|&v| whole.add(v));
            a.merge(&b);
            prop_assert_eq!(a.bins().collect::<Vec<_>>(), whole.bins().collect::<Vec<_>>());
        }
    }

    #[test]
    fn coarse_bins_are_compares_quarter_octaves() {
        let mut h = Histogram::default();
        // 1 ms starts bin 0; 1.19 ms (2^0.25) starts compare's bin 1; 0.9 ms is in bin -1.
        for ns in [1_000_000, 1_100_000, 1_190_000, 900_000] {
            h.add(ns);
        }
        assert_eq!(h.coarse(4), vec![(-1, 1), (0, 2), (1, 1)]);
    }

    #[test]
    fn a_cell_counts_breaches_over_not_at_the_slo() {
        let mut c = Cell::default();
        let at = CellInput {
            ttft_ns: Some(2_000_000_000),
            tpot_ns: Some(50_000_001),
            e2e_ns: 3_000_000_000,
            ..CellInput::default()
        };
        c.add(&at, (2_000_000_000, 50_000_000));
        assert_eq!((c.requests, c.ttft_over, c.tpot_over), (1, 0, 1));
        assert_eq!(c.queue.total(), 0);
    }
}
