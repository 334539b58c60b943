//! DDL statements from the binlog's query events: which tables one
//! changes, and its text with string literals redacted.
//!
//! A query event can hold any statement the server logs as text:
//! `CREATE USER ... IDENTIFIED BY 'password'`, `GRANT`, `SET PASSWORD`,
//! views, routines. Only an allow-list of statement kinds can change a
//! table's columns, and only those become schema events; the kind and the
//! table names are read from tokens, never from a word search over the
//! text, so a `TABLE` inside a string literal or a comment is not a keyword.
//!
//! The tokenizer follows the server's lexer where it matters for safety:
//! `'...'` strings (and `"..."` unless `ANSI_QUOTES`) with doubled-quote
//! escapes and, unless `NO_BACKSLASH_ESCAPES`, backslash escapes;
//! backtick identifiers with doubled backticks; `-- ` and `#` line
//! comments and `/* */` block comments. MySQL's and MariaDB's versioned
//! comments (`/*!50100 ... */`, `/*M!100100 ... */`) hold code the server
//! ran, so their contents are tokens like any other.

/// The two `sql_mode` flags that change how the server splits a statement
/// into tokens; the binlog's query event carries the statement's `sql_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dialect {
    /// `ANSI_QUOTES`: `"..."` is an identifier, not a string.
    pub ansi_quotes: bool,
    /// Off under `NO_BACKSLASH_ESCAPES`: `\` is an ordinary character in strings.
    pub backslash_escapes: bool,
}

