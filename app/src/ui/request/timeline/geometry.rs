//! Token timeline geometry, pure: tokens to pixel columns (one per token, or the tallest of the
//! tokens under each pixel when there are more tokens than pixels), latency to height.

use crate::api::TokenView;

/// One bar of the timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    pub x0: f64,
    pub x1: f64,
    /// The token drawn: the slowest under this column.
    pub token: u32,
    pub latency_ms: f64,
    /// The split of `latency_ms`, when the source says when each step was scheduled.
    pub wait_ms: Option<f64>,
    /// Any token under the column broke the TPOT SLO.
    pub breach: bool,
    /// Any token under the column waited while other requests prefilled.
    pub interrupted: bool,
    /// Every token under the column was an accepted draft (speculative decoding): its step made
    /// several tokens, so all but the first of them show no latency of their own.
    pub drafted: bool,
    pub batch: Option<u32>,
    pub waiting: Option<u32>,
}

/// Token index ↔ x over a width.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Layout {
    pub n: u32,
    pub width: f64,
}

impl Layout {
    pub fn x(&self, i: u32) -> f64 {
        f64::from(i) * self.width / f64::from(self.n.max(1))
    }

    /// The token under `x`, clamped to the tokens there are.
    pub fn index(&self, x: f64) -> u32 {
        let i = (x / self.width * f64::from(self.n)).floor();
        i.clamp(0.0, f64::from(self.n.saturating_sub(1))) as u32
    }
}

/// The SLOs a token answers to: the first token's wait to TTFT, every later gap to TPOT.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slo {
    pub ttft_ms: f64,
    pub tpot_ms: f64,
}

impl Slo {
    pub fn of(th: &crate::analysis::diagnosis::Thresholds) -> Self {
        Self {
            ttft_ms: th.ttft_ms,
            tpot_ms: th.tpot_ms,
        }
    }
}

pub fn columns(tokens: &[TokenView], width: f64, slo: Slo) -> Vec<Column> {
    let n = tokens.len();
    let cols = n.min(width.max(1.0) as usize);
    (0..cols)
        .filter_map(|c| {
            let (first, last) = (c * n / cols, ((c + 1) * n / cols).max(c * n / cols + 1));
            let under = &tokens[first..last.min(n)];
            let tallest = under.iter().max_by(|a, b| {
                a.latency_ms
                    .unwrap_or(0.0)
                    .total_cmp(&b.latency_ms.unwrap_or(0.0))
            })?;
            Some(Column {
                x0: c as f64 * width / cols as f64,
                x1: (c + 1) as f64 * width / cols as f64,
                token: tallest.index,
                latency_ms: tallest.latency_ms.unwrap_or(0.0),
                wait_ms: tallest.wait_ms.filter(|_| tallest.compute_ms.is_some()),
                breach: under.iter().any(|t| is_breach(t, slo)),
                interrupted: under.iter().any(|t| !t.prefilled_meanwhile.is_empty()),
                drafted: under.iter().all(|t| t.accepted_draft == Some(true)),
                batch: under.iter().filter_map(|t| t.batch_size).max(),
                waiting: under.iter().filter_map(|t| t.waiting).max(),
            })
        })
        .collect()
}

/// A token that came later than its SLO allows.
pub fn is_breach(t: &TokenView, slo: Slo) -> bool {
    let limit = if t.index == 0 {
        slo.ttft_ms
    } else {
        slo.tpot_ms
    };
    t.latency_ms.is_some_and(|l| l > limit)
}

/// Whether the gaps between tokens span so much that a linear scale would flatten all but the
/// slowest: the slowest more than 20 × the median.
pub fn wants_log(tokens: &[TokenView]) -> bool {
    let mut gaps: Vec<f64> = tokens.iter().skip(1).filter_map(|t| t.latency_ms).collect();
    if gaps.len() < 3 {
        return false;
    }
    gaps.sort_by(f64::total_cmp);
    let median = gaps[gaps.len() / 2];
    gaps[gaps.len() - 1] > 20.0 * median.max(1e-3)
}

/// Latency to a fraction of the plot's height.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct YScale {
    pub log: bool,
    pub lo_ms: f64,
    pub hi_ms: f64,
}

impl YScale {
    /// Linear: up to the slowest gap between tokens (the first token's wait, usually much longer,
    /// is clipped), at least 1.5 × the SLO so the SLO line is always in view. Log: everything.
    pub fn new(tokens: &[TokenView], slo_ms: f64, log: bool) -> Self {
        let latencies = || tokens.iter().filter_map(|t| t.latency_ms);
        let gaps_max = tokens
            .iter()
            .skip(1)
            .filter_map(|t| t.latency_ms)
            .fold(0.0, f64::max);
        if log {
            let lo = latencies()
                .filter(|&l| l > 0.0)
                .fold(f64::INFINITY, f64::min);
            let hi = latencies().fold(slo_ms * 1.5, f64::max);
            Self {
                log,
                lo_ms: if lo.is_finite() {
                    (lo * 0.8).min(slo_ms / 4.0)
                } else {
                    0.1
                },
                hi_ms: hi * 1.2,
            }
        } else {
            Self {
                log,
                lo_ms: 0.0,
                hi_ms: gaps_max.max(slo_ms * 1.5) * 1.05,
            }
        }
    }

