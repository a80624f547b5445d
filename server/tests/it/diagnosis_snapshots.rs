//! Snapshots of the diagnoses of every scenario's victims and controls, computed directly from
//! the simulator's output (no database): a change in wording or attribution shows up as a diff,
//! one `server/tests/snapshots/<scenario>.snap` per scenario (insta: `cargo insta review`, or
//! `INSTA_UPDATE=always` to rewrite, then read the diff).

use tokenscope_core::analysis::diagnosis::{Context, OtherRequest, Thresholds, diagnose};
use tokenscope_core::model::Architecture;
use tokenscope_sim as sim;

const T0: i64 = 1_796_022_000_000_000_000;

#[test]
fn scenario_diagnoses_match_their_snapshot() {
    for name in sim::scenarios::NAMES {
        let mut out = serde_json::Map::new();
        let s = sim::scenarios::build(name, T0, 1).unwrap();
        let t = &s.truth;
        for (instance, ids) in [
            (&t.instance, &t.victims),
            (&t.control_instance, &t.controls),
        ] {
            let run = s
                .runs
                .iter()
                .find(|r| &r.resource.instance_id == instance)
                .unwrap();
            let others: Vec<OtherRequest> =
                run.output.requests.iter().map(OtherRequest::of).collect();
            // As the server diagnoses it: the model known by the name the engine reports.
            let model = Architecture::known(&run.resource.model);
            for id in ids {
                let r = run
                    .output
                    .requests
                    .iter()
                    .find(|r| &r.request_id == id)
                    .unwrap();
                let native = diagnose(
                    r,
                    &Context::new(&run.output.iterations, &others, model),
                    &Thresholds::default(),
                );
                let spans_only = diagnose(
                    r,
                    &Context::new(&[], &others, model),
                    &Thresholds::default(),
                );
                out.insert(
                    id.clone(),
                    serde_json::json!({ "native": native, "spans_only": spans_only }),
                );
            }
        }
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots"),
            prepend_module_to_snapshot => false,
        }, {
            insta::assert_json_snapshot!(name.to_string(), out);
        });
    }
}
