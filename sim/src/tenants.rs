//! Who sent the simulated traffic: a tenant, and for some of them a LoRA adapter, drawn from the
//! request's id so that a request keeps them however the engine ran it (and the demo has slices
//! to filter by).

use tokenscope_core::model::RequestTrace;

/// Tenants and their share of the traffic, in percent.
pub const TENANTS: [(&str, u64); 4] = [
    ("acme", 50),
    ("globex", 25),
    ("initech", 15),
    ("umbrella", 10),
];

/// Sets `r`'s tenant, adapter and priority from its id: globex sends half its requests through
/// its `sql-lora` adapter, initech all of its through `support-lora`; umbrella runs at a lower
/// priority (1; vLLM schedules lower values first).
pub fn serve(r: &mut RequestTrace) {
    let h = fnv1a(r.request_id.as_bytes());
    let mut pick = h % 100;
    let tenant = TENANTS
        .iter()
        .find(|(_, share)| {
            let here = pick < *share;
            pick = pick.saturating_sub(*share);
            here
        })
        .map_or("acme", |(t, _)| t);
    let served = &mut r.served;
    served.tenant = Some(tenant.to_string());
    served.lora_adapter = match tenant {
        "globex" if (h >> 16).is_multiple_of(2) => Some("sql-lora".into()),
        "initech" => Some("support-lora".into()),
        _ => None,
    };
    served.priority = Some(if tenant == "umbrella" { 1 } else { 0 });
}

/// FNV-1a, 64 bits: stable across runs and platforms (the standard hasher is not).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_gets_a_tenant_in_about_its_share_and_keeps_it() {
        let mut counts = std::collections::HashMap::new();
        for k in 0..10_000 {
            let mut r = RequestTrace {
                request_id: format!("azure-conv-{k}"),
                ..RequestTrace::default()
            };
            serve(&mut r);
            let again = {
                let mut r2 = r.clone();
                serve(&mut r2);
                r2.served
            };
            assert_eq!(again, r.served, "drawn from the id alone");
            *counts.entry(r.served.tenant.unwrap()).or_insert(0u64) += 1;
        }
        for (tenant, share) in TENANTS {
            let got = counts[tenant] as f64 / 100.0;
            assert!(
                (got - share as f64).abs() < 3.0,
                "{tenant}: {got} % for {share} %"
            );
        }
    }
}
