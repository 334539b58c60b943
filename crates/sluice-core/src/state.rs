//! Named state that sources and the coordinator keep beside the
//! checkpoints: a MySQL source's schema history, incremental-snapshot
//! progress, a slot's confirmed position, detach marks.
//!
//! It lives where the checkpoints live: files in the data dir for the
//! embedded store, or rows of the PostgreSQL store, so an instance that
//! takes over a pipeline finds what the last one left.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::StoreError;

/// Durable named blobs. Names are relative paths with `/` separators.
///
/// Contract: a returned `Ok` survives a kill -9; `write` replaces a value
/// whole or not at all; `append_line` adds one line whole or not at all,
/// as far as a later `read` can tell (a torn line of a file is followed by
/// a line break before the next, so it never spoils the next line).
pub trait StateStore: Send + Sync {
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError>;
    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError>;
    /// Appends `line` and a line break.
    fn append_line(&self, name: &str, line: &[u8]) -> Result<(), StoreError>;
    /// Returns whether the name existed.
    fn remove(&self, name: &str) -> Result<bool, StoreError>;
    /// Every stored name under `dir` (one level down), sorted.
    fn list(&self, dir: &str) -> Result<Vec<String>, StoreError>;
    /// Where `name` is kept, for messages: a path, or a store and a name.
    fn locate(&self, name: &str) -> String;
}

/// One part of a [`StateStore`]: a source's or a pipeline's own names.
#[derive(Clone)]
pub struct StateDir {
    store: Arc<dyn StateStore>,
    prefix: String,
}

impl std::fmt::Debug for StateDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StateDir({})", self.store.locate(&self.prefix))
    }
}

impl StateDir {
    pub fn new(store: Arc<dyn StateStore>, prefix: impl Into<String>) -> Self {
        Self { store, prefix: prefix.into() }
    }

    /// Files under `root`, for tests and the embedded store.
    pub fn files(root: impl Into<PathBuf>) -> Self {
        Self::new(Arc::new(FileState::new(root)), "")
    }

    pub fn child(&self, name: &str) -> Self {
        Self { store: self.store.clone(), prefix: self.name(name) }
    }

    fn name(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_string() } else { format!("{}/{name}", self.prefix) }
    }

    pub fn read(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.store.read(&self.name(name))
    }

    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.store.write(&self.name(name), bytes)
    }

    pub fn append_line(&self, name: &str, line: &[u8]) -> Result<(), StoreError> {
        self.store.append_line(&self.name(name), line)
    }

    pub fn remove(&self, name: &str) -> Result<bool, StoreError> {
        self.store.remove(&self.name(name))
    }

    /// The names directly in this part, without its prefix.
    pub fn list(&self) -> Result<Vec<String>, StoreError> {
        self.store.list(&self.prefix)
    }

    pub fn locate(&self, name: &str) -> String {
        self.store.locate(&self.name(name))
    }
}

/// State as files under a root folder (the data dir): each write goes to
/// a temporary file, is synced, and renamed over the old one.
pub struct FileState {
    root: PathBuf,
}

impl FileState {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    fn path(&self, name: &str) -> PathBuf {
        name.split('/').filter(|part| !part.is_empty()).fold(self.root.clone(), |path, part| path.join(part))
    }

    fn error(&self, path: &Path, detail: &str, e: std::io::Error) -> StoreError {
        StoreError::Io { path: path.display().to_string(), detail: format!("{detail}: {e}"), cause: Some(e.into()) }
    }
}

fn create_parent(path: &Path) -> std::io::Result<()> {
    path.parent().map_or(Ok(()), std::fs::create_dir_all)
}

impl StateStore for FileState {
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let path = self.path(name);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error(&path, "cannot read", e)),
        }
    }

    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let path = self.path(name);
        let mut temporary = path.clone().into_os_string();
        temporary.push(".tmp");
        let temporary = PathBuf::from(temporary);
        let write = || -> std::io::Result<()> {
            create_parent(&path)?;
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(bytes)?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)?;
            // The rename itself is durable once the folder is synced.
            std::fs::File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
        };
        write().map_err(|e| self.error(&path, "cannot write", e))
    }

    fn append_line(&self, name: &str, line: &[u8]) -> Result<(), StoreError> {
        let path = self.path(name);
        let append = || -> std::io::Result<()> {
            create_parent(&path)?;
            let mut file = std::fs::OpenOptions::new().create(true).append(true).read(true).open(&path)?;
            let length = file.metadata()?.len();
            let mut text = Vec::with_capacity(line.len() + 2);
            if length > 0 {
                // A line torn by a crash gets its line break now.
                use std::io::{Read, Seek, SeekFrom};
                let mut last = [0u8; 1];
                file.seek(SeekFrom::Start(length - 1))?;
                file.read_exact(&mut last)?;
                if last[0] != b'\n' {
                    text.push(b'\n');
                }
            }
            text.extend_from_slice(line);
            text.push(b'\n');
            file.write_all(&text)?;
            file.sync_data()
        };
        append().map_err(|e| self.error(&path, "cannot append", e))
    }

    fn remove(&self, name: &str) -> Result<bool, StoreError> {
        let path = self.path(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.error(&path, "cannot remove", e)),
        }
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, StoreError> {
        let path = self.path(dir);
        let entries = match std::fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.error(&path, "cannot list", e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| self.error(&path, "cannot list", e))?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            if entry.file_type().is_ok_and(|t| t.is_file()) && !name.ends_with(".tmp") {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn locate(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_line_does_not_spoil_the_next() {
        let root = tempfile::tempdir().unwrap();
        let dir = StateDir::files(root.path());
        dir.append_line("log", b"whole").unwrap();
        std::fs::OpenOptions::new().append(true).open(root.path().join("log")).unwrap().write_all(b"{\"to").unwrap();
        dir.append_line("log", b"next").unwrap();
        let text = String::from_utf8(dir.read("log").unwrap().unwrap()).unwrap();
        assert_eq!(text.lines().collect::<Vec<_>>(), ["whole", "{\"to", "next"]);
    }
}