impl Default for Dialect {
    fn default() -> Self {
        Dialect { ansi_quotes: false, backslash_escapes: true }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// An unquoted keyword, identifier or number.
    Word,
    /// A quoted identifier, unescaped.
    Ident(String),
    /// A string literal.
    Str,
    /// Any other character (`.`, `,`, `(`, `;`, ...).
    Punct(char),
    /// A plain comment; kept for redaction, skipped by the parser.
    Comment,
}

#[derive(Debug, Clone)]
struct Token {
    kind: Kind,
    /// Byte range in the statement.
    start: usize,
    end: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '$' || !c.is_ascii()
}

/// Splits a statement into tokens. An unterminated string, identifier or
/// comment runs to the end of the text: that can only come from a damaged
/// event, and what follows the opening quote is then treated as literal.
fn tokenize(sql: &str, dialect: Dialect) -> Vec<Token> {
    let bytes = sql.as_bytes();
    let mut tokens = Vec::new();
    let mut at = 0;
    // Inside `/*! ... */`, whose closing `*/` is not a token.
    let mut versioned = false;
    let next_char = |at: usize| sql[at..].chars().next();
    while let Some(c) = next_char(at) {
        let start = at;
        let rest = &bytes[at..];
        if c.is_whitespace() {
            at += c.len_utf8();
            continue;
        }
        if versioned && rest.starts_with(b"*/") {
            versioned = false;
            at += 2;
            continue;
        }
        if rest.starts_with(b"/*") {
            let marker = if rest.starts_with(b"/*!") {
                Some(3)
            } else if rest.starts_with(b"/*M!") {
                Some(4)
            } else {
                None
            };
            if let Some(marker) = marker
                && !versioned
            {
                at += marker;
                // The version the code needs: up to six digits.
                at += bytes[at..].iter().take(6).take_while(|b| b.is_ascii_digit()).count();
                versioned = true;
                continue;
            }
            at = find(bytes, at + 2, b"*/").map_or(bytes.len(), |end| end + 2);
            tokens.push(Token { kind: Kind::Comment, start, end: at });
            continue;
        }
        let dash_comment =
            rest.starts_with(b"--") && rest.get(2).is_none_or(|b| b.is_ascii_whitespace() || b.is_ascii_control());
        if c == '#' || dash_comment {
            at = find(bytes, at, b"\n").unwrap_or(bytes.len());
            tokens.push(Token { kind: Kind::Comment, start, end: at });
            continue;
        }
        match c {
            '\'' => {
                at = quoted_end(bytes, at, b'\'', dialect.backslash_escapes);
                tokens.push(Token { kind: Kind::Str, start, end: at });
            }
            '"' if !dialect.ansi_quotes => {
                at = quoted_end(bytes, at, b'"', dialect.backslash_escapes);
                tokens.push(Token { kind: Kind::Str, start, end: at });
            }
            '`' | '"' => {
                at = quoted_end(bytes, at, c as u8, false);
                let inner = sql.get(start + 1..at.saturating_sub(1).max(start + 1)).unwrap_or("");
                let quote = c.to_string();
                let name = inner.replace(&quote.repeat(2), &quote);
                tokens.push(Token { kind: Kind::Ident(name), start, end: at });
            }
            c if is_word_char(c) => {
                at += sql[at..].find(|c: char| !is_word_char(c)).unwrap_or(sql.len() - at);
                tokens.push(Token { kind: Kind::Word, start, end: at });
            }
            c => {
                at += c.len_utf8();
                tokens.push(Token { kind: Kind::Punct(c), start, end: at });
            }
        }
    }
    tokens
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes.get(from..)?.windows(needle.len()).position(|w| w == needle).map(|i| from + i)
}

/// The end (exclusive) of the quoted token that opens at `start`.
fn quoted_end(bytes: &[u8], start: usize, quote: u8, backslash: bool) -> usize {
    let mut at = start + 1;
    while let Some(&b) = bytes.get(at) {
        if backslash && b == b'\\' {
            at += 2;
        } else if b == quote {
            if bytes.get(at + 1) == Some(&quote) {
                at += 2;
            } else {
                return at + 1;
            }
        } else {
            at += 1;
        }
    }
    bytes.len()
}

/// A table a DDL statement changes: (database, table).
pub type TableName = (String, String);

/// The tables a statement changes, when it is one of the kinds that can
/// change a table's columns or existence: `CREATE [OR REPLACE] TABLE`,
/// `ALTER [ONLINE] [IGNORE] TABLE` (with the new name of an
/// `ALTER TABLE ... RENAME TO`), `DROP TABLE` (every name),
/// `RENAME TABLE a TO b, ...` (old and new names), `TRUNCATE [TABLE]`, and
/// `CREATE [UNIQUE|FULLTEXT|SPATIAL] INDEX ... ON t` and
/// `DROP INDEX ... ON t`. Any other statement, including `TEMPORARY`
/// tables, which live only in one session, changes none: the list is empty.
pub fn ddl_targets(default_db: &str, sql: &str, dialect: Dialect) -> Vec<TableName> {
    let tokens: Vec<Token> = tokenize(sql, dialect).into_iter().filter(|t| t.kind != Kind::Comment).collect();
    // One statement per query event; anything after a `;` is not parsed.
    let end = tokens.iter().position(|t| t.kind == Kind::Punct(';')).unwrap_or(tokens.len());
    let mut p = Parser { sql, tokens: &tokens[..end], at: 0, default_db };
    p.statement().unwrap_or_default()
}

struct Parser<'a> {
    sql: &'a str,
    tokens: &'a [Token],
    at: usize,
    default_db: &'a str,
}

