//! The wall clock, read in one place: Unix nanoseconds, the model's time unit.

use tokenscope_core::model::Nanos;

pub fn now_ns() -> Nanos {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as Nanos
}
