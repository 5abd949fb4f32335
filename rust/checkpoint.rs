//! The `leader-epoch-checkpoint` file (SPEC.md (a)), byte-compatible with Kafka:
//!
//! ```text
//! 0                 <- version
//! 2                 <- entry count
//! 0 0               <- "<epoch> <start_offset>"
//! 2 15
//! ```
//!
//! Reading is strict and bounded (size cap, no allocation from the claimed count); writing is atomic
//! (temp file, fsync, rename, fsync of the directory), as Kafka's `CheckpointFile` does.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::epoch_cache::{EpochEntry, LeaderEpochCache};
use crate::{Error, Result};

/// The only version Kafka has ever written.
pub const VERSION: i32 = 0;
/// Files above this size are rejected: a real checkpoint holds a few lines per leader change.
pub const MAX_FILE_SIZE: u64 = 64 * 1024 * 1024;

/// Parse checkpoint text into its raw entries, in file order (no repair; see [`read`]).
/// An empty input or a version-only file has no entries.
pub fn parse(bytes: &[u8]) -> Result<Vec<EpochEntry>> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = bytes
            .get(..e.valid_up_to())
            .map_or(0, |ok| ok.iter().filter(|&&b| b == b'\n').count())
            + 1;
        Error::checkpoint(line, "not valid UTF-8")
    })?;
    // `lines()` accepts "\n" and "\r\n" and a missing final newline, like Java's readLine.
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let Some((_, version)) = lines.next() else {
        return Ok(Vec::new());
    };
    match version.trim().parse::<i32>() {
        Ok(VERSION) => {}
        Ok(other) => {
            return Err(Error::checkpoint(
                1,
                format!("unsupported version {other}, expected {VERSION}"),
            ))
        }
        Err(_) => {
            return Err(Error::checkpoint(
                1,
                format!("version {version:?} is not an integer"),
            ))
        }
    }
    let Some((_, count)) = lines.next() else {
        return Ok(Vec::new());
    };
    // The claimed count is only compared, never used to size an allocation.
    let expected: usize = count.trim().parse().map_err(|_| {
        Error::checkpoint(
            2,
            format!("entry count {count:?} is not a non-negative integer"),
        )
    })?;
    let entries = lines
        .map(|(n, line)| parse_entry(n, line))
        .collect::<Result<Vec<_>>>()?;
    if entries.len() != expected {
        return Err(Error::checkpoint(
            2,
            format!(
                "entry count says {expected} but the file has {} entries",
                entries.len()
            ),
        ));
    }
    Ok(entries)
}

fn parse_entry(line_no: usize, line: &str) -> Result<EpochEntry> {
    let mut fields = line.split_whitespace();
    let (Some(epoch), Some(offset), None) = (fields.next(), fields.next(), fields.next()) else {
        return Err(Error::checkpoint(
            line_no,
            format!("expected \"<epoch> <start_offset>\", got {line:?}"),
        ));
    };
    let epoch: i32 = epoch.parse().map_err(|_| {
        Error::checkpoint(line_no, format!("epoch {epoch:?} is not a 32-bit integer"))
    })?;
    let start_offset: i64 = offset.parse().map_err(|_| {
        Error::checkpoint(
            line_no,
            format!("start offset {offset:?} is not a 64-bit integer"),
        )
    })?;
    if epoch < 0 || start_offset < 0 {
        return Err(Error::checkpoint(
            line_no,
            format!("negative epoch or start offset in {line:?}"),
        ));
    }
    Ok(EpochEntry::new(epoch, start_offset))
}

/// Render entries in Kafka's format.
pub fn format(entries: &[EpochEntry]) -> String {
    use std::fmt::Write as _;
    let mut out = format!("{VERSION}\n{}\n", entries.len());
    for e in entries {
        // Writing into a String cannot fail.
        let _ = writeln!(out, "{} {}", e.epoch, e.start_offset);
    }
    out
}

/// Load a checkpoint file, replaying its entries through `assign` as Kafka does on startup (which
/// repairs a non-monotonic file in memory). A missing file is an `Io` error (`NotFound`), and so is a
/// directory (`IsADirectory`); a FIFO or device is `InvalidArgument` (see [`crate::file::open_regular`]).
pub fn read(path: &Path) -> Result<LeaderEpochCache> {
    let file = crate::file::open_regular(path)?;
    let mut bytes = Vec::new();
    // Read one byte past the cap so an oversized file (or one growing under us) is detected.
    file.take(MAX_FILE_SIZE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(Error::checkpoint(
            0,
            format!("file is larger than {MAX_FILE_SIZE} bytes"),
        ));
    }
    let entries = parse(&bytes)?;
    LeaderEpochCache::from_entries(entries.into_iter().map(|e| (e.epoch, e.start_offset)))
}

/// Atomically replace `path` with the checkpoint of `entries`: write `<path>.tmp`, fsync it, rename
/// it over `path`, fsync the directory so the rename itself is durable.
pub fn write(path: &Path, entries: &[EpochEntry]) -> Result<()> {
    let tmp = tmp_path(path);
    let result =
        write_synced(&tmp, format(entries).as_bytes()).and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = result {
        // Best effort: do not leave a half-written temp file behind.
        let _ = fs::remove_file(&tmp);
        return Err(e.into());
    }
    sync_parent_dir(path)?;
    Ok(())
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".tmp");
    PathBuf::from(name)
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = File::create(path)?;
    file.write_all(bytes)?;
    file.flush()?;
    file.sync_all()
}

#[cfg(unix)]
fn sync_parent_dir(path: &Path) -> std::io::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)?.sync_all()
}

// Directories cannot be opened for fsync on Windows; Kafka skips this step there too.
#[cfg(not(unix))]
fn sync_parent_dir(_path: &Path) -> std::io::Result<()> {
    Ok(())
}
