//! A TCP proxy between Sluice and one server, which can cut every
//! connection at once or stall them (stop forwarding) for a while.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub name: &'static str,
    pub port: u16,
    /// Bumped to cut every open connection.
    cut: watch::Sender<u64>,
    /// Milliseconds since `epoch` until which forwarding stalls.
    stalled_until: Arc<AtomicU64>,
    epoch: Instant,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `target`.
    pub async fn start(name: &'static str, target: String) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (cut, _) = watch::channel(0u64);
        let stalled_until = Arc::new(AtomicU64::new(0));
        let epoch = Instant::now();
        let (cuts, stall) = (cut.clone(), stalled_until.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (target, mut cuts, stall) = (target.clone(), cuts.subscribe(), stall.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(&target).await else { return };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let up = pump(client_read, server_write, stall.clone(), epoch);
                    let down = pump(server_read, client_write, stall, epoch);
                    tokio::select! {
                        _ = cuts.changed() => {}
                        _ = async { tokio::join!(up, down) } => {}
                    }
                });
            }
        });
        Ok(Self { name, port, cut, stalled_until, epoch })
    }

    pub fn cut(&self) {
        self.cut.send_modify(|n| *n += 1);
    }

    pub fn stall(&self, duration: Duration) {
        let until = (self.epoch.elapsed() + duration).as_millis() as u64;
        self.stalled_until.store(until, Ordering::Relaxed);
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    stalled_until: Arc<AtomicU64>,
    epoch: Instant,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        loop {
            let now = epoch.elapsed().as_millis() as u64;
            let until = stalled_until.load(Ordering::Relaxed);
            if now >= until {
                break;
            }
            tokio::time::sleep(Duration::from_millis(until - now)).await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}
