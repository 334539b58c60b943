//! A minimal PostgreSQL client for what Sluice needs: simple queries, COPY
//! into tables and the streaming replication protocol (CopyBoth), over TCP or TLS, with
//! cleartext, MD5 or SCRAM-SHA-256 authentication.
//!
//! Reading is cancel-safe: `read_message` only takes a message off the
//! buffer once it is whole, so it can sit in a `select!` next to a timer.

mod error;
mod frame;
mod tls;

use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use postgres_protocol::authentication::sasl::{ChannelBinding, SCRAM_SHA_256, ScramSha256};
use rustls_pki_types::ServerName;
use sluice_core::CompactString;
use sluice_core::settings::{Secret, SslMode};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

pub use error::{PgError, ServerError, sqlstate_is_transient};
pub use frame::{Backend, Fields};

use frame::{Auth, write};

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct ConnectParams {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub password: Secret,
    pub ssl_mode: SslMode,
    pub ca_file: Option<PathBuf>,
    pub connect_timeout: Duration,
}

impl ConnectParams {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// The rows of a [`Connection::query_rows`] query as they arrive. Read it
/// to its end (`None`) before the connection's next query.
pub struct RowStream<'a> {
    conn: &'a mut Connection,
    error: Option<PgError>,
    done: bool,
}

impl RowStream<'_> {
    /// The next row's values in text form (invalid UTF-8 replaced), or
    /// `None` once the query is over; a server error is returned at that
    /// point, when the connection is ready again.
    pub async fn next(&mut self) -> Result<Option<Vec<Option<CompactString>>>, PgError> {
        while !self.done {
            let conn = &mut *self.conn;
            // A whole row is always taken here, so `parse` below meets
            // only the messages around the rows.
            if let Some(row) = frame::take_text_row(&mut conn.read_buf).map_err(|e| conn.protocol(e.to_string()))? {
                return Ok(Some(row));
            }
            match frame::parse(&mut conn.read_buf).map_err(|e| conn.protocol(e.to_string()))? {
                Some(Backend::Error(fields)) => self.error = Some(conn.server_error(fields)),
                Some(Backend::ReadyForQuery) => self.done = true,
                Some(_) => {}
                None => conn.read_more().await?,
            }
        }
        self.error.take().map_or(Ok(None), Err)
    }
}

/// A value of a row in text form, as a string (invalid UTF-8 replaced).
pub fn text(value: &[u8]) -> String {
    String::from_utf8_lossy(value).into_owned()
}

/// The rows of a simple query, as text.
#[derive(Debug, Default)]
pub struct Rows {
    pub columns: Vec<String>,
    /// Each column's type OID.
    pub types: Vec<u32>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl Rows {
    /// The value of `column` in the first row.
    pub fn first(&self, column: &str) -> Option<&str> {
        let index = self.columns.iter().position(|c| c == column)?;
        self.rows.first()?.get(index)?.as_deref()
    }

    pub fn get<'a>(&self, row: &'a [Option<String>], column: &str) -> Option<&'a str> {
        let index = self.columns.iter().position(|c| c == column)?;
        row.get(index)?.as_deref()
    }
}

pub struct Connection {
    stream: Stream,
    addr: String,
    read_buf: BytesMut,
    write_buf: BytesMut,
    /// Bytes received so far, for metrics.
    pub bytes_read: u64,
}

/// Session settings that make the server's text output unambiguous:
/// ISO dates, UTC timestamps, ISO-8601 intervals, round-trip floats.
const SESSION_SETTINGS: [(&str, &str); 6] = [
    ("application_name", "sluice"),
    ("client_encoding", "UTF8"),
    ("DateStyle", "ISO, YMD"),
    ("TimeZone", "UTC"),
    ("IntervalStyle", "iso_8601"),
    ("extra_float_digits", "3"),
];

impl Connection {
    /// Connects and authenticates; with `replication`, in logical
    /// replication mode (`replication=database`).
    pub async fn connect(params: &ConnectParams, replication: bool) -> Result<Self, PgError> {
        let addr = params.addr();
        let timeout = params.connect_timeout;
        let secs = timeout.as_secs();
        tokio::time::timeout(timeout, Self::connect_inner(params, replication))
            .await
            .map_err(|_| PgError::Timeout { addr, secs })?
    }

