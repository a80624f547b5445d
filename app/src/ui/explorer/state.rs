//! The explorer's state, which is its URL: filters, range, SLO filter, order, page, find.

use leptos_router::params::ParamsMap;

use crate::model::Nanos;
use crate::query::{build, opt};
use crate::ui::time::{HOUR, MINUTE};

pub const PAGE_ROWS: u32 = 100;
pub const DEFAULT_ORDER: &str = "tpot_desc";
/// Range presets, relative to now.
pub const PRESETS: [(&str, &str, Nanos); 4] = [
    ("15m", "15 min", 15 * MINUTE),
    ("1h", "1 h", HOUR),
    ("6h", "6 h", 6 * HOUR),
    ("24h", "24 h", 24 * HOUR),
];

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ExplorerQuery {
    /// Instances, comma-separated; empty = all.
    pub instance: String,
    pub model: String,
    pub engine: String,
    /// The engine's version (`0.11.0`).
    pub version: String,
    /// A preset of `PRESETS`, or empty.
    pub range: String,
    pub from: Option<Nanos>,
    pub to: Option<Nanos>,
    /// `breach`, `met` or empty.
    pub slo: String,
    /// A cause of the stored findings (`queue_backlog`), or empty.
    pub cause: String,
    /// Slices: the tenant, LoRA adapter and priority requests were served with; empty = any.
    pub tenant: String,
    pub adapter: String,
    pub priority: String,
    /// A prompt family: a block hash of the prompts' chains (16 hex digits), or empty.
    pub fingerprint: String,
    /// Buckets a slow-set separator filters by (as the API takes them): prompt tokens in
    /// [prompt_min, prompt_max), the cached share (`none`, `under_half`, `half_or_more`), the UTC
    /// hour of arrival, the batch at arrival in [batch_min, batch_max).
    pub prompt_min: String,
    pub prompt_max: String,
    pub cached: String,
    pub hour: String,
    pub batch_min: String,
    pub batch_max: String,
    pub order: String,
    pub page: u32,
    pub find: String,
    /// Whether the panel "what the slow requests have in common" is open.
    pub common: bool,
    /// Whether the prompt families panel is open.
    pub families: bool,
    /// What "slow" means in that panel: empty (an SLO broken), or `ttft`, `tpot`, `e2e` with a
    /// range in ms (`slow_max` empty: open above).
    pub slow: String,
    pub slow_min: String,
    pub slow_max: String,
}

impl ExplorerQuery {
    pub fn from_params(p: &ParamsMap) -> Self {
        Self::from_lookup(|k| p.get(k))
    }

