//! Instants for people: clock times in the viewer's zone (named), and steps for time axes.
//! Pure; the browser's zone is read once in `detect` (hydrate builds only).

use crate::model::Nanos;
use crate::model::calendar::{civil_from_days, days_from_civil};

pub use crate::model::{HOUR, MINUTE, MS, SECOND};

/// The zone times are shown in. Server-rendered pages use UTC; the browser switches to its own
/// zone after hydration, and every time label says which zone it is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    /// Minutes east of UTC.
    pub offset_min: i32,
    /// An IANA name such as `Europe/Berlin`, or `UTC`.
    pub name: String,
}

impl Default for Zone {
    fn default() -> Self {
        Self {
            offset_min: 0,
            name: "UTC".into(),
        }
    }
}

impl Zone {
    /// `Europe/Berlin, UTC+01:00`; plain `UTC` for UTC.
    pub fn label(&self) -> String {
        if self.offset_min == 0 && self.name == "UTC" {
            return "UTC".into();
        }
        let sign = if self.offset_min < 0 { '−' } else { '+' };
        let m = self.offset_min.unsigned_abs();
        format!("{}, UTC{sign}{:02}:{:02}", self.name, m / 60, m % 60)
    }

    /// The browser's zone now.
    #[cfg(feature = "hydrate")]
    pub fn detect() -> Self {
        let offset_min = -(js_sys::Date::new_0().get_timezone_offset() as i32);
        let opts = js_sys::Intl::DateTimeFormat::new(&js_sys::Array::new(), &js_sys::Object::new())
            .resolved_options();
        let name = js_sys::Reflect::get(&opts, &"timeZone".into())
            .ok()
            .and_then(|v| v.as_string())
            .unwrap_or_else(|| "local".into());
        Self { offset_min, name }
    }
}

/// The current instant: the browser's clock on the page, the server's while it renders.
pub fn now_ns() -> Nanos {
    #[cfg(feature = "hydrate")]
    {
        (js_sys::Date::now() * 1e6) as Nanos
    }
    #[cfg(not(feature = "hydrate"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as Nanos)
    }
}

/// Civil date and time of `ns` shifted by the zone: (year, month, day, hour, minute, second,
/// nanoseconds).
fn civil(ns: Nanos, zone: &Zone) -> (i64, u32, u32, u32, u32, u32, u32) {
    let local = ns + Nanos::from(zone.offset_min) * MINUTE;
    let secs = local.div_euclid(SECOND);
    let sub = local.rem_euclid(SECOND) as u32;
    let (days, tod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400) as u32);
    let (year, month, day) = civil_from_days(days);
    (year, month, day, tod / 3600, tod / 60 % 60, tod % 60, sub)
}

/// `14:02:31`, with milliseconds (`14:02:31.250`) or microseconds when `step` is finer than a
/// second or a millisecond: enough digits that neighbouring ticks differ.
pub fn clock(ns: Nanos, zone: &Zone, step: Nanos) -> String {
    let (_, _, _, h, m, s, sub) = civil(ns, zone);
    if step >= SECOND {
        format!("{h:02}:{m:02}:{s:02}")
    } else if step >= MS {
        format!("{h:02}:{m:02}:{s:02}.{:03}", sub / 1_000_000)
    } else {
        format!("{h:02}:{m:02}:{s:02}.{:06}", sub / 1_000)
    }
}

/// `2026-11-30 14:02:31`.
pub fn date_time(ns: Nanos, zone: &Zone) -> String {
    let (y, mo, d, h, m, s, _) = civil(ns, zone);
    format!("{y}-{mo:02}-{d:02} {h:02}:{m:02}:{s:02}")
}

/// `2026-11-30T14:02` — the value of an `<input type="datetime-local">`.
pub fn input_value(ns: Nanos, zone: &Zone) -> String {
    let (y, mo, d, h, m, _, _) = civil(ns, zone);
    format!("{y}-{mo:02}-{d:02}T{h:02}:{m:02}")
}

/// The instant of an `<input type="datetime-local">` value (`2026-11-30T14:02[:SS]`) read in
/// `zone`; `None` when it is not one.
pub fn parse_input(v: &str, zone: &Zone) -> Option<Nanos> {
    let (date, time) = v.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, mo, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':').map(|x| x.parse::<f64>().ok());
    let (h, mi) = (t.next()??, t.next()??);
    let s = t.next().flatten().unwrap_or(0.0);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&day) || h >= 24.0 || mi >= 60.0 {
        return None;
    }
    let days = days_from_civil(y, mo as u32, day as u32);
    let local = days * 86_400 * SECOND + ((h * 3600.0 + mi * 60.0 + s) * 1e9) as Nanos;
    Some(local - Nanos::from(zone.offset_min) * MINUTE)
}

