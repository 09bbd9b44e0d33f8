//! The node's data dir: every file and folder in it, the lock that keeps one node per dir,
//! and the two folders through which files cross the control API. Paths a caller hands the
//! API are confined to those folders (symlinks resolved), and the node's secrets are
//! refused even when an operator points a folder at the data dir itself.

use std::fs;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

pub const LOCK_FILE: &str = "node.lock";
pub const BLOB_DIR: &str = "blobs";
/// The libp2p identity (ed25519), 0600.
pub const IDENTITY_FILE: &str = "identity.key";
/// The Ethereum keystore folder and its one file.
pub const KEYSTORE_DIR: &str = "keystore";
pub const KEYSTORE_FILE: &str = "node.json";
/// The client's job specs, written before `createJob` so a restart can re-offer them.
pub const SPECS_DIR: &str = "specs";
/// The chain follower's cursor.
pub const CURSOR_DIR: &str = "chain";
/// Job data while it is unpacked and loaded, one folder per spec hash; each is removed once
/// its job is in memory, so nothing here outlives a build.
pub const JOBS_DIR: &str = "jobs";
/// Default folder the API imports blobs from.
pub const IMPORT_DIR: &str = "import";
/// Default folder the API exports blobs to.
pub const EXPORT_DIR: &str = "export";
pub use gpuchain_api::{ADDR_FILE as API_ADDR_FILE, TOKEN_FILE as API_TOKEN_FILE};

/// The libp2p identity file of the data dir at `root`.
pub fn identity_file(root: &Path) -> PathBuf {
    root.join(IDENTITY_FILE)
}

pub fn keystore_dir(root: &Path) -> PathBuf {
    root.join(KEYSTORE_DIR)
}

pub fn specs_dir(root: &Path) -> PathBuf {
    root.join(SPECS_DIR)
}

pub fn cursor_dir(root: &Path) -> PathBuf {
    root.join(CURSOR_DIR)
}

/// The folder a job is unpacked into (see [`JOBS_DIR`]).
pub fn job_dir(root: &Path, spec_hash: &[u8]) -> PathBuf {
    root.join(JOBS_DIR).join(hex::encode(spec_hash))
}

/// Where a job's dataset and eval set are unpacked.
pub fn job_data_dir(root: &Path, spec_hash: &[u8]) -> PathBuf {
    job_dir(root, spec_hash).join("data")
}

#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
    import: PathBuf,
    export: PathBuf,
    /// Files outside the data dir that are as secret as its keys (the password file).
    extra_secrets: Vec<PathBuf>,
}

