//! The private MariaDB of `scripts/services.sh`.

use mysql_async::prelude::{FromRow, Queryable};

use super::env;

fn url() -> String {
    format!(
        "mysql://{}:{}@{}:{}/",
        env("SLUICE_TEST_MY_USER"),
        env("SLUICE_TEST_MY_PASSWORD"),
        env("SLUICE_TEST_MY_HOST"),
        env("SLUICE_TEST_MY_PORT")
    )
}

/// The first row of a query's result.
pub fn my_sql<T: FromRow + Send + 'static>(statements: &str) -> Option<T> {
    my_rows(statements).into_iter().next()
}

/// Every row of a query's result (of its last statement).
pub fn my_rows<T: FromRow + Send + 'static>(statements: &str) -> Vec<T> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut conn = mysql_async::Conn::from_url(url()).await.expect("test connection");
        let rows = conn.query(statements).await.unwrap_or_else(|e| panic!("{statements}: {e}"));
        conn.disconnect().await.unwrap();
        rows
    })
}

/// Runs statements that return nothing.
pub fn my_exec(statements: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut conn = mysql_async::Conn::from_url(url()).await.expect("test connection");
        conn.query_drop(statements).await.unwrap_or_else(|e| panic!("{statements}: {e}"));
        conn.disconnect().await.unwrap();
    })
}

/// A pipeline of `database.*` into `items.jsonl`, from binlog `file` and
/// `offset`, resuming by GTID when `gtid` is set.
#[allow(dead_code)]
pub fn items_pipeline(database: &str, gtid: bool, file: &str, offset: u64) -> String {
    format!(
        "pipelines:\n  - name: my\n    source:\n      type: mysql\n      config: {{ id: {database}, host: 127.0.0.1, port: {port}, user: {user}, password: \"${{SLUICE_TEST_MY_PASSWORD}}\", tables: [{database}.*], gtid: {gtid}, start: {{ file: {file}, offset: {offset} }}, heartbeat_secs: 1 }}\n    sinks:\n      - type: file\n        config: {{ id: file, path: items.jsonl }}\n",
        port = env("SLUICE_TEST_MY_PORT"),
        user = env("SLUICE_TEST_MY_USER"),
    )
}
