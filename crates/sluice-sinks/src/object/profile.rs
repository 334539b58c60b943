//! Keys from the AWS shared credentials file, the one link of the
//! standard credential chain the S3 client does not follow itself
//! (it reads the environment, web identity, container credentials and
//! instance metadata).
//!
//! The file is `AWS_SHARED_CREDENTIALS_FILE`, else `~/.aws/credentials`;
//! the profile is `AWS_PROFILE`, else `default`.

use std::path::PathBuf;

use sluice_core::settings::Secret;

/// One profile's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileKeys {
    pub access_key_id: Secret,
    pub secret_access_key: Secret,
    pub session_token: Secret,
}

/// The keys of `profile` in an INI text, if it has both keys.
pub fn parse(text: &str, profile: &str) -> Option<ProfileKeys> {
    let mut in_profile = false;
    let (mut access, mut secret, mut token) = (None, None, None);
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            in_profile = name.trim() == profile;
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        if !in_profile {
            continue;
        }
        let value = Secret::new(value.trim());
        match key.trim() {
            "aws_access_key_id" => access = Some(value),
            "aws_secret_access_key" => secret = Some(value),
            "aws_session_token" => token = Some(value),
            _ => {}
        }
    }
    Some(ProfileKeys { access_key_id: access?, secret_access_key: secret?, session_token: token.unwrap_or_default() })
}

/// Where the profile comes from, as the environment says.
pub struct ProfileSource {
    pub path: PathBuf,
    pub profile: String,
    /// `AWS_PROFILE` named it: a missing profile is an error, not a pass.
    pub named: bool,
}

impl ProfileSource {
    pub fn from_env() -> Option<Self> {
        let path = match std::env::var_os("AWS_SHARED_CREDENTIALS_FILE") {
            Some(path) => PathBuf::from(path),
            None => PathBuf::from(std::env::var_os("HOME")?).join(".aws").join("credentials"),
        };
        let named = std::env::var("AWS_PROFILE").ok().filter(|p| !p.is_empty());
        Some(Self { path, profile: named.clone().unwrap_or_else(|| "default".to_string()), named: named.is_some() })
    }

    /// The profile's keys; `Ok(None)` when there is no file or no such
    /// profile and none was asked for by name.
    pub fn keys(&self) -> Result<Option<ProfileKeys>, String> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !self.named => return Ok(None),
            Err(e) => return Err(format!("cannot read the AWS credentials file {}: {e}", self.path.display())),
        };
        match parse(&text, &self.profile) {
            Some(keys) => Ok(Some(keys)),
            None if self.named => Err(format!(
                "AWS_PROFILE names profile {:?}, which {} does not hold with aws_access_key_id and aws_secret_access_key",
                self.profile,
                self.path.display()
            )),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# comment\n[default]\naws_access_key_id = AKD\naws_secret_access_key = SD\n\n[ci]\naws_access_key_id=AKC\naws_secret_access_key=SC\naws_session_token=TC\n[half]\naws_access_key_id=X\n";

    #[test]
    fn a_profile_is_read_by_name_with_its_token() {
        let ci = parse(FILE, "ci").unwrap();
        assert_eq!(ci.access_key_id.expose(), "AKC");
        assert_eq!(ci.session_token.expose(), "TC");
        let default = parse(FILE, "default").unwrap();
        assert_eq!(default.secret_access_key.expose(), "SD");
        assert_eq!(default.session_token.expose(), "");
    }

    #[test]
    fn a_missing_or_half_profile_gives_nothing() {
        assert_eq!(parse(FILE, "nope"), None);
        assert_eq!(parse(FILE, "half"), None);
    }
}
