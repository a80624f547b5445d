//! What the slow requests have in common: each attribute value's share among the slow requests
//! against its share among the rest, ranked by how surely it is over-represented (the lower end
//! of a 95 % interval of the difference, Newcombe's method from two Wilson intervals), so a value
//! seen in three requests does not outrank one that explains half the slow set.

use serde::{Deserialize, Serialize};

/// Prompt-length buckets start at these token counts (the first is below 256).
pub const PROMPT_EDGES: [i32; 4] = [256, 1024, 4096, 16_384];
/// Batch-size buckets (the largest batch in the second the request arrived) start here.
pub const BATCH_EDGES: [i32; 3] = [9, 33, 129];

/// What a request is described by, as the store tallies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Attribute {
    Instance,
    EngineVersion,
    Model,
    Tenant,
    Adapter,
    Priority,
    /// Prompt tokens, bucketed by [`PROMPT_EDGES`].
    PromptLength,
    /// The prefix cache's share of the prompt: none, under half, half or more.
    CachedShare,
    /// The prompt's first KV block hash: requests that start alike (a system prompt, a template).
    PromptStart,
    /// The largest batch in the second the request arrived, bucketed by [`BATCH_EDGES`].
    BatchAtArrival,
    /// Hour of arrival, UTC.
    Hour,
}

impl Attribute {
    pub const ALL: [Attribute; 11] = [
        Attribute::Instance,
        Attribute::EngineVersion,
        Attribute::Model,
        Attribute::Tenant,
        Attribute::Adapter,
        Attribute::Priority,
        Attribute::PromptLength,
        Attribute::CachedShare,
        Attribute::PromptStart,
        Attribute::BatchAtArrival,
        Attribute::Hour,
    ];

    /// The store's name for it (`instance`, `engine_version`, …).
    pub fn key(self) -> &'static str {
        match self {
            Attribute::Instance => "instance",
            Attribute::EngineVersion => "engine_version",
            Attribute::Model => "model",
            Attribute::Tenant => "tenant",
            Attribute::Adapter => "adapter",
            Attribute::Priority => "priority",
            Attribute::PromptLength => "prompt_length",
            Attribute::CachedShare => "cached_share",
            Attribute::PromptStart => "prompt_start",
            Attribute::BatchAtArrival => "batch_at_arrival",
            Attribute::Hour => "hour",
        }
    }

    pub fn from_key(key: &str) -> Option<Attribute> {
        Attribute::ALL.into_iter().find(|a| a.key() == key)
    }

    /// How a page names it.
    pub fn label(self) -> &'static str {
        match self {
            Attribute::Instance => "instance",
            Attribute::EngineVersion => "engine version",
            Attribute::Model => "model",
            Attribute::Tenant => "tenant",
            Attribute::Adapter => "adapter",
            Attribute::Priority => "priority",
            Attribute::PromptLength => "prompt length",
            Attribute::CachedShare => "cached share of prompt",
            Attribute::PromptStart => "prompt start (first KV block)",
            Attribute::BatchAtArrival => "batch at arrival",
            Attribute::Hour => "hour (UTC)",
        }
    }

    /// The explorer URL's parameter that selects a value of this attribute, if it has one.
    pub fn filter_param(self) -> Option<&'static str> {
        match self {
            Attribute::Instance => Some("instance"),
            Attribute::EngineVersion => Some("version"),
            Attribute::Model => Some("model"),
            Attribute::Tenant => Some("tenant"),
            Attribute::Adapter => Some("adapter"),
            Attribute::Priority => Some("priority"),
            Attribute::PromptStart => Some("fingerprint"),
            _ => None,
        }
    }

    /// The explorer's parameters (the request list's too) that select `value` (as stored) of
    /// this attribute; empty when none can.
    pub fn filter(self, value: &str) -> Vec<(&'static str, String)> {
        let bucket = |edges: &[i32], min: &'static str, max: &'static str| {
            let Ok(k) = value.parse::<usize>() else {
                return Vec::new();
            };
            let k = k.min(edges.len());
            let lo = if k == 0 { 0 } else { edges[k - 1] };
            let mut v = vec![(min, lo.to_string())];
            if let Some(hi) = edges.get(k) {
                v.push((max, hi.to_string()));
            }
            v
        };
        match self {
            Attribute::PromptLength => bucket(&PROMPT_EDGES, "prompt_min", "prompt_max"),
            Attribute::BatchAtArrival => bucket(&BATCH_EDGES, "batch_min", "batch_max"),
            Attribute::CachedShare => match value {
                "0" => vec![("cached", "none".into())],
                "1" => vec![("cached", "under_half".into())],
                "2" => vec![("cached", "half_or_more".into())],
                _ => Vec::new(),
            },
            Attribute::Hour => vec![("hour", value.to_string())],
            other => other
                .filter_param()
                .map(|p| vec![(p, value.to_string())])
                .unwrap_or_default(),
        }
    }

    /// A stored value as people read it: bucket numbers become ranges, nothing becomes "none".
    pub fn show(self, value: Option<&str>) -> String {
        let Some(v) = value else {
            return match self {
                Attribute::BatchAtArrival => "no steps recorded".into(),
                Attribute::PromptStart => "not reported".into(),
                _ => "none".into(),
            };
        };
        let k: Option<usize> = v.parse().ok();
        match (self, k) {
            (Attribute::PromptLength, Some(k)) => range(&PROMPT_EDGES, k, "tokens"),
            (Attribute::BatchAtArrival, Some(k)) => range(&BATCH_EDGES, k, "requests"),
            (Attribute::CachedShare, Some(0)) => "nothing cached".into(),
            (Attribute::CachedShare, Some(1)) => "under half cached".into(),
            (Attribute::CachedShare, Some(_)) => "half or more cached".into(),
            (Attribute::Hour, Some(h)) => format!("{h:02}:00–{:02}:00", (h + 1) % 24),
            _ => v.to_string(),
        }
    }
}

