//! A webhook receiver for the http sink's tests: a small HTTP/1.1 server
//! on a loopback port whose answers a test scripts (200, 5xx, 429 with
//! Retry-After, 4xx, or a hang) and which records every request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub at: Instant,
    /// The status this request was answered with (0 for a hang).
    pub status: u16,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("the body is JSON")
    }

    /// The events of the body: the object, or each element of an array.
    pub fn events(&self) -> Vec<serde_json::Value> {
        match self.json() {
            serde_json::Value::Array(events) => events,
            event => vec![event],
        }
    }
}

pub enum Reply {
    Status(u16),
    WithHeaders(u16, Vec<(&'static str, String)>),
    /// Never answer; the connection stays open until the client drops it.
    Hang,
}

type Rule = Box<dyn FnMut(&Request) -> Reply + Send>;

pub struct Receiver {
    pub addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    rule: Arc<Mutex<Rule>>,
}

impl Receiver {
    /// Answers 200 to everything until `set_rule`.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let rule: Arc<Mutex<Rule>> = Arc::new(Mutex::new(Box::new(|_: &Request| Reply::Status(200))));
        let (r, u) = (requests.clone(), rule.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (r, u) = (r.clone(), u.clone());
                std::thread::spawn(move || serve(stream, &r, &u));
            }
        });
        Self { addr, requests, rule }
    }

    /// A receiver that answers 503 while the returned switch is on and
    /// 200 otherwise: a webhook to take down and bring back.
    pub fn switchable(down: bool) -> (Self, Arc<AtomicBool>) {
        let receiver = Self::start();
        let switch = Arc::new(AtomicBool::new(down));
        let failing = switch.clone();
        receiver
            .set_rule(move |_| if failing.load(Ordering::SeqCst) { Reply::Status(503) } else { Reply::Status(200) });
        (receiver, switch)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn set_rule(&self, rule: impl FnMut(&Request) -> Reply + Send + 'static) {
        *self.rule.lock().unwrap() = Box::new(rule);
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// Requests answered with a 2xx, in arrival order.
    pub fn delivered(&self) -> Vec<Request> {
        self.requests().into_iter().filter(|r| (200..300).contains(&r.status)).collect()
    }

    /// The `position` of every event delivered, in arrival order.
    pub fn delivered_positions(&self) -> Vec<String> {
        self.delivered()
            .iter()
            .flat_map(Request::events)
            .map(|e| e["position"].as_str().expect("position").to_string())
            .collect()
    }
}

fn serve(stream: TcpStream, requests: &Mutex<Vec<Request>>, rule: &Mutex<Rule>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone the stream"));
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (parts.next().unwrap_or("").to_string(), parts.next().unwrap_or("").to_string());
        let mut headers = Vec::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
        }
        let length: usize = headers.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut request = Request { method, path, headers, body, at: Instant::now(), status: 0 };
        let reply = (rule.lock().unwrap())(&request);
        let (status, extra) = match reply {
            Reply::Status(status) => (status, Vec::new()),
            Reply::WithHeaders(status, extra) => (status, extra),
            Reply::Hang => {
                requests.lock().unwrap().push(request);
                let mut sink = Vec::new();
                let _ = reader.read_to_end(&mut sink);
                return;
            }
        };
        request.status = status;
        requests.lock().unwrap().push(request);
        let mut head = format!("HTTP/1.1 {status} Scripted\r\nContent-Length: 0\r\n");
        for (name, value) in extra {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
    }
}
