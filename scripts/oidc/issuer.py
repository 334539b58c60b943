#!/usr/bin/env python3
"""A token issuer for the tests of Kafka's OAUTHBEARER login.

It plays an OpenID Connect provider's two parts that Kafka and librdkafka
use: `POST /token` (the client credentials grant, the client's id and
secret in HTTP Basic auth or in the form) answers a JWT signed with RS256,
and `GET /jwks` publishes the public key the broker checks it with.
Signing uses the openssl command, so nothing outside the standard library
is needed.

    issuer.py PORT KEY_PEM CLIENT_ID CLIENT_SECRET
"""

import base64
import json
import subprocess
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, KEY, CLIENT_ID, CLIENT_SECRET = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
KID = "sluice-test"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def modulus() -> bytes:
    out = subprocess.run(["openssl", "rsa", "-in", KEY, "-noout", "-modulus"], check=True,
                         capture_output=True, text=True).stdout
    return bytes.fromhex(out.strip().split("=", 1)[1])


JWKS = json.dumps({"keys": [{"kty": "RSA", "kid": KID, "use": "sig", "alg": "RS256",
                             "n": b64url(modulus()), "e": "AQAB"}]}).encode()


def token(subject: str, scope: str) -> str:
    now = int(time.time())
    header = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": KID}).encode())
    claims = {"sub": subject, "iat": now, "exp": now + 3600, "iss": f"http://127.0.0.1:{PORT}"}
    if scope:
        claims["scope"] = scope
    signing_input = f"{header}.{b64url(json.dumps(claims).encode())}"
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", KEY], input=signing_input.encode(),
                               check=True, capture_output=True).stdout
    return f"{signing_input}.{b64url(signature)}"


class Handler(BaseHTTPRequestHandler):
    def reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/jwks":
            self.reply(200, JWKS)
        else:
            self.reply(404, b'{"error": "not_found"}')

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(length).decode())
        client_id = form.get("client_id", [""])[0]
        client_secret = form.get("client_secret", [""])[0]
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Basic "):
            pair = base64.b64decode(auth[6:]).decode()
            client_id, _, client_secret = pair.partition(":")
        if self.path != "/token" or form.get("grant_type") != ["client_credentials"]:
            self.reply(400, b'{"error": "unsupported_grant_type"}')
        elif (client_id, client_secret) != (CLIENT_ID, CLIENT_SECRET):
            self.reply(401, b'{"error": "invalid_client"}')
        else:
            scope = form.get("scope", [""])[0]
            body = {"access_token": token(client_id, scope), "token_type": "Bearer", "expires_in": 3600}
            self.reply(200, json.dumps(body).encode())

    def log_message(self, *args) -> None:
        pass


ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
