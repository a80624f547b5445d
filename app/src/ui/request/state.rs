//! The request page's view state, all of it in the URL: which part of a request id shared by
//! several instances, the selected token, the brushed range, log scale, visible whitespace.

use crate::query::build;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestQuery {
    pub instance: String,
    /// The selected token (its index).
    pub tok: Option<u32>,
    /// The brushed tokens, first and last (inclusive).
    pub range: Option<(u32, u32)>,
    /// Log scale asked for (`log=1`) or refused (`log=0`); unset, the page decides.
    pub log: Option<bool>,
    /// Whitespace drawn (`␣ ↵`).
    pub ws: bool,
}

impl RequestQuery {
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let range = get("range").and_then(|r| {
            let (a, b) = r.split_once('-')?;
            let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
            Some((a.min(b), a.max(b)))
        });
        Self {
            instance: get("instance").unwrap_or_default(),
            tok: get("tok").and_then(|t| t.parse().ok()),
            range,
            log: get("log").and_then(|v| match v.as_str() {
                "1" => Some(true),
                "0" => Some(false),
                _ => None,
            }),
            ws: get("ws").is_some_and(|v| v == "1"),
        }
    }

    /// `?instance=…&tok=…`, only what differs from the default.
    pub fn query(&self) -> String {
        let flag = |b: bool| if b { "1".to_string() } else { String::new() };
        build(&[
            ("instance", self.instance.clone()),
            ("tok", self.tok.map(|t| t.to_string()).unwrap_or_default()),
            (
                "range",
                self.range
                    .map(|(a, b)| format!("{a}-{b}"))
                    .unwrap_or_default(),
            ),
            (
                "log",
                self.log
                    .map(|l| if l { "1" } else { "0" }.to_string())
                    .unwrap_or_default(),
            ),
            ("ws", flag(self.ws)),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_round_trips() {
        let q = RequestQuery {
            instance: "gpu 7".into(),
            tok: Some(41),
            range: Some((10, 50)),
            log: Some(true),
            ws: false,
        };
        let s = q.query();
        assert_eq!(s, "?instance=gpu%207&tok=41&range=10-50&log=1");
        let pairs = crate::query::parse(&s);
        let back =
            RequestQuery::from_lookup(|k| pairs.iter().find(|p| p.0 == k).map(|p| p.1.clone()));
        assert_eq!(back, q);
    }

    #[test]
    fn bad_values_are_ignored_and_ranges_ordered() {
        let q = RequestQuery::from_lookup(|k| match k {
            "tok" => Some("x".into()),
            "range" => Some("50-10".into()),
            _ => None,
        });
        assert_eq!(q.tok, None);
        assert_eq!(q.range, Some((10, 50)));
    }
}
