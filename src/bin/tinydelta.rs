//! `tinydelta`: create, append, overwrite, read, describe, history, restore and vacuum tables
//! (README, "Usage"). Exit codes: 0 ok, 1 error, 2 usage, 3 conflict, 4 not found, 5 bad input.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde_json::json;
use tinydelta::{Error, Result, Schema, Table, WriteOptions};

#[derive(Parser)]
#[command(
    name = "tinydelta",
    version,
    about = "A single-node Delta-Lake-compatible table format with JSONL data files"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a table: version 0 with protocol and metaData. Columns are NAME:TYPE, TYPE one of
    /// int, float, str, bool, date, timestamp; a trailing ! means NOT NULL.
    Create {
        /// Table folder (created if missing).
        table: PathBuf,
        /// Columns, e.g. id:int! region:str year:int.
        #[arg(required = true)]
        columns: Vec<String>,
    },
    /// Append JSONL rows (from --file or stdin) as one WRITE/Append commit.
    Append {
        /// Table folder.
        table: PathBuf,
        /// Input file (default: stdin).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Commit only if the latest version is still N.
        #[arg(long, value_name = "N")]
        expect_version: Option<u64>,
        /// Idempotent append (Delta txn action): commit only if the table records a lower
        /// version for APP_ID, else exit 0 saying it was already applied.
        #[arg(long, value_name = "APP_ID:VERSION")]
        txn: Option<String>,
    },
    /// Replace all rows with the input as one WRITE/Overwrite commit.
    Overwrite {
        /// Table folder.
        table: PathBuf,
        /// Input file (default: stdin).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Commit only if the latest version is still N.
        #[arg(long, value_name = "N")]
        expect_version: Option<u64>,
    },
    /// Print a version's rows as canonical JSONL.
    Read {
        /// Table folder.
        table: PathBuf,
        /// Version to read (default: latest).
        #[arg(long, conflicts_with = "as_of")]
        version: Option<u64>,
        /// Read the newest version committed at or before TIME: RFC 3339 with a zone, a local
        /// date or date-time (2026-11-30 19:52), or a relative time (30m ago, 2h ago, 1d ago).
        #[arg(long, value_name = "TIME")]
        as_of: Option<String>,
    },
    /// Print the change feed (Delta Change Data Feed): for each version, the rows of the files
    /// it removed (`_change_type` delete), then of those it added (insert), each with
    /// `_commit_version` and `_commit_timestamp`.
    Changes {
        /// Table folder.
        table: PathBuf,
        /// First version (default: the first).
        #[arg(long, value_name = "N")]
        from_version: Option<u64>,
        /// Last version (default: the latest; with --follow, keep following past it is off).
        #[arg(long, value_name = "M")]
        to_version: Option<u64>,
        /// Keep printing new versions as they are published, until interrupted.
        #[arg(long, conflicts_with = "to_version")]
        follow: bool,
    },
    /// Show version, schema, file count, row count and bytes.
    Describe {
        /// Table folder.
        table: PathBuf,
        /// Version (default: latest).
        #[arg(long)]
        version: Option<u64>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// One line per version: version, time, operation, rows.
    History {
        /// Table folder.
        table: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Commit a new version whose snapshot equals version K's.
    Restore {
        /// Table folder.
        table: PathBuf,
        /// The version to restore.
        #[arg(long, value_name = "K")]
        version: u64,
        /// Commit only if the latest version is still N.
        #[arg(long, value_name = "N")]
        expect_version: Option<u64>,
    },
    /// Change the schema: add a nullable column (Delta ADD COLUMNS).
    Alter {
        /// Table folder.
        table: PathBuf,
        #[command(subcommand)]
        change: AlterCmd,
    },
    /// Compact the latest version's small data files into files near the target size (Delta
    /// OPTIMIZE, bin-packing): one commit with dataChange false; every version reads as before.
    Optimize {
        /// Table folder.
        table: PathBuf,
        /// Target file size (e.g. 128MiB, 1GiB, 65536; default 128MiB).
        #[arg(long, value_name = "SIZE")]
        target_size: Option<String>,
        /// Commit only if the latest version is still N.
        #[arg(long, value_name = "N")]
        expect_version: Option<u64>,
    },
    /// Check that the table is whole (git fsck style): every commit complete and contiguous,
    /// every data file present with its recorded size, checkpoints and checksums consistent.
    /// Exit 0 only when whole (warnings allowed); otherwise one line per problem.
    Check {
        /// Table folder.
        table: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Also re-read every live data file and compare its rows with its stats.
        #[arg(long)]
        deep: bool,
        /// Move a damaged newest commit aside into _delta_log/_corrupt/ (nothing else is repaired).
        #[arg(long)]
        repair: bool,
    },
    /// Delete data files removed longer ago than the retention (Delta VACUUM ... RETAIN), data
    /// files no version names, stale commit temporaries and staging leftovers.
    Vacuum {
        /// Table folder.
        table: PathBuf,
        /// Retention of removed data files (e.g. 0s, 12h, 7d; default: the table property
        /// delta.deletedFileRetentionDuration, else 7 days).
        #[arg(long, value_name = "DUR")]
        retain: Option<String>,
        /// Allow --retain below the table's retention.
        #[arg(long)]
        force: bool,
        /// Only delete orphans and leftovers older than this (e.g. 0s, 30m, 1h; default 1h).
        #[arg(long, value_name = "DUR")]
        older_than: Option<String>,
        /// List what would be deleted, delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Write a Delta table with Parquet data files that every Delta engine reads (README,
    /// "Export"): the latest version (or --version N), or with --all-versions every version
    /// with its history. Run again to continue a DEST from its last exported version.
    Export {
        /// Table folder.
        table: PathBuf,
        /// Destination folder (created if missing; an earlier export of TABLE is continued).
        dest: PathBuf,
        /// Export this version (default: the latest).
        #[arg(long, value_name = "N", conflicts_with = "all_versions")]
        version: Option<u64>,
        /// Export every version: version k of DEST holds the rows of version k of TABLE.
        #[arg(long)]
        all_versions: bool,
    },
}

#[derive(Subcommand)]
enum AlterCmd {
    /// Add a nullable column NAME:TYPE (rows written before read it as null).
    AddColumn {
        /// NAME:TYPE, e.g. note:str.
        column: String,
        /// Commit only if the latest version is still N.
        #[arg(long, value_name = "N")]
        expect_version: Option<u64>,
    },
    /// Refused: Delta needs column mapping to drop a column.
    DropColumn {
        /// The column.
        name: String,
    },
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    match run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tinydelta: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn input(file: &Option<PathBuf>) -> Result<(String, Box<dyn BufRead>)> {
    Ok(match file {
        Some(p) => {
            let f = File::open(p).map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => Error::Usage(format!("input file {} not found", p.display())),
                _ => Error::io("open", p, e),
            })?;
            (p.display().to_string(), Box::new(BufReader::with_capacity(1 << 20, f)))
        }
        None => (
            "<stdin>".to_string(),
            Box::new(BufReader::with_capacity(1 << 20, io::stdin())),
        ),
    })
}

use tinydelta::table::rfc3339_ms;

/// Whether the reader of stdout has gone (a pipe whose read end is closed reports POLLERR).
fn stdout_closed() -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let fd = rustix::stdio::stdout();
    let mut fds = [PollFd::new(&fd, PollFlags::empty())];
    let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

fn stdout_err(e: io::Error) -> Error {
    Error::io("write", "<stdout>", e)
}

fn run(cmd: Cmd) -> Result<()> {
    let mut out = io::stdout().lock();
    match cmd {
        Cmd::Create { table, columns } => {
            let schema = Schema::parse_cli(&columns)?;
            Table::create(&table, &schema)?;
            writeln!(
                out,
                "created table {} at version 0: {}",
                table.display(),
                schema.to_cli_string()
            )
            .map_err(stdout_err)?;
        }
        Cmd::Append {
            table,
            file,
            expect_version,
            txn: Some(txn),
        } => {
            let (app, version) = txn
                .rsplit_once(':')
                .and_then(|(a, v)| Some((a, v.parse::<i64>().ok()?)))
                .filter(|(a, v)| !a.is_empty() && *v >= 0)
                .ok_or_else(|| {
                    Error::Usage(format!(
                        "--txn {txn:?} is not APP_ID:VERSION (a non-empty id and a version from 0), e.g. etl:5"
                    ))
                })?;
            let t = Table::open(&table)?;
            let (name, reader) = input(&file)?;
            let opts = WriteOptions {
                expect_version,
                ..Default::default()
            };
            match t.append_txn(&name, reader, &opts, app, version)? {
                tinydelta::table::TxnOutcome::Committed(v) => {
                    let rows = t.snapshot_rows_added(v)?;
                    writeln!(
                        out,
                        "appended {rows} rows to {} as version {v} (txn {app}:{version})",
                        table.display()
                    )
                }
                tinydelta::table::TxnOutcome::AlreadyApplied { recorded } => writeln!(
                    out,
                    "txn {app}:{version} was already applied to {} (it records version {recorded} for {app}); nothing committed",
                    table.display()
                ),
                tinydelta::table::TxnOutcome::NoRows => writeln!(out, "nothing committed to {}", table.display()),
            }
            .map_err(stdout_err)?;
        }
        Cmd::Append {
            table,
            file,
            expect_version,
            txn: None,
        } => {
            let t = Table::open(&table)?;
            let (name, reader) = input(&file)?;
            let opts = WriteOptions {
                expect_version,
                ..Default::default()
            };
            match t.append(&name, reader, &opts)? {
                Some(v) => {
                    let rows = t.snapshot_rows_added(v)?;
                    writeln!(out, "appended {rows} rows to {} as version {v}", table.display())
                }
                None => writeln!(out, "no rows in {name}; nothing committed to {}", table.display()),
            }
            .map_err(stdout_err)?;
        }
        Cmd::Overwrite {
            table,
            file,
            expect_version,
        } => {
            let t = Table::open(&table)?;
            let (name, reader) = input(&file)?;
            let opts = WriteOptions {
                expect_version,
                ..Default::default()
            };
            let v = t.overwrite(&name, reader, &opts)?;
            let rows = t.snapshot_rows_added(v)?;
            writeln!(out, "overwrote {} with {rows} rows as version {v}", table.display()).map_err(stdout_err)?;
        }
        Cmd::Read { table, version, as_of } => {
            let t = Table::open(&table)?;
            let v = match (version, as_of) {
                (Some(v), _) => v,
                (None, Some(time)) => {
                    let ms = tinydelta::timespec::parse(&time, tinydelta::commit::now_ms())
                        .map_err(|e| Error::Usage(format!("--as-of {e}")))?;
                    let time = match rfc3339_ms(ms) {
                        r if r == time => time,
                        r => format!("{time} ({r})"),
                    };
                    match t.version_as_of(ms)? {
                        Some(v) => v,
                        None => {
                            return Err(Error::NoVersionAsOf {
                                table: table.clone(),
                                time,
                                first: rfc3339_ms(t.commit_info(t.segment()?.first)?.timestamp),
                            });
                        }
                    }
                }
                (None, None) => t.latest_version()?,
            };
            let snap = t.snapshot(v)?;
            out.flush().map_err(stdout_err)?;
            // Copy straight to fd 1, not through Stdout's line buffering (8 KiB writes, split at
            // newlines).
            // SAFETY: fd 1 is open for the life of the process; ManuallyDrop never closes it.
            let mut fd1 = std::mem::ManuallyDrop::new(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(1) });
            // File to File: std::io::copy uses copy_file_range, sendfile or splice (no user-space
            // copy into a file, /dev/null or a pipe).
            // Every file is opened and its size checked before the first byte goes out.
            let files = t.open_data_files(&snap)?;
            for (f, mut src) in snap.files.iter().zip(files) {
                std::io::copy(&mut src, &mut *fd1).map_err(|e| Error::io("copy", t.root().join(&f.path), e))?;
            }
        }
        Cmd::Changes {
            table,
            from_version,
            to_version,
            follow,
        } => {
            let t = Table::open(&table)?;
            // SIGINT ends --follow with exit 0 (README, "Usage"); SIGPIPE is ignored by Rust, so a
            // closed pipe is a BrokenPipe error, which main() turns into exit 0 too.
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            if follow {
                signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
                    .map_err(|e| Error::io("install a SIGINT handler for", &table, e))?;
            }
            let mut out = io::BufWriter::with_capacity(256 << 10, io::stdout().lock());
            tinydelta::changes::print(&t, from_version, to_version, follow, &mut out, &stop, &stdout_closed)?;
        }
        Cmd::Describe { table, version, json } => {
            let t = Table::open(&table)?;
            let v = match version {
                Some(v) => v,
                None => t.latest_version()?,
            };
            // The numbers come from the log: only print them when the files back them.
            t.stat_data_files(&t.snapshot(v)?)?;
            let readable = tinydelta::vacuum::readable_versions(&t)?;
            if json {
                let s = t.snapshot(v)?;
                let (counted, unstated) = counted_rows(&t, &s)?;
                let files: Vec<_> = s
                    .files
                    .iter()
                    .map(|f| {
                        json!({"path": f.path, "size": f.size, "numRecords": f.num_records, "hasStats": f.has_stats})
                    })
                    .collect();
                let schema: serde_json::Value = serde_json::from_str(&s.schema.to_pretty_json()).unwrap_or_default();
                let doc = json!({
                    "table": table.display().to_string(),
                    "version": s.version,
                    "timestamp": s.timestamp,
                    "time": rfc3339_ms(s.timestamp),
                    "tableId": s.metadata.id,
                    "schema": schema["columns"],
                    "schemaString": s.metadata.schema_string,
                    "numFiles": s.files.len(),
                    "numRecords": s.num_records() + counted,
                    "filesWithoutStats": unstated,
                    "sizeBytes": s.size_bytes(),
                    "files": files,
                    "readableVersions": readable.iter().map(|(a, b)| json!([a, b])).collect::<Vec<_>>(),
                    "txns": s.txns,
                });
                writeln!(out, "{doc}").map_err(stdout_err)?;
            } else {
                let s = t.totals(v)?;
                let (counted, unstated) = if s.files_without_stats > 0 {
                    counted_rows(&t, &t.snapshot(v)?)?
                } else {
                    (0, 0)
                };
                let rows = match unstated {
                    0 => s.num_records.to_string(),
                    n => format!(
                        "{} ({n} files have no row count in their stats: their rows were counted)",
                        s.num_records + counted
                    ),
                };
                let schema =
                    Schema::from_schema_string(&s.metadata.schema_string).map_err(|reason| Error::Corrupt {
                        path: t.commit_path(v),
                        reason,
                    })?;
                writeln!(
                    out,
                    "table:   {}\nversion: {}\ntime:    {}\nschema:  {}\nfiles:   {}\nrows:    {}\nbytes:   {}\nreadable versions: {}",
                    table.display(),
                    s.version,
                    rfc3339_ms(s.commit_info.timestamp),
                    schema.to_cli_string(),
                    s.num_files,
                    rows,
                    s.size_bytes,
                    tinydelta::vacuum::format_ranges(&readable)
                )
                .map_err(stdout_err)?;
            }
        }
        Cmd::History { table, json } => {
            let t = Table::open(&table)?;
            let h = t.history()?;
            if json {
                let rows: Vec<_> = h
                    .iter()
                    .map(|e| {
                        json!({
                            "version": e.version,
                            "timestamp": e.commit_info.timestamp,
                            "time": rfc3339_ms(e.commit_info.timestamp),
                            "operation": e.commit_info.short_operation(),
                            "deltaOperation": e.commit_info.operation,
                            "operationParameters": e.commit_info.operation_parameters,
                            "rows": rows_of(&e.commit_info),
                            "tableRows": e.table_rows,
                            "tableFiles": e.table_files,
                        })
                    })
                    .collect();
                writeln!(out, "{}", serde_json::Value::Array(rows)).map_err(stdout_err)?;
            } else {
                writeln!(
                    out,
                    "{:<8} {:<24} {:<10} {:>10} {:>12}  SOURCE",
                    "VERSION", "TIME", "OPERATION", "ROWS", "TABLE_ROWS"
                )
                .map_err(stdout_err)?;
                for e in &h {
                    writeln!(
                        out,
                        "{:<8} {:<24} {:<10} {:>10} {:>12}  {}",
                        e.version,
                        rfc3339_ms(e.commit_info.timestamp),
                        e.commit_info.short_operation(),
                        rows_of(&e.commit_info),
                        e.table_rows,
                        // The mount's incoming/ name (escaped: names may hold anything).
                        e.commit_info
                            .operation_parameters
                            .get(tinydelta::staging::SOURCE_PARAM)
                            .map(|s| format!("incoming/{}", s.escape_debug()))
                            .unwrap_or_default()
                    )
                    .map_err(stdout_err)?;
                }
            }
        }
        Cmd::Restore {
            table,
            version,
            expect_version,
        } => {
            let t = Table::open(&table)?;
            let opts = WriteOptions {
                expect_version,
                ..Default::default()
            };
            let v = t.restore(version, &opts)?;
            writeln!(out, "restored {} to version {version} as version {v}", table.display()).map_err(stdout_err)?;
        }
        Cmd::Alter { table, change } => match change {
            AlterCmd::AddColumn { column, expect_version } => {
                let t = Table::open(&table)?;
                let opts = WriteOptions {
                    expect_version,
                    ..Default::default()
                };
                let v = tinydelta::alter::add_column(&t, &column, &opts)?;
                let schema = t.snapshot(v)?.schema.to_cli_string();
                writeln!(
                    out,
                    "added column {column} to {} as version {v}: {schema}",
                    table.display()
                )
                .map_err(stdout_err)?;
            }
            AlterCmd::DropColumn { name } => {
                return Err(Error::Usage(format!(
                    "cannot drop column {name:?}: tinydelta only adds nullable columns (dropping needs Delta column mapping)"
                )));
            }
        },
        Cmd::Optimize {
            table,
            target_size,
            expect_version,
        } => {
            let t = Table::open(&table)?;
            let target = match target_size {
                Some(s) => tinydelta::optimize::parse_size(&s).ok_or_else(|| {
                    Error::Usage(format!("--target-size {s:?} is not a size like 128MiB, 1GiB or 65536"))
                })?,
                None => tinydelta::optimize::DEFAULT_TARGET_SIZE,
            };
            let opts = WriteOptions {
                expect_version,
                ..Default::default()
            };
            let r = tinydelta::optimize::optimize(&t, target, &opts)?;
            match r.version {
                Some(v) => writeln!(
                    out,
                    "optimized {}: {} files ({} bytes) into {} as version {v}; {} files live",
                    table.display(),
                    r.removed_files,
                    r.removed_bytes,
                    r.added_files,
                    r.files_after
                ),
                None => writeln!(
                    out,
                    "nothing to optimize in {}: no two files smaller than {target} bytes fit one file ({} files live)",
                    table.display(),
                    r.files_after
                ),
            }
            .map_err(stdout_err)?;
        }
        Cmd::Check {
            table,
            json,
            deep,
            repair,
        } => {
            let report = match Table::open(&table) {
                Ok(t) => tinydelta::check::check(&t, deep, repair)?,
                Err(e @ Error::Corrupt { .. }) => tinydelta::check::Report::unopenable(e),
                Err(e) => return Err(e),
            };
            if json {
                writeln!(out, "{}", json!({"table": table.display().to_string(), "whole": report.is_whole(), "readableThrough": report.readable_through, "problems": report.problems, "repaired": report.repaired})).map_err(stdout_err)?;
            } else {
                for p in &report.problems {
                    let sev = match p.severity {
                        tinydelta::check::Severity::Damage => "damage",
                        tinydelta::check::Severity::Warning => "warning",
                    };
                    writeln!(out, "{sev}: {} (what to do: {})", p.message, p.hint).map_err(stdout_err)?;
                }
                for r in &report.repaired {
                    writeln!(out, "repair: {r}").map_err(stdout_err)?;
                }
                match (report.is_whole(), report.readable_through) {
                    (true, Some(v)) => writeln!(out, "{}: whole, versions up to {v}", table.display()),
                    (_, Some(v)) => writeln!(out, "{}: damaged; the log is whole up to version {v}", table.display()),
                    (_, None) => writeln!(out, "{}: damaged; no version is readable", table.display()),
                }
                .map_err(stdout_err)?;
            }
            if !report.is_whole() {
                out.flush().map_err(stdout_err)?;
                return Err(Error::Corrupt {
                    path: table.clone(),
                    reason: "check found damage (listed above)".into(),
                });
            }
        }
        Cmd::Vacuum {
            table,
            retain,
            force,
            older_than,
            dry_run,
        } => {
            let t = Table::open(&table)?;
            let duration = |flag: &str, d: Option<String>| -> Result<Option<std::time::Duration>> {
                d.map(|d| {
                    humantime::parse_duration(&d).map_err(|e| {
                        Error::Usage(format!("{flag} {d:?} is not a duration like 0s, 30m, 1h or 7d: {e}"))
                    })
                })
                .transpose()
            };
            let opts = tinydelta::vacuum::VacuumOptions {
                retain: duration("--retain", retain)?,
                force,
                older_than: duration("--older-than", older_than)?.unwrap_or(tinydelta::vacuum::DEFAULT_RETENTION),
                dry_run,
            };
            let report = tinydelta::vacuum::vacuum(&t, &opts)?;
            let verb = if dry_run { "would delete" } else { "deleted" };
            if let Some(why) = &report.data_kept {
                writeln!(out, "kept every data file: {why}").map_err(stdout_err)?;
            }
            for (p, size) in &report.deleted {
                writeln!(out, "{verb} {} ({size} bytes)", p.display()).map_err(stdout_err)?;
            }
            writeln!(
                out,
                "{verb} {} files ({} bytes) from {}; {} of them data files removed more than {} ago",
                report.deleted.len(),
                report.bytes,
                table.display(),
                report.expired,
                humantime::format_duration(report.retention),
            )
            .map_err(stdout_err)?;
            if let Some((start, end)) = report.commits {
                writeln!(
                    out,
                    "recorded as VACUUM START version {start} and VACUUM END version {end}"
                )
                .map_err(stdout_err)?;
            }
        }
        Cmd::Export {
            table,
            dest,
            version,
            all_versions,
        } => export(&mut out, &table, &dest, version, all_versions)?,
    }
    Ok(())
}