    async fn connect_inner(params: &ConnectParams, replication: bool) -> Result<Self, PgError> {
        let addr = params.addr();
        let tcp = TcpStream::connect((params.host.as_str(), params.port))
            .await
            .map_err(|cause| PgError::Connect { addr: addr.clone(), cause })?;
        let _ = tcp.set_nodelay(true);
        let stream = Self::negotiate_tls(tcp, params).await?;
        let mut conn = Connection {
            stream,
            addr,
            read_buf: BytesMut::with_capacity(64 * 1024),
            write_buf: BytesMut::new(),
            bytes_read: 0,
        };
        let mut startup: Vec<(&str, &str)> = vec![("user", &params.user), ("database", &params.database)];
        if replication {
            startup.push(("replication", "database"));
        }
        startup.extend(SESSION_SETTINGS);
        write::startup(&mut conn.write_buf, &startup);
        conn.flush().await?;
        conn.authenticate(params).await?;
        loop {
            match conn.read_message().await? {
                Backend::ReadyForQuery => return Ok(conn),
                Backend::Error(fields) => return Err(conn.server_error(fields)),
                _ => {}
            }
        }
    }

    async fn negotiate_tls(mut tcp: TcpStream, params: &ConnectParams) -> Result<Stream, PgError> {
        let addr = params.addr();
        let tls_error = |detail: String| PgError::Tls { addr: addr.clone(), detail };
        let Some(config) = tls::client_config(params.ssl_mode, params.ca_file.as_deref()).map_err(tls_error)? else {
            return Ok(Stream::Plain(tcp));
        };
        let mut request = BytesMut::new();
        write::ssl_request(&mut request);
        let io = |cause| PgError::Io { addr: addr.clone(), cause };
        tcp.write_all(&request).await.map_err(io)?;
        let answer = tcp.read_u8().await.map_err(io)?;
        match (answer, params.ssl_mode) {
            (b'S', _) => {}
            (b'N', SslMode::Prefer) => return Ok(Stream::Plain(tcp)),
            (b'N', _) => {
                return Err(tls_error(
                    "the server does not offer TLS; enable ssl on the server, or set ssl_mode: prefer or disable"
                        .into(),
                ));
            }
            _ => return Err(PgError::Protocol { addr, detail: "unexpected answer to the TLS request".into() }),
        }
        let name = ServerName::try_from(params.host.clone())
            .map_err(|_| tls_error(format!("{:?} is not a valid TLS server name", params.host)))?;
        // rustls reports a refused certificate as invalid data; any other
        // error is the connection's (a server starting up or going down
        // closes it mid-handshake), and worth retrying.
        let tls = TlsConnector::from(config).connect(name, tcp).await.map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => tls_error(format!("handshake failed: {e}")),
            _ => io(e),
        })?;
        Ok(Stream::Tls(Box::new(tls)))
    }

    async fn authenticate(&mut self, params: &ConnectParams) -> Result<(), PgError> {
        let password = params.password.expose().as_bytes();
        let mut scram: Option<ScramSha256> = None;
        loop {
            let auth = match self.read_message().await? {
                Backend::Authentication(auth) => auth,
                Backend::Error(fields) => return Err(self.server_error(fields)),
                _ => continue,
            };
            match auth {
                Auth::Ok => return Ok(()),
                Auth::Cleartext => write::password(&mut self.write_buf, password),
                Auth::Md5 { salt } => {
                    let hash = postgres_protocol::authentication::md5_hash(params.user.as_bytes(), password, salt);
                    write::password(&mut self.write_buf, hash.as_bytes());
                }
                Auth::Sasl { mechanisms } => {
                    if !mechanisms.iter().any(|m| m == SCRAM_SHA_256) {
                        return Err(self.protocol(format!("the server offers SASL {mechanisms:?}, not SCRAM-SHA-256")));
                    }
                    let session = ScramSha256::new(password, ChannelBinding::unsupported());
                    write::sasl_initial(&mut self.write_buf, SCRAM_SHA_256, session.message());
                    scram = Some(session);
                }
                Auth::SaslContinue(data) => {
                    let session = scram.as_mut().ok_or_else(|| self.protocol("SCRAM message out of order".into()))?;
                    session.update(&data).map_err(|e| self.protocol(format!("SCRAM: {e}")))?;
                    write::sasl_response(&mut self.write_buf, session.message());
                }
                Auth::SaslFinal(data) => {
                    let mut session = scram.take().ok_or_else(|| self.protocol("SCRAM message out of order".into()))?;
                    session.finish(&data).map_err(|e| self.protocol(format!("SCRAM server proof: {e}")))?;
                    continue;
                }
                Auth::Unsupported(code) => {
                    return Err(self.protocol(format!(
                        "the server asks for authentication method {code}, which Sluice does not support; use scram-sha-256 or md5 in pg_hba.conf"
                    )));
                }
            }
            self.flush().await?;
        }
    }

    /// Runs one simple query and returns its rows as text.
    pub async fn simple_query(&mut self, sql: &str) -> Result<Rows, PgError> {
        write::query(&mut self.write_buf, sql);
        self.flush().await?;
        let mut rows = Rows::default();
        let mut error = None;
        loop {
            match self.read_message().await? {
                Backend::RowDescription(columns, types) => (rows.columns, rows.types) = (columns, types),
                Backend::DataRow(values) => rows.rows.push(values.into_iter().map(|v| v.map(|b| text(&b))).collect()),
                Backend::Error(fields) => error = Some(self.server_error(fields)),
                Backend::ReadyForQuery => return error.map_or(Ok(rows), Err),
                _ => {}
            }
        }
    }

    /// Runs one simple query and hands its rows over as the server sends
    /// them, so a large result is never held whole and the server goes on
    /// producing rows while the caller works on the ones it has.
    pub async fn query_rows(&mut self, sql: &str) -> Result<RowStream<'_>, PgError> {
        write::query(&mut self.write_buf, sql);
        self.flush().await?;
        Ok(RowStream { conn: self, error: None, done: false })
    }

    /// Runs `COPY … FROM STDIN` (`sql`) with `data` in the COPY text
    /// format. A server error, whenever it comes, is returned once the
    /// connection is ready for the next query.
    pub async fn copy_in(&mut self, sql: &str, data: &[u8]) -> Result<(), PgError> {
        write::query(&mut self.write_buf, sql);
        self.flush().await?;
        let mut error = None;
        loop {
            match self.read_message().await? {
                Backend::CopyInResponse => {
                    // Messages of at most 1 MiB, so the server never holds
                    // one huge message in memory.
                    for piece in data.chunks(1 << 20) {
                        write::copy_data(&mut self.write_buf, piece);
                        if self.write_buf.len() >= 1 << 20 {
                            self.flush().await?;
                        }
                    }
                    write::copy_done(&mut self.write_buf);
                    self.flush().await?;
                }
                Backend::Error(fields) => error = Some(self.server_error(fields)),
                Backend::ReadyForQuery => return error.map_or(Ok(()), Err),
                _ => {}
            }
        }
    }

    /// Sends a command that switches the connection to CopyBoth mode
    /// (`START_REPLICATION`).
    pub async fn start_copy_both(&mut self, sql: &str) -> Result<(), PgError> {
        write::query(&mut self.write_buf, sql);
        self.flush().await?;
        loop {
            match self.read_message().await? {
                Backend::CopyBothResponse => return Ok(()),
                Backend::Error(fields) => {
                    let error = self.server_error(fields);
                    // Drain to ReadyForQuery so the connection stays usable.
                    while !matches!(self.read_message().await?, Backend::ReadyForQuery) {}
                    return Err(error);
                }
                _ => {}
            }
        }
    }

    /// Reads the next whole message. Cancel-safe.
    pub async fn read_message(&mut self) -> Result<Backend, PgError> {
        loop {
            if let Some(message) = frame::parse(&mut self.read_buf).map_err(|e| self.protocol(e.to_string()))? {
                return Ok(message);
            }
            self.read_more().await?;
        }
    }

    /// Reads what the server has sent next onto the end of the read buffer.
    async fn read_more(&mut self) -> Result<(), PgError> {
        self.read_buf.reserve(64 * 1024);
        let read = self.stream.read_buf(&mut self.read_buf).await.map_err(|cause| self.io(cause))?;
        if read == 0 {
            return Err(
                self.io(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the server closed the connection"))
            );
        }
        self.bytes_read += read as u64;
        Ok(())
    }

    pub async fn send_copy_data(&mut self, data: &[u8]) -> Result<(), PgError> {
        write::copy_data(&mut self.write_buf, data);
        self.flush().await
    }

    /// Says goodbye; errors are moot at that point.
    pub async fn close(mut self) {
        write::terminate(&mut self.write_buf);
        let _ = self.flush().await;
        let _ = self.stream.shutdown().await;
    }

    pub fn server_error(&self, fields: Fields) -> PgError {
        PgError::Server(self.addr.clone(), ServerError(fields))
    }

    fn protocol(&self, detail: String) -> PgError {
        PgError::Protocol { addr: self.addr.clone(), detail }
    }

    fn io(&self, cause: std::io::Error) -> PgError {
        PgError::Io { addr: self.addr.clone(), cause }
    }

    async fn flush(&mut self) -> Result<(), PgError> {
        let buf = self.write_buf.split();
        self.stream.write_all(&buf).await.map_err(|cause| self.io(cause))?;
        self.stream.flush().await.map_err(|cause| self.io(cause))
    }
}

/// Copy data payload as zero-copy bytes, for callers that keep it.
pub type Payload = Bytes;