impl DataDir {
    /// Creates the dir (and the default import/export folders) if missing.
    pub fn prepare(
        root: &Path,
        import: Option<&Path>,
        export: Option<&Path>,
        extra_secrets: Vec<PathBuf>,
    ) -> Result<Self> {
        if root.exists() && !root.is_dir() {
            bail!(
                "data dir {} exists but is not a directory; pass --data-dir with a directory path",
                root.display()
            );
        }
        fs::create_dir_all(root).with_context(|| {
            format!(
                "cannot create data dir {}: check that its parent exists and is writable",
                root.display()
            )
        })?;
        let folder = |given: Option<&Path>, default: &str, flag: &str| -> Result<PathBuf> {
            let dir = given.map_or_else(|| root.join(default), Path::to_path_buf);
            fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create the {flag} folder {}", dir.display()))?;
            dir.canonicalize()
                .with_context(|| format!("cannot resolve the {flag} folder {}", dir.display()))
        };
        let import = folder(import, IMPORT_DIR, "--blob-import-dir")?;
        let export = folder(export, EXPORT_DIR, "--blob-export-dir")?;
        Ok(Self {
            root: root.to_path_buf(),
            import,
            export,
            extra_secrets,
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn blobs(&self) -> PathBuf {
        self.root.join(BLOB_DIR)
    }

    pub fn api_addr_file(&self) -> PathBuf {
        self.root.join(API_ADDR_FILE)
    }

    pub fn import_dir(&self) -> &Path {
        &self.import
    }

    pub fn export_dir(&self) -> &Path {
        &self.export
    }

    /// One node per dir: an OS file lock, released by the OS even after `kill -9`.
    pub fn lock(&self) -> Result<fs::File> {
        let path = self.root.join(LOCK_FILE);
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| {
                format!(
                    "cannot write to data dir {}: check its permissions (the node needs to create files in it)",
                    self.root.display()
                )
            })?;
        match file.try_lock() {
            Ok(()) => {
                // What a crash mid-build left unpacked: ours to remove now that no other
                // node can be using this dir.
                let jobs = self.root.join(JOBS_DIR);
                if jobs.exists()
                    && let Err(e) = fs::remove_dir_all(&jobs)
                {
                    tracing::warn!(dir = %jobs.display(), error = %e, "cannot remove job data left by an earlier run");
                }
                Ok(file)
            }
            Err(fs::TryLockError::WouldBlock) => bail!(
                "data dir {} is in use by another gpuchain node; stop it or pick another --data-dir",
                self.root.display()
            ),
            Err(fs::TryLockError::Error(e)) => Err(anyhow!("cannot lock {}: {e}", path.display())),
        }
    }

    /// What must never leave the node through the API, resolved.
    fn secrets(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = [
            IDENTITY_FILE,
            KEYSTORE_DIR,
            API_TOKEN_FILE,
            LOCK_FILE,
            BLOB_DIR,
        ]
        .iter()
        .map(|f| self.root.join(f))
        .chain(self.extra_secrets.iter().cloned())
        .filter_map(|p| p.canonicalize().ok())
        .collect();
        v.sort();
        v
    }

    /// A file the API may import: an existing regular file inside the import folder (after
    /// resolving symlinks), and none of the node's secrets.
    pub fn import_path(&self, given: &Path) -> Result<PathBuf> {
        let joined = self.import.join(given);
        let real = joined.canonicalize().with_context(|| {
            format!(
                "cannot read {}: put the file in the import folder {} first",
                given.display(),
                self.import.display()
            )
        })?;
        if !real.starts_with(&self.import) {
            bail!(
                "{} is outside the import folder {}; the API only imports files from there (see --blob-import-dir)",
                given.display(),
                self.import.display()
            );
        }
        self.refuse_secret(&real, given)?;
        if !real.is_file() {
            bail!("{} is not a regular file", given.display());
        }
        Ok(real)
    }

    /// Where the API may write a blob: a plain file name or a relative path inside the
    /// export folder. Missing folders below it are created; nothing may climb out of it,
    /// and an existing symlink is not followed.
    pub fn export_path(&self, given: &Path) -> Result<PathBuf> {
        let rel = if given.is_absolute() {
            given.strip_prefix(&self.export).map_err(|_| {
                anyhow!(
                    "{} is outside the export folder {}; the API only writes there (see --blob-export-dir)",
                    given.display(),
                    self.export.display()
                )
            })?
        } else {
            given
        };
        if rel.as_os_str().is_empty()
            || rel.components().any(|c| !matches!(c, Component::Normal(_)))
        {
            bail!(
                "export path {}: give a file name inside the export folder {}, without `..`",
                given.display(),
                self.export.display()
            );
        }
        // Walk down without following anything: a symlink anywhere on the way could lead
        // out of the folder, and creating folders through one would already write outside.
        let mut dir = self.export.clone();
        let mut parts: Vec<&std::ffi::OsStr> = rel.iter().collect();
        let file_name = parts
            .pop()
            .ok_or_else(|| anyhow!("export path {} names no file", given.display()))?;
        for part in parts {
            dir.push(part);
            match fs::symlink_metadata(&dir) {
                Ok(m) if m.file_type().is_symlink() => bail!(
                    "export path {} goes through the symlink {}; the API does not follow links",
                    given.display(),
                    dir.display()
                ),
                Ok(m) if !m.is_dir() => bail!("{} is not a folder", dir.display()),
                Ok(_) => {}
                Err(_) => fs::create_dir(&dir)
                    .with_context(|| format!("cannot create {}", dir.display()))?,
            }
        }
        let target = dir.join(file_name);
        if fs::symlink_metadata(&target).is_ok_and(|m| m.file_type().is_symlink()) {
            bail!(
                "export path {} is a symlink; remove it or pick another name",
                given.display()
            );
        }
        self.refuse_secret(&target, given)?;
        Ok(target)
    }

    fn refuse_secret(&self, real: &Path, given: &Path) -> Result<()> {
        if self.secrets().iter().any(|s| real.starts_with(s)) {
            bail!(
                "{} is one of the node's own secrets or stores (keys, API token, blob store); the API never reads or writes those",
                given.display()
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> (tempfile::TempDir, DataDir) {
        let t = tempfile::tempdir().expect("tmp");
        let d = DataDir::prepare(&t.path().join("node"), None, None, Vec::new()).expect("prepare");
        (t, d)
    }

    #[test]
    fn imports_only_regular_files_inside_the_import_folder() {
        let (t, d) = dir();
        fs::write(d.import_dir().join("ok.bin"), b"x").expect("write");
        assert!(d.import_path(Path::new("ok.bin")).is_ok());
        assert!(d.import_path(&d.import_dir().join("ok.bin")).is_ok());
        fs::write(t.path().join("outside"), b"x").expect("write");
        for bad in [
            t.path().join("outside"),
            PathBuf::from("../../outside"),
            PathBuf::from("missing"),
            PathBuf::from("."),
        ] {
            assert!(d.import_path(&bad).is_err(), "{}", bad.display());
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(t.path().join("outside"), d.import_dir().join("link"))
                .expect("symlink");
            assert!(d.import_path(Path::new("link")).is_err());
        }
    }

    #[test]
    fn secrets_are_refused_even_when_the_import_folder_is_the_data_dir() {
        let t = tempfile::tempdir().expect("tmp");
        let root = t.path().join("node");
        fs::create_dir_all(root.join(KEYSTORE_DIR)).expect("mkdir");
        fs::write(root.join(KEYSTORE_DIR).join(KEYSTORE_FILE), b"{}").expect("w");
        fs::write(root.join(IDENTITY_FILE), b"k").expect("w");
        fs::write(root.join(API_TOKEN_FILE), b"t").expect("w");
        let pw = t.path().join("pw");
        fs::write(&pw, b"secret").expect("w");
        let d = DataDir::prepare(&root, Some(t.path()), None, vec![pw]).expect("prepare");
        for secret in [
            "node/keystore/node.json",
            "node/identity.key",
            "node/api.token",
            "pw",
        ] {
            let e = d.import_path(Path::new(secret)).expect_err(secret);
            assert!(format!("{e:#}").contains("secrets"), "{secret}: {e:#}");
        }
    }

    #[test]
    fn exports_stay_inside_the_export_folder() {
        let (t, d) = dir();
        let ok = d.export_path(Path::new("sub/dir/out.bin")).expect("nested");
        assert!(ok.starts_with(d.export_dir()));
        assert!(d.export_path(&d.export_dir().join("a.bin")).is_ok());
        for bad in [
            t.path().join("x"),
            PathBuf::from("../x"),
            PathBuf::from("a/../../x"),
            PathBuf::from(""),
            PathBuf::from("/etc/passwd"),
        ] {
            assert!(d.export_path(&bad).is_err(), "{}", bad.display());
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(t.path(), d.export_dir().join("up")).expect("symlink");
            assert!(d.export_path(Path::new("up/x")).is_err());
            std::os::unix::fs::symlink(t.path().join("f"), d.export_dir().join("f")).expect("sl");
            assert!(d.export_path(Path::new("f")).is_err());
        }
    }
}
