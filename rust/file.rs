//! Opening input files (segments, checkpoints): regular files only.

use std::fs::{self, File};
use std::io;
use std::path::Path;

use crate::{Error, Result};

/// Open `path` for reading if it is a regular file (symlinks followed). A directory is an `Io`
/// error of kind `IsADirectory`; a FIFO, socket or device is `InvalidArgument`. Checked before
/// `open`, which would block forever on a FIFO with no writer, and a device would read as empty
/// (its size is 0) or never end.
pub fn open_regular(path: &Path) -> Result<File> {
    let meta = fs::metadata(path)?;
    if meta.is_dir() {
        return Err(Error::Io(io::Error::new(
            io::ErrorKind::IsADirectory,
            format!("{} is a directory, not a file", path.display()),
        )));
    }
    if !meta.is_file() {
        return Err(Error::invalid(format!(
            "{} is not a regular file (a FIFO, socket or device)",
            path.display()
        )));
    }
    Ok(File::open(path)?)
}
