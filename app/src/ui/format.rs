//! Human formatting of numbers for the UI: units, sensible precision, thousands separators.

/// `54.8 ms`, `6.82 s`, `812 µs`.
pub fn duration_ms(ms: f64) -> String {
    if ms == 0.0 {
        "0 ms".into()
    } else if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{:.0} µs", ms * 1000.0)
    }
}

/// `0.5 s`, `12 s`, `3.4 min`, `2.1 h` of GPU time.
pub fn gpu_time(s: f64) -> String {
    if s >= 7200.0 {
        format!("{:.1} h", s / 3600.0)
    } else if s >= 120.0 {
        format!("{:.1} min", s / 60.0)
    } else if s >= 10.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.2} s")
    }
}

/// `96,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// An estimated count as people say one: `about 1.2 M`, `about 87,000`.
pub fn about(n: u64) -> String {
    if n >= 1_000_000 {
        format!("about {:.1} M", n as f64 / 1e6)
    } else {
        // Two significant digits: the estimate is no finer.
        let step = 10u64.pow((n.max(1).ilog10()).saturating_sub(1));
        format!("about {}", thousands((n + step / 2) / step * step))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_are_rounded_and_say_so() {
        assert_eq!(about(1_234_567), "about 1.2 M");
        assert_eq!(about(10_450_000), "about 10.4 M");
        assert_eq!(about(86_512), "about 87,000");
        assert_eq!(about(50_001), "about 50,000");
    }

    #[test]
    fn durations_have_units_and_sensible_precision() {
        assert_eq!(duration_ms(54.83), "54.8 ms");
        assert_eq!(duration_ms(6820.0), "6.82 s");
        assert_eq!(duration_ms(0.812), "812 µs");
        assert_eq!(duration_ms(250.4), "250 ms");
        assert_eq!(duration_ms(0.0), "0 ms");
    }

    #[test]
    fn gpu_time_reads_in_its_unit() {
        assert_eq!(gpu_time(0.5), "0.50 s");
        assert_eq!(gpu_time(42.0), "42 s");
        assert_eq!(gpu_time(204.0), "3.4 min");
        assert_eq!(gpu_time(7560.0), "2.1 h");
    }

    #[test]
    fn thousands_are_separated() {
        assert_eq!(thousands(96_000), "96,000");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
