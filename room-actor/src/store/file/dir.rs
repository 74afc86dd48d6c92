//! The data directory: the names of roomd's files in it, making it private to roomd's
//! user (it holds every game's seed) and the lock that keeps it to one roomd. Apart from
//! the database because this is about files and their modes, not SQL; the gateway keeps
//! its token secret's file private with the same [`secure_data_dir`].

use super::OpenError;
use std::path::Path;
use tracing::{info, warn};

/// The database file inside the data directory.
pub const DB_FILE: &str = "roomd.sqlite3";
/// The files SQLite keeps beside the database: its write-ahead log, the log's index and
/// a rollback journal (an older run may have left one).
const DB_SIDE_FILES: [&str; 3] = ["-wal", "-shm", "-journal"];
/// The file whose lock keeps a data directory to one roomd at a time (held by the store
/// thread; the kernel lets it go when the process dies).
pub const LOCK_FILE: &str = "roomd.lock";

/// Makes the data directory `dir` private to roomd's user: created 0700 (its parents as
/// the umask says) or, when it exists, tightened to 0700, and the store's files in it
/// (and `extra`, other files roomd keeps there) tightened to 0600 when others may read
/// them. What was tightened is logged once, at info. A directory roomd does not own (a
/// volume's root) cannot be changed: that is a warning, not a refusal to start. Elsewhere
/// than on unix the directory is only created.
pub fn secure_data_dir(dir: &Path, extra: &[&str]) -> std::io::Result<()> {
    if !dir.exists() {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(dir) {
            Ok(()) => {}
            // Another process made it meanwhile: tightened below like any existing one.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    #[cfg(unix)]
    {
        let mut tightened = Vec::new();
        tighten(dir, 0o700, &mut tightened)?;
        let db_files = std::iter::once(DB_FILE.to_owned()).chain(DB_SIDE_FILES.iter().map(|s| format!("{DB_FILE}{s}")));
        for name in db_files.chain(extra.iter().map(|s| (*s).to_owned())) {
            tighten(&dir.join(name), 0o600, &mut tightened)?;
        }
        if !tightened.is_empty() {
            info!(
                dir = %dir.display(),
                tightened = ?tightened,
                "data directory made private to roomd's user (it holds game seeds and may hold the token secret)"
            );
        }
    }
    Ok(())
}

/// Sets `path` (followed if it is a link) to `mode` when it grants anything to group or
/// others; a missing file is fine. Changed paths are added to `tightened`. A change the
/// system refuses (not the owner, a read-only volume) is a warning: the store still works.
#[cfg(unix)]
fn tighten(path: &Path, mode: u32, tightened: &mut Vec<String>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let before = meta.permissions().mode() & 0o7777;
    if before & 0o077 == 0 {
        return Ok(());
    }
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        Ok(()) => tightened.push(format!("{} {before:o} -> {mode:o}", path.display())),
        Err(e) => warn!(
            path = %path.display(),
            mode = format!("{before:o}"),
            error = %e,
            "cannot make this private to roomd's user: others may read game seeds or the token secret"
        ),
    }
    Ok(())
}

/// Creates `path` empty with mode 0600 (on unix) unless it exists.
pub(super) fn create_private_file(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path).map(drop)
}

/// Takes the data directory's lock ([`LOCK_FILE`]): `Locked` while another roomd (or
/// a store of this process not yet closed) holds it.
pub(super) fn lock_dir(dir: &Path, file: &Path) -> Result<std::fs::File, OpenError> {
    let path = dir.join(LOCK_FILE);
    let open_err = |e: std::io::Error| OpenError::Open { file: path.clone(), reason: e.to_string() };
    let mut options = std::fs::OpenOptions::new();
    options.create(true).truncate(false).read(true).write(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let lock = options.open(&path).map_err(open_err)?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(OpenError::Locked {
            file: file.to_owned(),
            reason: format!("{} is locked: another roomd uses this data directory", path.display()),
        }),
        Err(std::fs::TryLockError::Error(e)) => Err(open_err(e)),
    }
}