/// Bucket `k` of `width_bucket(x, edges)` (0: below the first edge) as a range.
fn range(edges: &[i32], k: usize, unit: &str) -> String {
    match k {
        0 => format!("under {} {unit}", edges[0]),
        k if k >= edges.len() => format!("{}+ {unit}", edges[edges.len() - 1]),
        k => format!("{}–{} {unit}", edges[k - 1], edges[k] - 1),
    }
}

/// How many requests with one attribute value there are, and how many of them are slow.
#[derive(Clone, Debug, PartialEq)]
pub struct Tally {
    pub attribute: Attribute,
    /// As stored (bucket numbers for bucketed attributes); `None`: the request has none.
    pub value: Option<String>,
    pub slow: u64,
    pub all: u64,
}

/// One attribute value that separates the slow requests from the rest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Separator {
    pub attribute: Attribute,
    /// As the explorer filters by it (`None`: the requests lack it).
    pub value: Option<String>,
    /// As people read it.
    pub label: String,
    /// Slow requests with it, and the rest with it.
    pub slow: u64,
    pub rest: u64,
    /// Its share of the slow set and of the rest.
    pub slow_share: f64,
    pub rest_share: f64,
    /// How many times more often it occurs among the slow (`None`: never among the rest).
    pub lift: Option<f64>,
    /// 95 % interval of `slow_share - rest_share`: ranked by `low`, shown only when above zero.
    pub low: f64,
    pub high: f64,
}

/// The slow set of a window against the rest, and what separates them, most surely first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlowSet {
    /// What made a request slow, as a sentence ("TTFT over 500 ms or TPOT over 50 ms").
    pub definition: String,
    pub slow: u64,
    pub rest: u64,
    pub separators: Vec<Separator>,
}

/// z for a two-sided 95 % interval.
const Z: f64 = 1.959_964;

