//! What can go wrong with the registry, and whether waiting helps.

/// A registry error names the registry (credentials masked) and says
/// whether trying again later can help.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No answer, a timeout, or a 5xx: the registry may come back.
    #[error("schema registry {url}: {detail}")]
    Unavailable { url: String, detail: String },
    /// 401 or 403: the credentials are wrong or lack a permission.
    #[error("schema registry {url} refused the credentials ({status}): {message}")]
    Unauthorized { url: String, status: u16, message: String },
    /// Another 4xx: the request itself is refused (a schema the registry
    /// calls invalid, or one the subject's compatibility level refuses).
    #[error("schema registry {url} refused the request ({status}, error code {code}): {message}")]
    Refused { url: String, status: u16, code: i64, message: String },
    /// An answer that is not what the API promises.
    #[error("schema registry {url}: unexpected answer: {detail}")]
    Unexpected { url: String, detail: String },
}

impl RegistryError {
    /// Whether waiting and trying again can help.
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Unavailable { .. })
    }
}
