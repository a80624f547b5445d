//! Command-line interface: flags, `TOKENSCOPE_*` environment variables, and the subcommands.

use std::net::SocketAddr;

use clap::{Args, Parser, Subcommand};

use crate::access::{AccessConfig, Grant};
use crate::error::Result;
use crate::ingest::Sink;
use crate::server::{self, Config};
use crate::store::Store;

#[derive(Debug, Parser)]
#[command(
    name = "tokenscope",
    version,
    about = "An engine microscope for LLM inference"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log lines as text, or as JSON objects (with each request's id, method and path).
    #[arg(
        long,
        global = true,
        env = "TOKENSCOPE_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: crate::logging::LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the UI, the query API and ingest (gRPC and HTTP).
    Serve(ServeArgs),
    /// Create or update the database schema, then exit.
    Migrate(DbArgs),
    /// Load a small demo dataset.
    Demo {
        #[command(flatten)]
        db: DbArgs,
        /// Only when the database has no requests yet.
        #[arg(long)]
        if_empty: bool,
    },
    /// Import a file: TensorRT-LLM perf metrics or perf-time-events logs, or OpenAI-style responses.
    Import {
        #[command(flatten)]
        db: DbArgs,
        /// The file's format; `auto` tells them apart by content.
        #[arg(long, value_enum, default_value = "auto")]
        format: crate::ingest::import::Format,
        /// Instance the requests ran on (default: trtllm-import / openai-import).
        #[arg(long)]
        instance: Option<String>,
        /// Model name, when the file does not say.
        #[arg(long)]
        model: Option<String>,
        /// Seconds to add to the file's times to make Unix time (TensorRT-LLM uses a steady clock;
        /// without this the latest token is anchored at the import time).
        #[arg(long, allow_hyphen_values = true)]
        clock_offset_s: Option<f64>,
        /// Store no decoded text (as `serve --redact-text`).
        #[arg(long, env = "TOKENSCOPE_REDACT_TEXT")]
        redact_text: bool,
        file: std::path::PathBuf,
    },
    /// Simulate an LLM serving engine and send its traces (or write them to a file).
    Sim(tokenscope_sim::SimArgs),
    /// Drop stored data older than N days (whole daily partitions), then exit.
    Retention {
        #[command(flatten)]
        db: DbArgs,
        /// Keep this many days of data.
        #[arg(long)]
        keep_days: u32,
    },
}

#[derive(Debug, Args)]
pub struct DbArgs {
    /// Postgres connection URL.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub db: DbArgs,
    /// Address of the HTTP server (UI, JSON API, JSON ingest).
    #[arg(long, env = "TOKENSCOPE_HTTP_ADDR", default_value = "127.0.0.1:3000")]
    pub http_addr: SocketAddr,
    /// Address of the gRPC ingest server.
    #[arg(long, env = "TOKENSCOPE_GRPC_ADDR", default_value = "127.0.0.1:4317")]
    pub grpc_addr: SocketAddr,
    /// Directory of the built browser app.
    #[arg(long, env = "TOKENSCOPE_SITE_ROOT", default_value = "target/site")]
    pub site_root: String,
    /// Largest accepted ingest message in MiB (token-level batches are large; gRPC's usual 4 MiB
    /// makes exporters drop whole batches).
    #[arg(long, env = "TOKENSCOPE_MAX_MESSAGE_MIB", default_value_t = 64)]
    pub max_message_mib: usize,
    /// Bytes of ingest request bodies held at once, in MiB, from arrival until stored (both
    /// ports together); past it, HTTP answers 429 with Retry-After and gRPC RESOURCE_EXHAUSTED.
    /// At least --max-message-mib.
    #[arg(long, env = "TOKENSCOPE_INGEST_BUDGET_MIB", default_value_t = 256)]
    pub ingest_budget_mib: usize,
    /// Store no decoded text: token and candidate texts are dropped at ingest; ids, times and
    /// probabilities are kept (the UI then shows token ids).
    #[arg(long, env = "TOKENSCOPE_REDACT_TEXT")]
    pub redact_text: bool,
    /// Drop data older than this many days (0 keeps everything).
    #[arg(long, env = "TOKENSCOPE_RETENTION_DAYS", default_value_t = 0)]
    pub retention_days: u32,
    /// Seconds the stage spans of a request wait for its root span (SGLang exports the root last)
    /// before the request is stored without it.
    #[arg(long, env = "TOKENSCOPE_ASSEMBLY_TIMEOUT_S", default_value_t = 30)]
    pub assembly_timeout_s: u64,
    /// File of ingest keys, one per line: "<name> <key> <instances>" (instances: ids, prefixes
    /// ending in *, or * for all). Senders then need `Authorization: Bearer <key>`.
    #[arg(long, env = "TOKENSCOPE_INGEST_KEYS")]
    pub ingest_keys: Option<std::path::PathBuf>,
    /// A shared token that readers (pages, query API) must present: browsers sign in at /login,
    /// API clients send `Authorization: Bearer <token>`. At least 16 characters.
    #[arg(long, env = "TOKENSCOPE_READ_TOKEN", hide_env_values = true)]
    pub read_token: Option<String>,
    /// Let in readers that a trusted reverse proxy names in this header (e.g. X-Forwarded-User).
    /// Only when the proxy is the sole way to reach the HTTP port.
    #[arg(long, env = "TOKENSCOPE_TRUSTED_USER_HEADER")]
    pub trusted_user_header: Option<String>,
    /// File of named read tokens, one per line: "<name> <token> <tenants>" (tenants
    /// comma-separated, or * for all). A reader with a scoped token sees only those tenants'
    /// requests; other tenants' requests that affected them appear under aliases.
    #[arg(long, env = "TOKENSCOPE_READ_TOKENS")]
    pub read_tokens: Option<std::path::PathBuf>,
    /// The header in which the trusted proxy names the user's tenants (comma-separated, * for
    /// all); a user without it sees no tenant's requests. Needs --trusted-user-header.
    #[arg(long, env = "TOKENSCOPE_TRUSTED_TENANTS_HEADER")]
    pub trusted_tenants_header: Option<String>,
    /// Incident pages, Markdown and preview images readable without read access (the link is the
    /// capability), so links unfurl in chat and tickets.
    #[arg(long, env = "TOKENSCOPE_PUBLIC_INCIDENTS")]
    pub public_incidents: bool,
    /// Seconds without new data around a request before its diagnosis is stored (late exports
    /// queue their neighbours again); 0 stores none (every diagnosis is then computed when
    /// asked).
    #[arg(long, env = "TOKENSCOPE_FINDINGS_SETTLE_S", default_value_t = 5.0)]
    pub findings_settle_s: f64,
    /// A span attribute that names whom a request was served for (e.g. the gateway's
    /// `org.tenant`), looked up before `tokenscope.tenant`, `user.id` and `enduser.id`; repeat
    /// for several (comma-separated in the environment), the first present wins.
    #[arg(
        long = "otlp-tenant-attribute",
        env = "TOKENSCOPE_OTLP_TENANT_ATTRIBUTES",
        value_delimiter = ','
    )]
    pub otlp_tenant_attributes: Vec<String>,
    /// Label `/metrics`' TTFT and TPOT histograms by tenant, for at most this many tenants (the
    /// first seen; later ones count as `other`): each tenant multiplies the series. 0: no label.
    #[arg(long, env = "TOKENSCOPE_METRICS_TENANTS", default_value_t = 0)]
    pub metrics_tenants: usize,
}

