//! The waterfall's one time scale: which window is visible at which width, and how zoom and pan
//! move it. Pure, so the interaction arithmetic is tested without a browser.

use crate::model::Nanos;

/// The narrowest window a user can zoom to: a microsecond shows single engine steps apart.
pub const MIN_SPAN: Nanos = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Viewport {
    pub from: Nanos,
    pub to: Nanos,
    /// Canvas pixels across the window.
    pub width: u32,
}

impl Viewport {
    pub fn new(from: Nanos, to: Nanos, width: u32) -> Self {
        Self {
            from,
            to: to.max(from + MIN_SPAN),
            width: width.max(1),
        }
    }

    pub fn span(&self) -> Nanos {
        self.to - self.from
    }

    /// Nanoseconds per pixel.
    pub fn px_ns(&self) -> f64 {
        self.span() as f64 / f64::from(self.width)
    }

    pub fn x(&self, t: Nanos) -> f64 {
        (t - self.from) as f64 / self.px_ns()
    }

    pub fn t(&self, x: f64) -> Nanos {
        self.from + (x * self.px_ns()) as Nanos
    }

    /// Zoomed by `factor` (< 1 zooms in) keeping the instant under `at_x` where it is.
    pub fn zoom(&self, factor: f64, at_x: f64) -> Self {
        let anchor = self.t(at_x);
        let span = ((self.span() as f64 * factor) as Nanos).max(MIN_SPAN);
        let from = anchor - (at_x / f64::from(self.width) * span as f64) as Nanos;
        Self::new(from, from + span, self.width)
    }

    /// Moved by `dx` pixels (positive moves the view later in time).
    pub fn pan(&self, dx: f64) -> Self {
        let d = (dx * self.px_ns()) as Nanos;
        Self::new(self.from + d, self.to + d, self.width)
    }

    /// The window `[from, to]` with a margin on both sides.
    pub fn fit(from: Nanos, to: Nanos, width: u32) -> Self {
        let pad = ((to - from) / 10).max(MIN_SPAN);
        Self::new(from - pad, to + pad, width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zoom_keeps_the_instant_under_the_cursor() {
        let v = Viewport::new(1_000_000, 2_000_000, 1000);
        let at = 250.0;
        let before = v.t(at);
        for factor in [0.5, 0.8, 1.25, 3.0] {
            let z = v.zoom(factor, at);
            assert!(
                (z.t(at) - before).abs() <= 2,
                "{factor}: {} vs {before}",
                z.t(at)
            );
            assert_eq!(z.span(), (1_000_000.0 * factor) as Nanos);
        }
        assert_eq!(
            v.zoom(1e-9, 0.0).span(),
            MIN_SPAN,
            "zoom stops at a microsecond"
        );
    }

    #[test]
    fn pan_moves_by_pixels_and_round_trips() {
        let v = Viewport::new(0, 1_000_000, 100);
        let p = v.pan(10.0);
        assert_eq!((p.from, p.to), (100_000, 1_100_000));
        assert_eq!(p.pan(-10.0), v);
        assert_eq!(v.x(500_000), 50.0);
        let f = Viewport::fit(1_000, 2_000, 100);
        assert!(f.from < 1_000 && f.to > 2_000);
    }
}