/// `tinydelta export`: one summary line on stdout.
fn export(
    out: &mut impl Write,
    table: &std::path::Path,
    dest: &std::path::Path,
    version: Option<u64>,
    all_versions: bool,
) -> Result<()> {
    use tinydelta::export::{self, Mode};
    let t = Table::open(table)?;
    let mode = if all_versions {
        Mode::AllVersions
    } else {
        Mode::Snapshot(version)
    };
    let r = export::export(&t, dest, mode, &mut |_| {})?;
    let mb = |b: u64| b as f64 / 1e6;
    match r.dest_versions {
        None => writeln!(
            out,
            "{} is up to date: it holds version {} of {}; nothing exported",
            dest.display(),
            r.source_version,
            table.display()
        ),
        Some((a, b)) => writeln!(
            out,
            "exported {} to {} as {} (holding version {} of the table): {} Parquet files written, {} reused, \
             {} rows, {:.1} MB of JSONL -> {:.1} MB of Parquet{}",
            table.display(),
            dest.display(),
            if a == b {
                format!("version {a}")
            } else {
                format!("versions {a}-{b}")
            },
            r.source_version,
            r.files_written,
            r.files_reused,
            r.rows,
            mb(r.bytes_in),
            mb(r.bytes_out),
            match r.checkpoints.as_slice() {
                [] => String::new(),
                cps => format!(", checkpoints at {cps:?}"),
            }
        ),
    }
    .map_err(stdout_err)
}

/// Rows of the live files without stats (other Delta writers may omit them), counted by reading
/// them: (rows, files).
fn counted_rows(t: &Table, s: &tinydelta::Snapshot) -> Result<(u64, u64)> {
    let mut rows = 0u64;
    let mut files = 0u64;
    for f in s.files.iter().filter(|f| !f.has_stats) {
        let (file, _) = t.open_rows(f, &s.schema)?;
        rows += tinydelta::check::count_rows(file, &t.root().join(&f.path))?;
        files += 1;
    }
    Ok((rows, files))
}

/// Rows a commit wrote: Delta's `numOutputRows`, or delta-rs's `num_added_rows`.
fn rows_of(ci: &tinydelta::actions::CommitInfo) -> u64 {
    ci.metric("numOutputRows")
        .or_else(|| ci.metric("num_added_rows"))
        .unwrap_or(0)
}

trait RowsAdded {
    fn snapshot_rows_added(&self, v: u64) -> Result<u64>;
}

impl RowsAdded for Table {
    fn snapshot_rows_added(&self, v: u64) -> Result<u64> {
        Ok(rows_of(&self.commit_info(v)?))
    }
}