impl ServeArgs {
    pub fn config(&self) -> Config {
        Config {
            http_addr: self.http_addr,
            grpc_addr: self.grpc_addr,
            database_url: self.db.database_url.clone(),
            site_root: self.site_root.clone(),
            max_message_bytes: self.max_message_mib << 20,
            ingest_budget_bytes: self.ingest_budget_mib << 20,
            redact_text: self.redact_text,
            retention_days: self.retention_days,
            assembly_timeout: std::time::Duration::from_secs(self.assembly_timeout_s),
            access: AccessConfig {
                ingest_keys: self.ingest_keys.clone(),
                read_token: self.read_token.clone(),
                read_tokens: self.read_tokens.clone(),
                trusted_user_header: self.trusted_user_header.clone(),
                trusted_tenants_header: self.trusted_tenants_header.clone(),
                public_incidents: self.public_incidents,
            },
            findings_settle: (self.findings_settle_s > 0.0)
                .then(|| std::time::Duration::from_secs_f64(self.findings_settle_s)),
            otlp_tenant_attributes: self.otlp_tenant_attributes.clone(),
            metrics_tenants: self.metrics_tenants,
        }
    }
}

pub async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Serve(args) => {
            server::start(args.config())
                .await?
                .serve_until(server::stop_signal())
                .await
        }
        Command::Migrate(db) => Ok(Store::connect(&db.database_url).await.map(|_| ())?),
        Command::Demo { db, if_empty } => {
            let store = Store::connect(&db.database_url).await?;
            crate::demo::load(&Sink::of(store, false), if_empty).await
        }
        Command::Import {
            db,
            format,
            instance,
            model,
            clock_offset_s,
            redact_text,
            file,
        } => {
            let bytes = std::fs::read(&file).map_err(|e| {
                crate::error::Error::InvalidArgument(format!("cannot read {}: {e}", file.display()))
            })?;
            let format = format.resolve(&bytes)?;
            let sink = Sink::of(Store::connect(&db.database_url).await?, redact_text);
            let opts = crate::ingest::import::Options {
                instance: instance.unwrap_or_else(|| format.default_instance().into()),
                model,
                clock_offset_s,
                now_ns: crate::clock::now_ns(),
            };
            let reply =
                crate::ingest::import::import(&sink, format, &bytes, &opts, &Grant::All).await?;
            println!(
                "{}",
                serde_json::to_string_pretty(&reply).unwrap_or_default()
            );
            Ok(())
        }
        Command::Sim(args) => Ok(tokenscope_sim::run(args, crate::clock::now_ns()).await?),
        Command::Retention { db, keep_days } => {
            let store = Store::connect(&db.database_url).await?;
            let dropped = store
                .drop_older_than_days(keep_days, crate::clock::now_ns())
                .await?;
            println!(
                "dropped {} partitions: {}",
                dropped.len(),
                dropped.join(", ")
            );
            Ok(())
        }
    }
}