/// Wilson score interval of `k` successes in `n`.
fn wilson(k: u64, n: u64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z * Z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Newcombe's interval (method 10) of the difference of two proportions `a/n - b/m`.
pub fn difference_interval(a: u64, n: u64, b: u64, m: u64) -> (f64, f64) {
    let p1 = if n == 0 { 0.0 } else { a as f64 / n as f64 };
    let p2 = if m == 0 { 0.0 } else { b as f64 / m as f64 };
    let (l1, u1) = wilson(a, n);
    let (l2, u2) = wilson(b, m);
    let d = p1 - p2;
    (
        d - ((p1 - l1).powi(2) + (u2 - p2).powi(2)).sqrt(),
        d + ((u1 - p1).powi(2) + (p2 - l2).powi(2)).sqrt(),
    )
}

/// At most this many separators are returned.
pub const MAX_SEPARATORS: usize = 20;

/// Ranks the tallies of a window with `slow` slow requests out of `all`: the values surely more
/// common among the slow than among the rest (interval above zero), most surely first.
pub fn rank(definition: String, slow: u64, all: u64, tallies: &[Tally]) -> SlowSet {
    let rest = all.saturating_sub(slow);
    let mut separators: Vec<Separator> = tallies
        .iter()
        .filter_map(|t| {
            let (s, r) = (t.slow, t.all.saturating_sub(t.slow));
            let (low, high) = difference_interval(s, slow, r, rest);
            let slow_share = if slow == 0 {
                0.0
            } else {
                s as f64 / slow as f64
            };
            let rest_share = if rest == 0 {
                0.0
            } else {
                r as f64 / rest as f64
            };
            (low > 0.0).then(|| Separator {
                attribute: t.attribute,
                value: t.value.clone(),
                label: t.attribute.show(t.value.as_deref()),
                slow: s,
                rest: r,
                slow_share,
                rest_share,
                lift: (rest_share > 0.0).then(|| slow_share / rest_share),
                low,
                high,
            })
        })
        .collect();
    separators.sort_by(|a, b| {
        b.low
            .total_cmp(&a.low)
            .then(b.slow.cmp(&a.slow))
            .then(a.attribute.cmp(&b.attribute))
            .then(a.value.cmp(&b.value))
    });
    separators.truncate(MAX_SEPARATORS);
    SlowSet {
        definition,
        slow,
        rest,
        separators,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bucket_names_the_filter_that_selects_it() {
        let f = |a: Attribute, v: &str| a.filter(v);
        let p = |pairs: &[(&'static str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (*k, v.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            f(Attribute::PromptLength, "0"),
            p(&[("prompt_min", "0"), ("prompt_max", "256")])
        );
        assert_eq!(
            f(Attribute::PromptLength, "2"),
            p(&[("prompt_min", "1024"), ("prompt_max", "4096")])
        );
        assert_eq!(
            f(Attribute::PromptLength, "4"),
            p(&[("prompt_min", "16384")])
        );
        assert_eq!(
            f(Attribute::BatchAtArrival, "3"),
            p(&[("batch_min", "129")])
        );
        assert_eq!(
            f(Attribute::CachedShare, "1"),
            p(&[("cached", "under_half")])
        );
        assert_eq!(f(Attribute::Hour, "7"), p(&[("hour", "7")]));
        assert_eq!(
            f(Attribute::EngineVersion, "0.11"),
            p(&[("version", "0.11")])
        );
        assert_eq!(
            f(Attribute::PromptStart, "00ff00ff00ff00ff"),
            p(&[("fingerprint", "00ff00ff00ff00ff")])
        );
        assert!(f(Attribute::PromptLength, "x").is_empty());
    }

    fn tally(attribute: Attribute, value: &str, slow: u64, all: u64) -> Tally {
        Tally {
            attribute,
            value: Some(value.into()),
            slow,
            all,
        }
    }

    #[test]
    fn newcombes_interval_matches_the_published_example() {
        // Newcombe (1998), table II, example (a): 56/70 against 48/80: 0.0524 to 0.3339.
        let (low, high) = difference_interval(56, 70, 48, 80);
        assert!((low - 0.0524).abs() < 5e-4, "{low}");
        assert!((high - 0.3339).abs() < 5e-4, "{high}");
    }

    #[test]
    fn a_value_that_explains_much_of_the_slow_set_outranks_a_rare_one_with_a_higher_ratio() {
        // 100 slow of 1,000. Version b: 80 of the slow, 100 of the rest (lift 7.2). One tenant:
        // 3 slow, 1 of the rest (lift 27) – too few to be sure of much.
        let t = [
            tally(Attribute::EngineVersion, "b", 80, 180),
            tally(Attribute::EngineVersion, "a", 20, 820),
            tally(Attribute::Tenant, "tiny", 3, 4),
        ];
        let s = rank("TPOT over 50 ms".into(), 100, 1000, &t);
        assert_eq!(s.rest, 900);
        assert_eq!(s.separators[0].value.as_deref(), Some("b"));
        assert!(
            s.separators.iter().all(|x| x.value.as_deref() != Some("a")),
            "under-represented values are not listed"
        );
        let tiny = s
            .separators
            .iter()
            .find(|x| x.attribute == Attribute::Tenant);
        assert!(tiny.is_none_or(|x| x.low < s.separators[0].low));
        assert!((s.separators[0].lift.unwrap() - 0.8 / (100.0 / 900.0)).abs() < 1e-9);
    }

    #[test]
    fn buckets_read_as_ranges() {
        assert_eq!(Attribute::PromptLength.show(Some("0")), "under 256 tokens");
        assert_eq!(Attribute::PromptLength.show(Some("2")), "1024–4095 tokens");
        assert_eq!(Attribute::PromptLength.show(Some("4")), "16384+ tokens");
        assert_eq!(Attribute::BatchAtArrival.show(None), "no steps recorded");
        assert_eq!(Attribute::Hour.show(Some("23")), "23:00–00:00");
        assert_eq!(Attribute::Tenant.show(None), "none");
        for a in Attribute::ALL {
            assert_eq!(Attribute::from_key(a.key()), Some(a));
        }
    }
}
