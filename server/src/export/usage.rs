//! GPU time as CSV (RFC 4180): the usage chart's data, one row per bucket and group with time
//! in it, so that summing a group's rows gives the table's figure.

use std::fmt::Write;

use tokenscope_core::api::Usage;
use tokenscope_core::model::calendar::rfc3339;

use super::csv::cell;

pub fn usage_csv(u: &Usage) -> String {
    let mut out = format!("start,start_ns,{},unstored,gpu_seconds\r\n", u.by);
    for b in &u.buckets {
        for (g, &s) in u.groups.iter().zip(&b.gpu_s) {
            if s == 0.0 {
                continue;
            }
            let _ = write!(out, "{},{},", rfc3339(b.start_ns), b.start_ns);
            cell(&mut out, g.key.as_deref().unwrap_or(""));
            let _ = write!(out, ",{},{:.6}\r\n", g.unstored, s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenscope_core::api::{UsageBucket, UsageGroup};

    #[test]
    fn rows_per_bucket_and_group_with_tenant_text_kept_as_text() {
        let g = |key: Option<&str>, unstored| UsageGroup {
            key: key.map(String::from),
            unstored,
            gpu_s: 0.0,
            share: 0.0,
            prefill_tokens: 0,
            decode_tokens: 0,
            estimated_s: 0.0,
        };
        let u = Usage {
            from_ns: 0,
            to_ns: 120_000_000_000,
            bucket_ns: 60_000_000_000,
            by: "tenant".into(),
            groups: vec![g(Some("=cmd|' /C calc'!A0"), false), g(None, true)],
            buckets: vec![
                UsageBucket {
                    start_ns: 0,
                    gpu_s: vec![1.5, 0.0],
                },
                UsageBucket {
                    start_ns: 60_000_000_000,
                    gpu_s: vec![0.25, 2.0],
                },
            ],
            busy_s: 3.75,
            estimated_s: 0.0,
        };
        insta::assert_snapshot!(usage_csv(&u).replace("\r\n", "\n"), @r#"
        start,start_ns,tenant,unstored,gpu_seconds
        1970-01-01T00:00:00.000Z,0,"'=cmd|' /C calc'!A0",false,1.500000
        1970-01-01T00:01:00.000Z,60000000000,"'=cmd|' /C calc'!A0",false,0.250000
        1970-01-01T00:01:00.000Z,60000000000,,true,2.000000
        "#);
    }
}