/// A step for axis ticks from the 1–2–5 series (in ns up to seconds, then 1, 2, 5, 10, 15, 30
/// of minutes and hours) giving at most `max_ticks` ticks across `span`.
pub fn tick_step(span: Nanos, max_ticks: u32) -> Nanos {
    let want = (span / Nanos::from(max_ticks.max(1))).max(1);
    let mut step = 1;
    loop {
        for m in [1, 2, 5] {
            if step * m >= want {
                return step * m;
            }
        }
        if step * 10 >= SECOND {
            break;
        }
        step *= 10;
    }
    for s in [
        SECOND,
        2 * SECOND,
        5 * SECOND,
        10 * SECOND,
        15 * SECOND,
        30 * SECOND,
        MINUTE,
        2 * MINUTE,
        5 * MINUTE,
        10 * MINUTE,
        15 * MINUTE,
        30 * MINUTE,
        HOUR,
        2 * HOUR,
        3 * HOUR,
        6 * HOUR,
        12 * HOUR,
    ] {
        if s >= want {
            return s;
        }
    }
    (want + HOUR - 1) / HOUR * HOUR
}

/// Tick instants at multiples of `step` (in the zone's local time) inside `[from, to]`.
pub fn ticks(from: Nanos, to: Nanos, step: Nanos, zone: &Zone) -> Vec<Nanos> {
    let shift = Nanos::from(zone.offset_min) * MINUTE;
    let first = (from + shift).div_euclid(step) * step - shift;
    let first = if first < from { first + step } else { first };
    (0..)
        .map(|i| first + i * step)
        .take_while(|&t| t <= to)
        .collect()
}

/// `15 min`, `1 h`, `90 s`: a window's length, rounded for a label.
pub fn span(ns: Nanos) -> String {
    if ns >= 2 * HOUR {
        format!("{:.0} h", ns as f64 / HOUR as f64)
    } else if ns >= 2 * MINUTE {
        format!("{:.0} min", ns as f64 / MINUTE as f64)
    } else {
        super::format::duration_ms(ns as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Nanos = 1_796_022_000_000_000_000; // 2026-11-30T07:00:00Z

    #[test]
    fn clocks_in_a_named_zone() {
        let utc = Zone::default();
        let berlin = Zone {
            offset_min: 60,
            name: "Europe/Berlin".into(),
        };
        assert_eq!(date_time(T, &utc), "2026-11-30 07:00:00");
        assert_eq!(clock(T + 250 * MS, &berlin, SECOND), "08:00:00");
        assert_eq!(clock(T + 250 * MS, &berlin, 100 * MS), "08:00:00.250");
        assert_eq!(clock(T + 1_500, &utc, 1_000), "07:00:00.000001");
        assert_eq!(berlin.label(), "Europe/Berlin, UTC+01:00");
        assert_eq!(utc.label(), "UTC");
        assert_eq!(date_time(0, &utc), "1970-01-01 00:00:00");
    }

    #[test]
    fn input_values_round_trip() {
        let z = Zone {
            offset_min: -300,
            name: "America/New_York".into(),
        };
        let v = input_value(T, &z);
        assert_eq!(v, "2026-11-30T02:00");
        assert_eq!(parse_input(&v, &z), Some(T));
        assert_eq!(
            parse_input("2026-11-30T02:00:30", &z),
            Some(T + 30 * SECOND)
        );
        assert_eq!(parse_input("yesterday", &z), None);
        assert_eq!(parse_input("2026-13-01T02:00", &z), None);
    }

    #[test]
    fn ticks_are_round_and_few() {
        assert_eq!(tick_step(10 * MINUTE, 10), MINUTE);
        assert_eq!(tick_step(3 * SECOND, 10), 500 * MS);
        assert_eq!(tick_step(900, 10), 100);
        assert_eq!(tick_step(24 * HOUR, 8), 3 * HOUR);
        let z = Zone::default();
        let t = ticks(T + 1, T + 3 * MINUTE, MINUTE, &z);
        assert_eq!(t, vec![T + MINUTE, T + 2 * MINUTE, T + 3 * MINUTE]);
        assert_eq!(span(15 * MINUTE), "15 min");
        assert_eq!(span(6 * HOUR), "6 h");
    }
}