    /// The view of a URL whose query value for a key is `get(key)`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Self {
        let s = |k: &str| get(k).unwrap_or_default();
        let n = |k: &str| get(k).and_then(|v| v.parse().ok());
        Self {
            instance: s("instance"),
            model: s("model"),
            engine: s("engine"),
            version: s("version"),
            range: s("range"),
            from: n("from"),
            to: n("to"),
            slo: s("slo"),
            cause: s("cause"),
            tenant: s("tenant"),
            adapter: s("adapter"),
            priority: s("priority"),
            fingerprint: s("fingerprint"),
            prompt_min: s("prompt_min"),
            prompt_max: s("prompt_max"),
            cached: s("cached"),
            hour: s("hour"),
            batch_min: s("batch_min"),
            batch_max: s("batch_max"),
            order: get("order").unwrap_or_else(|| DEFAULT_ORDER.into()),
            page: n("page").unwrap_or(0) as u32,
            find: s("find"),
            common: get("common").is_some_and(|v| v == "1"),
            families: get("families").is_some_and(|v| v == "1"),
            slow: s("slow"),
            slow_min: s("slow_min"),
            slow_max: s("slow_max"),
        }
    }

    /// This view's URL.
    pub fn href(&self) -> String {
        let order = if self.order == DEFAULT_ORDER {
            String::new()
        } else {
            self.order.clone()
        };
        format!(
            "/{}",
            build(&[
                ("instance", self.instance.clone()),
                ("model", self.model.clone()),
                ("engine", self.engine.clone()),
                ("version", self.version.clone()),
                ("range", self.range.clone()),
                ("from", opt(self.from)),
                ("to", opt(self.to)),
                ("slo", self.slo.clone()),
                ("cause", self.cause.clone()),
                ("tenant", self.tenant.clone()),
                ("adapter", self.adapter.clone()),
                ("priority", self.priority.clone()),
                ("fingerprint", self.fingerprint.clone()),
                ("prompt_min", self.prompt_min.clone()),
                ("prompt_max", self.prompt_max.clone()),
                ("cached", self.cached.clone()),
                ("hour", self.hour.clone()),
                ("batch_min", self.batch_min.clone()),
                ("batch_max", self.batch_max.clone()),
                ("order", order),
                ("page", opt((self.page > 0).then_some(self.page))),
                ("find", self.find.clone()),
                ("common", if self.common { "1" } else { "" }.into()),
                ("families", if self.families { "1" } else { "" }.into()),
                ("slow", self.slow.clone()),
                ("slow_min", self.slow_min.clone()),
                ("slow_max", self.slow_max.clone()),
            ])
        )
    }

    /// Sets the filter the URL names `key` (unknown keys change nothing).
    pub fn set(&mut self, key: &str, v: String) {
        let field = match key {
            "instance" => &mut self.instance,
            "version" => &mut self.version,
            "model" => &mut self.model,
            "tenant" => &mut self.tenant,
            "adapter" => &mut self.adapter,
            "priority" => &mut self.priority,
            "fingerprint" => &mut self.fingerprint,
            "prompt_min" => &mut self.prompt_min,
            "prompt_max" => &mut self.prompt_max,
            "cached" => &mut self.cached,
            "hour" => &mut self.hour,
            "batch_min" => &mut self.batch_min,
            "batch_max" => &mut self.batch_max,
            _ => return,
        };
        *field = v;
    }

    /// The bucket filters set (what a slow-set separator narrowed to), each with the view
    /// without it: `("prompt 1024–4095 tokens", view)`.
    pub fn buckets(&self) -> Vec<(String, Self)> {
        let range =
            |what: &str, lo: &str, hi: &str, unit: &str| match (lo.is_empty(), hi.is_empty()) {
                (true, true) => None,
                (false, true) => Some(format!("{what} {lo}+ {unit}")),
                (true, false) => Some(format!("{what} under {hi} {unit}")),
                (false, false) => Some(format!(
                    "{what} {lo}–{} {unit}",
                    hi.parse::<i64>()
                        .map_or(hi.to_string(), |h| (h - 1).to_string())
                )),
            };
        let mut out = Vec::new();
        if let Some(l) = range("prompt", &self.prompt_min, &self.prompt_max, "tokens") {
            out.push((
                l,
                self.with(|q| {
                    q.prompt_min.clear();
                    q.prompt_max.clear();
                }),
            ));
        }
        if !self.cached.is_empty() {
            out.push((
                format!("cached {}", self.cached.replace('_', " ")),
                self.with(|q| q.cached.clear()),
            ));
        }
        if !self.hour.is_empty() {
            out.push((
                format!("arrived {}:00–{}:59 UTC", self.hour, self.hour),
                self.with(|q| q.hour.clear()),
            ));
        }
        if let Some(l) = range(
            "batch at arrival",
            &self.batch_min,
            &self.batch_max,
            "requests",
        ) {
            out.push((
                l,
                self.with(|q| {
                    q.batch_min.clear();
                    q.batch_max.clear();
                }),
            ));
        }
        out
    }

    /// The same view changed by `f`, back on its first page.
    pub fn with(&self, f: impl FnOnce(&mut Self)) -> Self {
        let mut q = self.clone();
        q.page = 0;
        f(&mut q);
        q
    }

    /// The window to show: explicit, a preset before `now`, or `None` for the API's default
    /// (the hour before the newest matching request).
    pub fn window(&self, now: Nanos) -> (Option<Nanos>, Option<Nanos>) {
        if let Some(&(_, _, len)) = PRESETS.iter().find(|p| p.0 == self.range) {
            return (Some(now - len), Some(now));
        }
        (self.from, self.to)
    }

    /// Whether the view shows the latest requests (no fixed window, no find, its first page),
    /// so new data changes it.
    pub fn follows_now(&self) -> bool {
        self.from.is_none() && self.to.is_none() && self.find.is_empty() && self.page == 0
    }

    /// The instance, engine, version, model and slice filters as API parameters.
    pub fn filters(&self) -> Vec<(&'static str, String)> {
        vec![
            ("instance", self.instance.clone()),
            ("engine", self.engine.clone()),
            ("engine_version", self.version.clone()),
            ("model", self.model.clone()),
            ("tenant", self.tenant.clone()),
            ("adapter", self.adapter.clone()),
            ("priority", self.priority.clone()),
            ("fingerprint", self.fingerprint.clone()),
            ("prompt_min", self.prompt_min.clone()),
            ("prompt_max", self.prompt_max.clone()),
            ("cached", self.cached.clone()),
            ("hour", self.hour.clone()),
            ("batch_min", self.batch_min.clone()),
            ("batch_max", self.batch_max.clone()),
        ]
    }

    pub fn instances(&self) -> Vec<&str> {
        self.instance.split(',').filter(|s| !s.is_empty()).collect()
    }

    /// The view with `instance` added to, or removed from, the instance filter.
    pub fn toggle_instance(&self, instance: &str) -> Self {
        let mut list: Vec<&str> = self.instances();
        match list.iter().position(|&i| i == instance) {
            Some(at) => {
                list.remove(at);
            }
            None => list.push(instance),
        }
        let joined = list.join(",");
        self.with(|q| q.instance = joined)
    }

    /// The order after clicking a column's header: slowest (largest) first, then the reverse.
    pub fn sorted_by(&self, key: &str) -> Self {
        let desc = format!("{key}_desc");
        let order = if self.order == desc {
            format!("{key}_asc")
        } else {
            desc
        };
        self.with(|q| q.order = order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_round_trips_and_defaults_stay_out_of_it() {
        let q = ExplorerQuery {
            instance: "gpu-7,gpu-8".into(),
            range: "1h".into(),
            slo: "breach".into(),
            cause: "queue_backlog".into(),
            tenant: "acme </title><script>x</script>".into(),
            order: "e2e_asc".into(),
            page: 2,
            common: true,
            fingerprint: "07afe9d8e70901bd".into(),
            families: true,
            ..ExplorerQuery::default()
        };
        let href = q.href();
        assert_eq!(
            href,
            "/?instance=gpu-7%2Cgpu-8&range=1h&slo=breach&cause=queue_backlog&tenant=acme%20%3C%2Ftitle%3E%3Cscript%3Ex%3C%2Fscript%3E&fingerprint=07afe9d8e70901bd&order=e2e_asc&page=2&common=1&families=1"
        );
        let pairs = crate::query::parse(href.trim_start_matches('/'));
        let lookup = |k: &str| pairs.iter().find(|p| p.0 == k).map(|p| p.1.clone());
        assert_eq!(ExplorerQuery::from_lookup(lookup), q);
        let plain = ExplorerQuery::from_lookup(|_| None);
        assert_eq!(plain.order, DEFAULT_ORDER);
        assert_eq!(plain.href(), "/");
    }

    #[test]
    fn bucket_filters_read_as_chips_that_remove_them() {
        let mut q = ExplorerQuery::from_lookup(|_| None);
        for (k, v) in [
            ("prompt_min", "1024"),
            ("prompt_max", "4096"),
            ("cached", "under_half"),
            ("batch_min", "129"),
        ] {
            q.set(k, v.into());
        }
        let chips = q.buckets();
        let labels: Vec<&str> = chips.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(
            labels,
            [
                "prompt 1024–4095 tokens",
                "cached under half",
                "batch at arrival 129+ requests"
            ]
        );
        assert_eq!(chips[0].1.href(), "/?cached=under_half&batch_min=129");
        let round = crate::query::parse(q.href().trim_start_matches('/'));
        let lookup = |k: &str| round.iter().find(|p| p.0 == k).map(|p| p.1.clone());
        assert_eq!(ExplorerQuery::from_lookup(lookup), q);
    }

    #[test]
    fn sorting_toggles_and_filters_reset_the_page() {
        let q = ExplorerQuery {
            order: "tpot_desc".into(),
            page: 3,
            ..ExplorerQuery::default()
        };
        assert_eq!(q.sorted_by("tpot").order, "tpot_asc");
        assert_eq!(q.sorted_by("ttft").order, "ttft_desc");
        assert_eq!(q.sorted_by("ttft").page, 0);
        let two = q.toggle_instance("a").toggle_instance("b");
        assert_eq!(two.instance, "a,b");
        assert_eq!(two.toggle_instance("a").instance, "b");
        assert_eq!(
            q.with(|q| q.range = "6h".into()).window(10 * HOUR),
            (Some(4 * HOUR), Some(10 * HOUR))
        );
    }
}
