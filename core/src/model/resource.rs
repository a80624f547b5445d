//! Who produced a trace: the engine instance (the OTLP "resource").

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Vllm,
    Sglang,
    Trtllm,
    #[default]
    Other,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
            EngineKind::Trtllm => "trtllm",
            EngineKind::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Vllm, Self::Sglang, Self::Trtllm, Self::Other]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// Role of an instance in PD-disaggregated serving.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    #[default]
    Colocated,
    Prefill,
    Decode,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Colocated => "colocated",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Colocated, Self::Prefill, Self::Decode]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    pub engine: EngineKind,
    pub engine_version: String,
    pub model: String,
    /// Fleet-unique identity of the engine instance; requests are keyed by it.
    pub instance_id: String,
    pub role: Role,
    pub host: String,
}
