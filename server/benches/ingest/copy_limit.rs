//! The physical limit: rows of 24 bytes per token (the size of a stored token) written with
//! binary `COPY` by four connections, 32 rows of 512 tokens a transaction, fsync on. Nothing an
//! ingest path does can be faster on this machine's Postgres.

use sqlx::postgres::PgPoolOptions;

use tokenscope::fixtures::Rng;

use super::common::fresh_database;
use super::drive::drive;
use super::{Run, senders};

const BYTES_PER_TOKEN: usize = 24;
const TOKENS_PER_ROW: usize = 512;
const ROWS_PER_COPY: usize = 32;
/// Enough for about a second: shorter runs scatter by ±15 %.
const COPIES: usize = 480;

/// One `COPY … (FORMAT binary)` body: (instance int4, request_id text, arrival_ns int8, tokens bytea).
fn body(copy: usize, rng: &mut Rng) -> Vec<u8> {
    let mut out = b"PGCOPY\n\xff\r\n\0".to_vec();
    out.extend(0i32.to_be_bytes()); // flags
    out.extend(0i32.to_be_bytes()); // header extension
    for row in 0..ROWS_PER_COPY {
        let n = copy * ROWS_PER_COPY + row;
        let id = format!("cmpl-{n:032x}-0");
        // Incompressible, like the zstd-compressed token blocks.
        let tokens: Vec<u8> = (0..TOKENS_PER_ROW * BYTES_PER_TOKEN)
            .map(|_| rng.next_u64() as u8)
            .collect();
        out.extend(4i16.to_be_bytes());
        field(&mut out, &((copy % senders()) as i32).to_be_bytes());
        field(&mut out, id.as_bytes());
        field(&mut out, &(n as i64).to_be_bytes());
        field(&mut out, &tokens);
    }
    out.extend((-1i16).to_be_bytes());
    out
}

fn field(out: &mut Vec<u8>, value: &[u8]) {
    out.extend((value.len() as i32).to_be_bytes());
    out.extend(value);
}

pub async fn run() -> Run {
    let url = fresh_database().await;
    let pool = PgPoolOptions::new()
        .max_connections(senders() as u32)
        .connect(&url)
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE TABLE copy_limit (instance_id int, request_id text, arrival_ns bigint, tokens bytea,
             PRIMARY KEY (instance_id, request_id, arrival_ns))",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut rng = Rng::new(5);
    let bodies: Vec<Vec<u8>> = (0..COPIES).map(|c| body(c, &mut rng)).collect();
    drive(
        COPIES * ROWS_PER_COPY * TOKENS_PER_ROW,
        bodies,
        senders(),
        || pool.clone(),
        |pool, body| async move {
            let mut tx = pool.begin().await.unwrap();
            let mut copy = tx
                .copy_in_raw("COPY copy_limit FROM STDIN (FORMAT binary)")
                .await
                .unwrap();
            copy.send(body).await.unwrap();
            assert_eq!(copy.finish().await.unwrap() as usize, ROWS_PER_COPY);
            tx.commit().await.unwrap();
            pool
        },
    )
    .await
}
