//! Table patterns, as sources and transforms match table names.

/// Whether `text` matches a table pattern: `*` matches any run of
/// characters; everything else matches itself.
///
/// Works on bytes: `*` is ASCII and the literal parts are whole UTF-8
/// sequences, so a match on bytes is a match on characters. Transforms
/// call this for every event, so it allocates nothing.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == text;
    }
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && p[pi] != b'*' && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn stars_match_any_run_and_the_rest_matches_itself() {
        assert!(glob_match("public.orders", "public.orders"));
        assert!(!glob_match("public.orders", "public.orders_old"));
        assert!(glob_match("public.*", "public.orders"));
        assert!(glob_match("*.orders", "shop.orders"));
        assert!(glob_match("*", ""));
        assert!(glob_match("p*c.*_*", "public.order_items"));
        assert!(!glob_match("p*c.*_*", "public.orders"));
        assert!(glob_match("**", "x"));
        assert!(!glob_match("a*b", "ab_"));
    }

    #[test]
    fn names_beyond_ascii_match_by_character() {
        assert!(glob_match("café.*", "café.größe"));
        assert!(glob_match("*ö*", "café.größe"));
        assert!(!glob_match("*ø*", "café.größe"));
        assert!(glob_match("caf*.gr*e", "café.größe"));
    }
}
