//! Credentials out of printed text: the one place every log line, status
//! `last_error`, dead letter reason and final error passes through.
//!
//! A sink or source URL may carry a password (`http://user:pw@host`,
//! `nats://user:pw@host`, `redis://:pw@host`, `postgres://u:pw@host/db`),
//! and client libraries put the URL into their own error text (reqwest's
//! "error sending request for url (...)"), so redacting only our own
//! messages would not be enough: the text itself is scanned.

use std::borrow::Cow;

/// What replaces a secret.
pub const MASK: &str = "***";

/// `text` with the userinfo secret of every `scheme://userinfo@` in it
/// masked: `user:pw@` becomes `user:***@`, and a lone `token@` (NATS
/// token auth, for one) becomes `***@`. Also masks the `password:
/// Some("...")` of a `Debug`-printed URL.
pub fn credentials(text: &str) -> Cow<'_, str> {
    if !text.contains("://") && !text.contains("password: Some(") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let authority_start = at + 3;
        out.push_str(&rest[..authority_start]);
        let authority = &rest[authority_start..];
        // The authority ends at `/`, `?`, `#` (RFC 3986, section 3.2), or
        // where the URL's text does; the userinfo ends at its last `@`,
        // so a raw `@` in a password is masked too.
        let end = authority
            .find(|c: char| matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`') || c.is_whitespace())
            .unwrap_or(authority.len());
        match authority[..end].rfind('@') {
            Some(userinfo_end) => {
                if let Some((user, _)) = authority[..userinfo_end].split_once(':') {
                    out.push_str(user);
                    out.push(':');
                }
                out.push_str(MASK);
                rest = &authority[userinfo_end..];
            }
            None => rest = authority,
        }
    }
    out.push_str(rest);
    mask_debug_password(out)
}

/// `password: Some("pw")`, as `url::Url`'s `Debug` prints it.
fn mask_debug_password(text: String) -> Cow<'static, str> {
    const OPEN: &str = "password: Some(\"";
    if !text.contains(OPEN) {
        return Cow::Owned(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find(OPEN) {
        out.push_str(&rest[..at + OPEN.len()]);
        let value = &rest[at + OPEN.len()..];
        let close = value.find("\")").unwrap_or(value.len());
        out.push_str(MASK);
        rest = &value[close..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_in_urls_are_masked() {
        let cases = [
            ("http://user:pw@host/hook", "http://user:***@host/hook"),
            ("nats://user:pw@127.0.0.1:4222", "nats://user:***@127.0.0.1:4222"),
            ("redis://:s3cret@redis:6379/0", "redis://:***@redis:6379/0"),
            ("nats://tok3n@host", "nats://***@host"),
            ("postgres://app:p%40ss@db/x?sslmode=require", "postgres://app:***@db/x?sslmode=require"),
            (
                "error sending request for url (http://u:p@127.0.0.1:1/hook): connection refused",
                "error sending request for url (http://u:***@127.0.0.1:1/hook): connection refused",
            ),
            ("two: http://a:1@x and https://b:2@y", "two: http://a:***@x and https://b:***@y"),
            ("url=\"http://a:b@c\"", "url=\"http://a:***@c\""),
            ("http://a:p@w@host/x", "http://a:***@host/x"),
            (
                "Url { scheme: \"http\", password: Some(\"pw\"), host: .. }",
                "Url { scheme: \"http\", password: Some(\"***\"), host: .. }",
            ),
        ];
        for (text, want) in cases {
            assert_eq!(credentials(text), want, "{text}");
        }
    }

    #[test]
    fn text_without_credentials_is_left_alone() {
        for text in [
            "http://host:8080/hook?mail=a@b",
            "sent to s3://bucket/prefix/",
            "no url here, just user@example.com",
            "http://host/path with a@b later",
            "truncated at the end: http://",
            "",
        ] {
            assert_eq!(credentials(text), text, "{text}");
            assert!(matches!(credentials(text), Cow::Borrowed(_)) || text.contains("://"));
        }
    }
}