    /// 0 at the bottom, 1 at the top, clamped.
    pub fn frac(&self, ms: f64) -> f64 {
        let f = if self.log {
            let lo = self.lo_ms.max(1e-6).ln();
            (ms.max(1e-6).ln() - lo) / (self.hi_ms.ln() - lo)
        } else {
            ms / self.hi_ms
        };
        f.clamp(0.0, 1.0)
    }

    pub fn clipped(&self, ms: f64) -> bool {
        ms > self.hi_ms
    }

    /// A few round values for the axis.
    pub fn ticks(&self) -> Vec<f64> {
        if self.log {
            (-3..=7)
                .map(|k| 10f64.powi(k))
                .filter(|v| *v >= self.lo_ms && *v <= self.hi_ms)
                .collect()
        } else {
            let raw = self.hi_ms / 5.0;
            let mag = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0]
                .into_iter()
                .map(|m| m * mag)
                .find(|s| *s >= raw)
                .unwrap_or(mag * 10.0);
            (1..)
                .map(|k| f64::from(k) * step)
                .take_while(|v| *v <= self.hi_ms)
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLO: Slo = Slo {
        ttft_ms: 2000.0,
        tpot_ms: 50.0,
    };

    fn tokens(latencies: &[f64]) -> Vec<TokenView> {
        latencies
            .iter()
            .enumerate()
            .map(|(i, &l)| TokenView {
                index: i as u32,
                latency_ms: Some(l),
                ..TokenView::default()
            })
            .collect()
    }

    #[test]
    fn few_tokens_get_a_column_each() {
        let c = columns(&tokens(&[100.0, 10.0, 80.0, 12.0]), 400.0, SLO);
        assert_eq!(c.len(), 4);
        assert_eq!((c[1].x0, c[1].x1), (100.0, 200.0));
        assert!(!c[0].breach, "the first token answers to the TTFT SLO");
        let late_first = columns(&tokens(&[2500.0, 10.0]), 400.0, SLO);
        assert!(late_first[0].breach);
        assert!(c[2].breach && !c[3].breach);
    }

    #[test]
    fn many_tokens_show_the_slowest_under_each_pixel() {
        let mut l = vec![10.0; 8000];
        l[4321] = 900.0;
        let c = columns(&tokens(&l), 1000.0, SLO);
        assert_eq!(c.len(), 1000);
        let slow = c.iter().find(|c| c.breach).unwrap();
        assert_eq!(slow.token, 4321);
        assert_eq!(slow.latency_ms, 900.0);
        assert_eq!(c.iter().filter(|c| c.breach).count(), 1);
    }

    #[test]
    fn layout_maps_both_ways() {
        let l = Layout {
            n: 8000,
            width: 1000.0,
        };
        assert_eq!(l.index(l.x(4321) + 0.01), 4321);
        assert_eq!(l.index(-5.0), 0);
        assert_eq!(l.index(5000.0), 7999);
    }

    #[test]
    fn linear_scale_keeps_the_slo_in_view_and_clips_the_first_token() {
        let t = tokens(&[2000.0, 10.0, 12.0]);
        let s = YScale::new(&t, 50.0, false);
        assert!(s.hi_ms >= 75.0 && s.hi_ms < 100.0);
        assert!(s.clipped(2000.0));
        assert_eq!(s.frac(2000.0), 1.0);
        let log = YScale::new(&t, 50.0, true);
        assert!(!log.clipped(2000.0));
        assert!(log.frac(10.0) < log.frac(12.0));
    }

    #[test]
    fn one_huge_stall_among_steady_tokens_asks_for_a_log_scale() {
        let mut l = vec![7.0; 100];
        assert!(!wants_log(&tokens(&l)));
        l[41] = 6700.0;
        assert!(wants_log(&tokens(&l)));
        l[0] = 1e6;
        l[41] = 7.0;
        assert!(!wants_log(&tokens(&l)), "the first token does not count");
    }

    #[test]
    fn ticks_are_round() {
        let s = YScale {
            log: false,
            lo_ms: 0.0,
            hi_ms: 95.0,
        };
        assert_eq!(s.ticks(), vec![20.0, 40.0, 60.0, 80.0]);
        let g = YScale {
            log: true,
            lo_ms: 0.5,
            hi_ms: 8000.0,
        };
        assert_eq!(g.ticks(), vec![1.0, 10.0, 100.0, 1000.0]);
    }
}