impl Parser<'_> {
    fn peek_word(&self, offset: usize) -> Option<&str> {
        let token = self.tokens.get(self.at + offset)?;
        (token.kind == Kind::Word).then(|| &self.sql[token.start..token.end])
    }

    /// Takes the next token if it is the keyword `word`.
    fn eat(&mut self, word: &str) -> bool {
        let matched = self.peek_word(0).is_some_and(|w| w.eq_ignore_ascii_case(word));
        if matched {
            self.at += 1;
        }
        matched
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let matched = self.tokens.get(self.at).is_some_and(|t| t.kind == Kind::Punct(c));
        if matched {
            self.at += 1;
        }
        matched
    }

    fn ident(&mut self) -> Option<String> {
        let token = self.tokens.get(self.at)?;
        let name = match &token.kind {
            Kind::Word => self.sql[token.start..token.end].to_string(),
            Kind::Ident(name) => name.clone(),
            _ => return None,
        };
        self.at += 1;
        Some(name)
    }

    /// `name` or `db.name`.
    fn table(&mut self) -> Option<TableName> {
        let first = self.ident()?;
        if self.eat_punct('.') {
            let table = self.ident()?;
            return Some((first, table));
        }
        Some((self.default_db.to_string(), first))
    }

    fn if_exists(&mut self) {
        if self.eat("IF") {
            self.eat("NOT");
            self.eat("EXISTS");
        }
    }

    fn statement(&mut self) -> Option<Vec<TableName>> {
        let verb = self.peek_word(0)?.to_ascii_uppercase();
        self.at += 1;
        match verb.as_str() {
            "CREATE" => {
                if self.eat("OR") && !self.eat("REPLACE") {
                    return None;
                }
                if self.eat("TEMPORARY") {
                    return None;
                }
                if self.eat("TABLE") {
                    self.if_exists();
                    return Some(vec![self.table()?]);
                }
                let _ = self.eat("ONLINE") || self.eat("OFFLINE");
                let _ = self.eat("UNIQUE") || self.eat("FULLTEXT") || self.eat("SPATIAL");
                if self.eat("INDEX") {
                    return self.index_on();
                }
                None
            }
            "ALTER" => {
                self.eat("ONLINE");
                self.eat("IGNORE");
                if !self.eat("TABLE") {
                    return None;
                }
                self.if_exists();
                let mut targets = vec![self.table()?];
                targets.extend(self.alter_rename());
                Some(targets)
            }
            "DROP" => {
                if self.eat("TEMPORARY") {
                    return None;
                }
                if self.eat("TABLE") || self.eat("TABLES") {
                    self.if_exists();
                    let mut targets = vec![self.table()?];
                    while self.eat_punct(',') {
                        targets.push(self.table()?);
                    }
                    return Some(targets);
                }
                let _ = self.eat("ONLINE") || self.eat("OFFLINE");
                if self.eat("INDEX") {
                    return self.index_on();
                }
                None
            }
            "RENAME" => {
                if !(self.eat("TABLE") || self.eat("TABLES")) {
                    return None;
                }
                self.if_exists();
                let mut targets = Vec::new();
                loop {
                    targets.push(self.table()?);
                    if self.eat("WAIT") {
                        self.ident();
                    }
                    self.eat("NOWAIT");
                    if !self.eat("TO") {
                        return None;
                    }
                    targets.push(self.table()?);
                    if !self.eat_punct(',') {
                        return Some(targets);
                    }
                }
            }
            "TRUNCATE" => {
                self.eat("TABLE");
                Some(vec![self.table()?])
            }
            _ => None,
        }
    }

    /// `[IF [NOT] EXISTS] index_name ... ON table`.
    fn index_on(&mut self) -> Option<Vec<TableName>> {
        self.if_exists();
        self.ident()?;
        while self.at < self.tokens.len() {
            if self.eat("ON") {
                return Some(vec![self.table()?]);
            }
            self.at += 1;
        }
        None
    }

    /// The new names of `ALTER TABLE ... RENAME [TO|AS] name`, among the
    /// statement's top-level clauses (not `RENAME COLUMN|INDEX|KEY`).
    fn alter_rename(&mut self) -> Vec<TableName> {
        let mut names = Vec::new();
        let mut depth = 0usize;
        while let Some(token) = self.tokens.get(self.at) {
            match token.kind {
                Kind::Punct('(') => depth += 1,
                Kind::Punct(')') => depth = depth.saturating_sub(1),
                _ => {}
            }
            self.at += 1;
            if depth == 0
                && token.kind == Kind::Word
                && self.sql[token.start..token.end].eq_ignore_ascii_case("RENAME")
                && !["COLUMN", "INDEX", "KEY"]
                    .iter()
                    .any(|w| self.peek_word(0).is_some_and(|n| n.eq_ignore_ascii_case(w)))
            {
                if !self.eat("TO") {
                    self.eat("AS");
                }
                names.extend(self.table());
            }
        }
        names
    }
}

