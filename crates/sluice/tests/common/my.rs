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
    bounded(statements, async {
        let mut conn = mysql_async::Conn::from_url(url()).await.expect("test connection");
        let rows = conn.query(statements).await.unwrap_or_else(|e| panic!("{statements}: {e}"));
        conn.disconnect().await.unwrap();
        rows
    })
}

/// A test statement that waits on a lock fails within two minutes, with
/// the server's process list, rather than hanging the suite.
fn bounded<T>(statements: &str, work: impl std::future::Future<Output = T>) -> T {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        match tokio::time::timeout(std::time::Duration::from_secs(120), work).await {
            Ok(value) => value,
            Err(_) => {
                let list: Vec<mysql_async::Row> = match mysql_async::Conn::from_url(url()).await {
                    Ok(mut conn) => conn.query("SHOW FULL PROCESSLIST").await.unwrap_or_default(),
                    Err(_) => Vec::new(),
                };
                let list: Vec<String> = list
                    .into_iter()
                    .map(|row| {
                        let column = |i: usize| row.get_opt::<Option<String>, _>(i).and_then(Result::ok).flatten();
                        format!("{:?} {:?} {:?}", column(4), column(6), column(7))
                    })
                    .collect();
                panic!("{statements}: still waiting after 120 s; the server's processes:\n{}", list.join("\n"))
            }
        }
    })
}

/// The server's binlog head: file and offset. MySQL's `SHOW MASTER
/// STATUS` has a fifth column that MariaDB's lacks.
#[allow(dead_code)]
pub fn binlog_head() -> (String, u64) {
    let row: mysql_async::Row = my_sql("SHOW MASTER STATUS").expect("the binlog is on");
    (row.get(0).unwrap(), row.get(1).unwrap())
}

/// Whether the server is MariaDB (else MySQL).
#[allow(dead_code)]
pub fn is_mariadb() -> bool {
    my_sql::<String>("SELECT VERSION()").is_some_and(|v| v.contains("MariaDB"))
}

/// `FROM` text for a derived table `seq` of the numbers 1 to `n`
/// (up to 10 to the power of its digits, so n + 1 may be read as well;
/// `HAVING` drops those): MariaDB's `seq_1_to_n` tables, for MySQL too.
#[allow(dead_code)]
pub fn numbers(n: u32) -> String {
    let digits = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
                  UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let count = n.max(1).ilog10() + 1;
    let places: Vec<String> = (0..count).map(|i| format!("{digits} p{i}")).collect();
    let value: Vec<String> = (0..count).map(|i| format!("p{i}.d * {}", 10u32.pow(i))).collect();
    format!(
        "(SELECT {} + 1 AS seq FROM {} HAVING seq <= {n} ORDER BY seq) AS numbers",
        value.join(" + "),
        places.join(" CROSS JOIN ")
    )
}

/// Runs statements that return nothing.
pub fn my_exec(statements: &str) {
    bounded(statements, async {
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
