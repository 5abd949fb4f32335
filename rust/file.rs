//! Opening input files (segments, checkpoints): regular files only, read with positioned reads.

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

/// A regular file read with positioned reads, never mapped: a file that shrinks or disappears
/// while it is read (retention deleting a segment, a truncation on a live broker) gives a short
/// read, which the readers report as a typed error or a partial tail, where a mapping would fault
/// the whole process (SIGBUS). The length is the one seen at open: bytes appended later are not read.
#[derive(Debug)]
pub struct InputFile {
    file: File,
    len: u64,
}

impl InputFile {
    pub fn open(path: &Path) -> Result<InputFile> {
        let file = open_regular(path)?;
        let len = file.metadata()?.len();
        Ok(InputFile { file, len })
    }

    /// Length when opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Fill `buf` from `position`; fewer bytes (down to 0) only at the file's current end.
    pub fn read_at(&self, position: u64, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while let Some(rest) = buf.get_mut(done..).filter(|r| !r.is_empty()) {
            match positioned_read(&self.file, rest, position + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(done)
    }
}

#[cfg(unix)]
fn positioned_read(file: &File, buf: &mut [u8], position: u64) -> io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, buf, position)
}

#[cfg(windows)]
fn positioned_read(file: &File, buf: &mut [u8], position: u64) -> io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, buf, position)
}