/// The statement with every string literal replaced by `'?'` and every
/// plain comment by a space (a comment can quote anything). Identifiers,
/// keywords, numbers and the code inside versioned comments are kept, so
/// the text still says what changed. Hex and bit literals (`x'00ff'`)
/// become `x'?'`. Under `ANSI_QUOTES` a double-quoted identifier is kept.
pub fn redact(sql: &str, dialect: Dialect) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut copied = 0;
    for token in tokenize(sql, dialect) {
        let replacement = match token.kind {
            Kind::Str => "'?'",
            Kind::Comment => " ",
            _ => continue,
        };
        out.push_str(&sql[copied..token.start]);
        out.push_str(replacement);
        copied = token.end;
    }
    out.push_str(&sql[copied..]);
    out.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn targets(sql: &str) -> Vec<TableName> {
        ddl_targets("shop", sql, Dialect::default())
    }

    fn t(db: &str, table: &str) -> TableName {
        (db.to_string(), table.to_string())
    }

    #[test]
    fn the_issue_statement_changes_no_table_and_loses_its_password() {
        let sql = "CREATE USER qa_u4 IDENTIFIED BY 'Leak TABLE t '";
        assert!(targets(sql).is_empty());
        assert_eq!(redact(sql, Dialect::default()), "CREATE USER qa_u4 IDENTIFIED BY '?'");
    }

    #[test]
    fn only_statements_that_can_change_a_table_have_targets() {
        for sql in [
            "GRANT SELECT ON shop.t TO 'u'@'%' IDENTIFIED BY 'pw'",
            "SET PASSWORD FOR 'u'@'%' = PASSWORD('TABLE t')",
            "ALTER USER u IDENTIFIED BY 'TABLE t'",
            "CREATE VIEW v AS SELECT * FROM t",
            "CREATE DEFINER=`root`@`%` TRIGGER tr BEFORE INSERT ON t FOR EACH ROW SET NEW.a = 1",
            "CREATE PROCEDURE p() ALTER TABLE t ADD COLUMN x int",
            "CREATE TEMPORARY TABLE t (id int)",
            "DROP TEMPORARY TABLE IF EXISTS t",
            "CREATE DATABASE x",
            "INSERT INTO t VALUES ('ALTER TABLE t')",
            "/* ALTER TABLE t */ CREATE USER u",
            "-- ALTER TABLE t\nCREATE USER u",
            "# ALTER TABLE t\nCREATE USER u",
            "CREATE OR DROP TABLE t",
            "",
        ] {
            assert!(targets(sql).is_empty(), "{sql}");
        }
    }

    #[test]
    fn table_statements_name_every_table_they_change() {
        assert_eq!(targets("ALTER TABLE orders ADD COLUMN x int"), [t("shop", "orders")]);
        assert_eq!(targets("create table if not exists `b`.`t`(id int)"), [t("b", "t")]);
        assert_eq!(targets("CREATE OR REPLACE TABLE t (id int)"), [t("shop", "t")]);
        assert_eq!(targets("DROP TABLE IF EXISTS `t` /* generated by server */"), [t("shop", "t")]);
        assert_eq!(targets("DROP TABLE a, b.c, `d`"), [t("shop", "a"), t("b", "c"), t("shop", "d")]);
        assert_eq!(
            targets("RENAME TABLE a TO b, c TO d"),
            [t("shop", "a"), t("shop", "b"), t("shop", "c"), t("shop", "d")]
        );
        assert_eq!(targets("TRUNCATE TABLE x.y"), [t("x", "y")]);
        assert_eq!(targets("TRUNCATE y"), [t("shop", "y")]);
        assert_eq!(targets("ALTER ONLINE IGNORE TABLE t ENGINE=InnoDB"), [t("shop", "t")]);
        assert_eq!(targets("ALTER TABLE t RENAME TO u"), [t("shop", "t"), t("shop", "u")]);
        assert_eq!(targets("ALTER TABLE t RENAME COLUMN a TO b"), [t("shop", "t")]);
        assert_eq!(targets("CREATE UNIQUE INDEX i USING BTREE ON db.t (a)"), [t("db", "t")]);
        assert_eq!(targets("CREATE INDEX IF NOT EXISTS `on` ON t (a)"), [t("shop", "t")]);
        assert_eq!(targets("DROP INDEX IF EXISTS i ON `t`"), [t("shop", "t")]);
        assert_eq!(targets("/*!40000 ALTER TABLE `t` DISABLE KEYS */"), [t("shop", "t")]);
        assert_eq!(targets("/*M!100100 ALTER TABLE t ADD x int */"), [t("shop", "t")]);
        assert_eq!(targets("ALTER TABLE t ADD COLUMN c varchar(9) DEFAULT '; DROP TABLE u; '"), [t("shop", "t")]);
    }

    #[test]
    fn quoted_names_keep_their_dots_and_quotes() {
        assert_eq!(targets("ALTER TABLE `my.db`.`a.b` ADD x int"), [t("my.db", "a.b")]);
        assert_eq!(targets("ALTER TABLE `we``ird` ADD x int"), [t("shop", "we`ird")]);
        assert_eq!(targets("ALTER TABLE db . t ADD x int"), [t("db", "t")]);
        let ansi = Dialect { ansi_quotes: true, backslash_escapes: true };
        assert_eq!(ddl_targets("shop", "ALTER TABLE \"d\".\"t\" ADD x int", ansi), [t("d", "t")]);
        // Without ANSI_QUOTES a double-quoted word is a string, never a name.
        assert!(targets("ALTER TABLE \"t\" ADD x int").is_empty());
    }

    #[test]
    fn every_quote_comment_and_escape_form_is_redacted() {
        let d = Dialect::default();
        assert_eq!(
            redact("ALTER TABLE t ADD c varchar(9) DEFAULT 'it''s'", d),
            "ALTER TABLE t ADD c varchar(9) DEFAULT '?'"
        );
        assert_eq!(
            redact(r"ALTER TABLE t ADD c text DEFAULT 'a\'b' , d int", d),
            "ALTER TABLE t ADD c text DEFAULT '?' , d int"
        );
        assert_eq!(redact(r#"ALTER TABLE t COMMENT "say \"hi\"" "#, d), "ALTER TABLE t COMMENT '?'");
        assert_eq!(redact(r#"ALTER TABLE t COMMENT "a""b""#, d), "ALTER TABLE t COMMENT '?'");
        assert_eq!(
            redact("ALTER TABLE t ADD b binary(2) DEFAULT x'00ff'", d),
            "ALTER TABLE t ADD b binary(2) DEFAULT x'?'"
        );
        assert_eq!(redact("ALTER TABLE `it's` ADD x int", d), "ALTER TABLE `it's` ADD x int");
        assert_eq!(redact("ALTER TABLE t /* pw 'x' */ ADD x int -- secret\n", d), "ALTER TABLE t   ADD x int");
        assert_eq!(redact("ALTER TABLE t ADD x int # secret", d), "ALTER TABLE t ADD x int");
        assert_eq!(redact("SELECT 5--3", d), "SELECT 5--3", "-- needs a space to start a comment");
        assert_eq!(
            redact("/*!50100 ALTER TABLE t COMMENT 'x' */", d),
            "/*!50100 ALTER TABLE t COMMENT '?' */",
            "a versioned comment is code"
        );
        assert_eq!(redact("ALTER TABLE t COMMENT 'never closed", d), "ALTER TABLE t COMMENT '?'");
        assert_eq!(
            redact("ALTER TABLE t ADD c varchar(9) DEFAULT '; DROP TABLE u; '", d),
            "ALTER TABLE t ADD c varchar(9) DEFAULT '?'"
        );
        let ansi = Dialect { ansi_quotes: true, backslash_escapes: true };
        assert_eq!(redact("ALTER TABLE \"t\" COMMENT 'x'", ansi), "ALTER TABLE \"t\" COMMENT '?'");
    }

    #[test]
    fn no_backslash_escapes_ends_a_string_at_its_quote() {
        // Read with backslash escapes, the first literal would swallow the
        // comma and leave `secret` outside any string.
        let sql = r"ALTER TABLE t ADD a varchar(9) DEFAULT 'x\', ADD b varchar(9) DEFAULT 'secret'";
        let plain = Dialect { ansi_quotes: false, backslash_escapes: false };
        let redacted = redact(sql, plain);
        assert_eq!(redacted, "ALTER TABLE t ADD a varchar(9) DEFAULT '?', ADD b varchar(9) DEFAULT '?'");
    }
}
