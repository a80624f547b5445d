//! The waterfall's URL state: instance, the whole window (minimap), the zoomed window, the
//! selected request, compact packing and whether culprits are pulled next to the selection.

use leptos_router::params::ParamsMap;

use crate::model::Nanos;
use crate::query::{build, opt};

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct WaterfallQuery {
    pub instance: String,
    /// The whole window (the minimap's extent); `None`: the instance's last five minutes.
    pub from: Option<Nanos>,
    pub to: Option<Nanos>,
    /// The visible window, when zoomed into the whole one.
    pub zfrom: Option<Nanos>,
    pub zto: Option<Nanos>,
    /// The selected request.
    pub focus: Option<String>,
    pub compact: bool,
    /// Culprits of the selected request moved to the rows below it.
    pub pull: bool,
    /// What the rows are sorted by (`RowOrder` names); empty: arrival.
    pub sort: String,
}

impl WaterfallQuery {
    pub fn from_params(p: &ParamsMap) -> Self {
        Self::from_lookup(|k| p.get(k))
    }

    /// The view of a URL whose query value for a key is `get(key)`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let n = |k: &str| get(k).and_then(|v| v.parse().ok());
        let flag = |k: &str| matches!(get(k).as_deref(), Some("true" | "1"));
        Self {
            instance: get("instance").unwrap_or_default(),
            from: n("from"),
            to: n("to"),
            zfrom: n("zfrom"),
            zto: n("zto"),
            focus: get("focus").filter(|f| !f.is_empty()),
            compact: flag("compact"),
            pull: flag("pull"),
            sort: get("sort").unwrap_or_default(),
        }
    }

    pub fn href(&self) -> String {
        let flag = |b: bool| if b { "1".to_string() } else { String::new() };
        format!(
            "/waterfall{}",
            build(&[
                ("instance", self.instance.clone()),
                ("from", opt(self.from)),
                ("to", opt(self.to)),
                ("zfrom", opt(self.zfrom)),
                ("zto", opt(self.zto)),
                ("focus", self.focus.clone().unwrap_or_default()),
                ("compact", flag(self.compact)),
                ("pull", flag(self.pull)),
                ("sort", self.sort.clone()),
            ])
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_view_round_trips_through_its_url() {
        let q = WaterfallQuery {
            instance: "gpu 7".into(),
            from: Some(100),
            to: Some(900),
            zfrom: Some(200),
            zto: Some(300),
            focus: Some("req/1".into()),
            compact: true,
            pull: false,
            sort: "tpot".into(),
        };
        let href = q.href();
        assert_eq!(
            href,
            "/waterfall?instance=gpu%207&from=100&to=900&zfrom=200&zto=300&focus=req%2F1&compact=1&sort=tpot"
        );
        let pairs = crate::query::parse(href.split_once('?').unwrap().1);
        let lookup = |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.clone());
        assert_eq!(WaterfallQuery::from_lookup(lookup), q);
    }
}
