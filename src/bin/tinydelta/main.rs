//! `tinydelta`: create, append, overwrite, read, describe, history, restore and vacuum tables
//! (docs/CLI.md "Usage"). Exit codes: 0 ok, 1 error, 2 usage, 3 conflict, 4 not found, 5 bad input.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::ExitCode;

mod exit;
#[path = "../shared/mount_cli.rs"]
mod mount_cli;
mod progress;

use clap::{CommandFactory, Parser, Subcommand};
use progress::Progress;
use serde_json::json;
use tinydelta::diagnose::count;
use tinydelta::{Error, Result, Schema, Table, WriteOptions};

#[derive(Parser)]
#[command(
    name = "tinydelta",
    version,
    about = "A single-node Delta-Lake-compatible table format with JSONL data files"
)]
struct Cli {
    /// Draw no progress (progress is drawn only on a terminal, for work over about a second).
    #[arg(short, long, global = true)]
    quiet: bool,
    /// The most bytes a Parquet data file's rows may take as JSONL, per byte of the file
    /// (default 1000); a file whose rows would take more is refused, naming it.
    #[arg(long, global = true, value_name = "N")]
    max_convert_ratio: Option<u64>,
    /// The most bytes one Parquet data file's rows may take as JSONL (default 16 GiB =
    /// 17179869184), whatever the file's size.
    #[arg(long, global = true, value_name = "BYTES")]
    max_convert_bytes: Option<u64>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create a table: version 0 with protocol and metaData. Columns are NAME:TYPE, TYPE one of
    /// int, float, str, bool, date, timestamp, timestamp_ntz, decimal(P,S), binary, json,
    /// array<T>, map<str,T>, struct<NAME:T,...>; a trailing ! means NOT NULL. Or infer them
    /// from a sample with --infer.
    Create {
        /// Table folder (created if missing).
        table: PathBuf,
        /// Columns, e.g. id:int! region:str 'tags:array<str>'.
        #[arg(required_unless_present = "infer", conflicts_with = "infer")]
        columns: Vec<String>,
        /// Infer the columns from the first rows of this JSONL file (they are not appended).
        #[arg(long, value_name = "FILE")]
        infer: Option<PathBuf>,
        /// Rows of the --infer sample to read.
        #[arg(long, value_name = "N", default_value_t = 1000, requires = "infer")]
        sample_rows: u64,
        /// With --infer: print the inferred columns and create nothing.
        #[arg(long, requires = "infer")]
        dry_run: bool,
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
        /// Add the columns and struct fields the input has and the table lacks (nullable,
        /// types inferred from every row), in the same commit as the rows (Delta mergeSchema).
        #[arg(long)]
        merge_schema: bool,
        #[command(flatten)]
        bad: BadLines,
        /// Print the outcome as one JSON object (version, rows, files, bytes, table totals).
        #[arg(long)]
        json: bool,
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
        #[command(flatten)]
        bad: BadLines,
        /// Print the outcome as one JSON object (version, rows, files, bytes, table totals).
        #[arg(long)]
        json: bool,
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
        /// Only the rows for which this SQL condition is true (e.g. "id = 3 AND region IN
        /// ('EU','US')"); files whose statistics prove no row matches are not opened.
        #[arg(long = "where", value_name = "PRED")]
        where_: Option<String>,
        /// Only these columns, in this order (comma-separated).
        #[arg(long, value_name = "A,B", value_delimiter = ',')]
        columns: Option<Vec<String>>,
        /// At most N rows.
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
        /// Say on stderr how many files were skipped by their statistics and how many read.
        #[arg(long)]
        explain: bool,
    },
    /// Delete the rows for which a SQL condition is true (Delta DELETE, copy-on-write): one
    /// commit that rewrites only the files holding such rows.
    Delete {
        /// Table folder.
        table: PathBuf,
        /// The condition, e.g. "id = 3" ("true" deletes every row).
        #[arg(long = "where", value_name = "PRED")]
        where_: String,
        #[command(flatten)]
        change: ChangeFlags,
    },
    /// Set columns of the rows for which a SQL condition is true (Delta UPDATE, copy-on-write).
    Update {
        /// Table folder.
        table: PathBuf,
        /// An assignment, e.g. 'amount = amount * 1.1' or "name = 'x' || name"; repeatable.
        #[arg(long = "set", value_name = "COL = EXPR", required = true)]
        set: Vec<String>,
        /// The condition, e.g. "id = 3" ("true" updates every row).
        #[arg(long = "where", value_name = "PRED")]
        where_: String,
        #[command(flatten)]
        change: ChangeFlags,
    },
    /// Merge JSONL rows (from --file or stdin) by key (Delta MERGE): a row whose key matches a
    /// table row replaces it, the others are inserted.
    Merge {
        /// Table folder.
        table: PathBuf,
        /// Source rows (default: stdin).
        #[arg(long)]
        file: Option<PathBuf>,
        /// The key columns.
        #[arg(long, value_name = "KEY[,KEY...]", value_delimiter = ',', required = true)]
        on: Vec<String>,
        /// A boolean column of the source only: a matched row whose source row has it true is
        /// deleted (the column is not stored).
        #[arg(long, value_name = "COL")]
        delete_when: Option<String>,
        /// Do not insert source rows that match no table row.
        #[arg(long)]
        ignore_unmatched: bool,
        /// Most bytes of source rows held in memory (default 1GiB).
        #[arg(long, value_name = "SIZE")]
        max_source_bytes: Option<String>,
        #[command(flatten)]
        change: ChangeFlags,
    },
    /// Print the change feed (Delta Change Data Feed): for each version, the rows of the files
    /// it removed (`_change_type` delete), then of those it added (insert); for a DELETE, UPDATE
    /// or MERGE the rows it changed (delete, update_preimage, update_postimage, insert); each
    /// with `_commit_version` and `_commit_timestamp`.
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
        /// Print the outcome as one JSON object (version, rows, files, bytes, table totals).
        #[arg(long)]
        json: bool,
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
        /// Machine-readable output: one JSON object with every file and the totals.
        #[arg(long)]
        json: bool,
    },
    /// Serve a page over the table on a local web server (docs/SERVE.md): drag through its
    /// versions, read their rows a page at a time, see what changed between two versions, watch
    /// commits land; with --writable, append a dropped file and restore. Prints the page's
    /// address and serves until killed.
    Serve {
        /// Table folder.
        table: PathBuf,
        /// The port (0: a free port, said in the address printed).
        #[arg(long, value_name = "N", default_value_t = 0)]
        port: u16,
        /// The address to listen on; the Host header of every request must name it (or
        /// localhost).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
        bind: std::net::IpAddr,
        /// Accept appends and restores from the page, with the per-run token in the address
        /// printed.
        #[arg(long)]
        writable: bool,
        /// The most bytes one uploaded file may have (default 256MiB).
        #[arg(long, value_name = "SIZE")]
        max_upload_bytes: Option<String>,
        /// Request workers.
        #[arg(long, value_name = "N", default_value_t = tinydelta::server::DEFAULT_THREADS)]
        threads: usize,
        /// Event streams (pages following the table live) open at once.
        #[arg(long, value_name = "N", default_value_t = tinydelta::server::DEFAULT_MAX_EVENT_STREAMS)]
        max_event_streams: usize,
    },
    /// Write a Delta table with Parquet data files that every Delta engine reads (docs/EXPORT.md
    /// "Export"): the latest version (or --version N), or with --all-versions every version with
    /// its history. Run again to continue a DEST from its last exported version.
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
    /// Print a shell completion script for tinydelta (or tinydelta-mount) on stdout.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
        /// The program to complete.
        #[arg(long, value_name = "PROGRAM", default_value = "tinydelta", value_parser = ["tinydelta", "tinydelta-mount"])]
        bin: String,
    },
    /// Write man pages for tinydelta, each subcommand and tinydelta-mount into DIR (e.g.
    /// /usr/local/share/man/man1).
    Man {
        /// The folder to write tinydelta.1, tinydelta-SUBCOMMAND.1 and tinydelta-mount.1 into
        /// (created if missing).
        dir: PathBuf,
    },
}

/// The commit flags of delete, update and merge.
#[derive(clap::Args, Clone, Debug)]
struct ChangeFlags {
    /// Commit only if the latest version is still N.
    #[arg(long, value_name = "N")]
    expect_version: Option<u64>,
    /// Idempotent change (Delta txn action): commit only if the table records a lower version
    /// for APP_ID, else exit 0 saying it was already applied.
    #[arg(long, value_name = "APP_ID:VERSION")]
    txn: Option<String>,
    /// Print the outcome as one JSON object (version, metrics, files skipped).
    #[arg(long)]
    json: bool,
}

/// What append and overwrite do with bad lines.
#[derive(clap::Args, Clone, Debug)]
struct BadLines {
    /// Commit the good rows and write each bad line byte for byte to FILE and one JSON object
    /// per bad line (line, column, error) to FILE.errors; FILE must not exist.
    #[arg(long, value_name = "FILE")]
    rejects: Option<PathBuf>,
    /// List at most N bad lines in the error (the total is always given).
    #[arg(long, value_name = "N", default_value_t = tinydelta::diagnose::DEFAULT_MAX_ERRORS)]
    max_errors: usize,
    /// The longest input line accepted, in bytes without its newline (default 16 MiB =
    /// 16777216; the mount's --max-line-bytes is the same limit). Memory grows with the
    /// longest line (docs/CLI.md "Input rules").
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    max_line_bytes: Option<u64>,
}

#[derive(Subcommand)]
enum AlterCmd {
    /// Add a nullable column NAME:TYPE, or a field PARENT.NAME:TYPE of the struct PARENT (rows
    /// written before read it as null).
    AddColumn {
        /// NAME:TYPE, e.g. note:str, or PARENT.NAME:TYPE, e.g. user.email:str.
        column: String,
        /// Commit only if the latest version is still N.
        #[arg(long, value_name = "N")]
        expect_version: Option<u64>,
    },
    /// Set table properties KEY=VALUE in metaData.configuration (SET TBLPROPERTIES), e.g.
    /// delta.autoOptimize.autoCompact=true.
    SetProperty {
        /// KEY=VALUE, one or more.
        #[arg(required = true, value_name = "KEY=VALUE")]
        properties: Vec<String>,
        /// Commit only if the latest version is still N.
        #[arg(long, value_name = "N")]
        expect_version: Option<u64>,
    },
    /// Remove table properties (UNSET TBLPROPERTIES).
    UnsetProperty {
        /// KEY, one or more.
        #[arg(required = true, value_name = "KEY")]
        keys: Vec<String>,
        /// Commit only if the latest version is still N.
        #[arg(long, value_name = "N")]
        expect_version: Option<u64>,
    },
    /// Refused: Delta needs column mapping to drop a column. Hidden from help, completions and
    /// man pages (it only explains the refusal; docs/CLI.md "Usage").
    #[command(hide = true)]
    DropColumn {
        /// The column.
        name: String,
    },
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let d = tinydelta::parquet::ConvertLimits::default();
    tinydelta::parquet::set_limits(tinydelta::parquet::ConvertLimits {
        ratio: cli.max_convert_ratio.unwrap_or(d.ratio),
        max_bytes: cli.max_convert_bytes.unwrap_or(d.max_bytes),
    });
    match run(cli.cmd, cli.quiet) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail::Error(Error::Io { source, .. })) if source.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Fail::Error(e)) => {
            eprintln!("tinydelta: {e}");
            ExitCode::from(exit::code(&e))
        }
        Err(Fail::Reported(code)) => ExitCode::from(code),
    }
}

/// Why a command failed: an error to print, or one already reported on stderr (its exit code).
enum Fail {
    Error(Error),
    Reported(u8),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Error(e)
    }
}

/// Print `lines` on stderr, each after `tinydelta: `.
fn report(lines: &[String]) {
    let mut err = io::stderr().lock();
    for l in lines {
        let _ = writeln!(err, "tinydelta: {l}");
    }
}

/// Which write `write_rows` makes.
enum Mode<'a> {
    Append,
    Txn(&'a str, i64),
    Overwrite,
}

/// What a write did.
enum Written {
    Version(u64),
    NoRows,
    AlreadyApplied(i64),
}

/// One write (docs/CLI.md "Usage"; bad lines: docs/CLI.md "Errors that teach"). Without
/// `--rejects`: the fast path; if it finds a bad line, a second pass over the input lists up to
/// `max_errors` of them, the total and hints (exit 5, nothing committed). With `--rejects FILE`: a
/// first pass writes the bad lines to FILE (and their errors to FILE.errors), then the good lines
/// are written; every line bad is exit 5 with nothing committed.
fn write_rows(
    t: &Table,
    mode: Mode,
    file: &Option<PathBuf>,
    mut opts: WriteOptions,
    bad: &BadLines,
    merge_schema: bool,
    quiet: bool,
) -> Result<(Written, Option<tinydelta::diagnose::Diagnosis>), Fail> {
    use tinydelta::FileAppend;
    use tinydelta::diagnose::{self, Rejects, SkipLines};
    let mut input = diagnose::Input::open(file.as_deref(), bad.rejects.is_some() || merge_schema)?;
    let name = input.name().to_string();
    if merge_schema {
        // A first pass infers the input's columns (docs/CLI.md "Adding columns while
        // appending"); the write checks the rows against the table's schema merged with them.
        let found = {
            let mut progress = Progress::bytes("reading columns", input.size_bytes(), quiet);
            let reader = input.reader()?;
            tinydelta::infer::infer_columns(progress.wrap(reader), &name)?
        };
        if let Some(found) = found {
            let (_, added) = t.latest_snapshot()?.schema.merged_with(&found.schema);
            let under = |note: &str, p: &str| {
                let q = tinydelta::quote::quoted(p);
                let open = &q[..q.len() - 1];
                note.starts_with(&format!("{q} "))
                    || note.starts_with(&format!("{open}."))
                    || note.starts_with(&format!("{open}["))
            };
            for note in found.notes.iter().filter(|n| added.iter().any(|p| under(n, p))) {
                eprintln!("tinydelta: note: {note}");
            }
            opts.merge_schema = Some(found.schema);
        }
    }
    let label = match mode {
        Mode::Overwrite => "overwrite",
        _ => "append",
    };
    let write = |reader: &mut dyn BufRead, opts: &WriteOptions| -> Result<Written> {
        Ok(match mode {
            Mode::Append => match t.append(&name, reader, opts)? {
                Some(v) => Written::Version(v),
                None => Written::NoRows,
            },
            Mode::Txn(app, version) => match t.append_txn(&name, reader, opts, app, version)? {
                tinydelta::TxnOutcome::Committed(v) => Written::Version(v),
                tinydelta::TxnOutcome::AlreadyApplied { recorded } => Written::AlreadyApplied(recorded),
                tinydelta::TxnOutcome::NoRows => Written::NoRows,
            },
            Mode::Overwrite => Written::Version(t.overwrite(&name, reader, opts)?),
        })
    };
    let more = "--max-errors N lists more";
    let Some(rejects_path) = &bad.rejects else {
        // Rows in a regular file: copied by the kernel and the copy checked, when every row is
        // canonical already (docs/BENCHMARKS.md "What each figure measures", figure 6); otherwise
        // the general path below.
        if matches!(mode, Mode::Append)
            && let Some((f, at)) = input.regular_file()?
        {
            match t.append_file(&name, &f, at, || input.unchanged(&f), &opts)? {
                FileAppend::Done(Some(v)) => return Ok((Written::Version(v), None)),
                FileAppend::Done(None) => return Ok((Written::NoRows, None)),
                FileAppend::NotCanonical => {}
            }
        }
        let first = {
            let mut progress = Progress::bytes(label, input.size_bytes(), quiet);
            let reader = input.reader()?;
            write(&mut progress.wrap(reader), &opts)
        };
        return match first {
            Err(e @ Error::BadInput { line, .. }) => {
                // The fast path stopped at the first bad line: list them all (second pass, from
                // that line where the input cannot be read again whole).
                let schema = t.latest_snapshot()?.schema;
                let schema = match &opts.merge_schema {
                    Some(incoming) => schema.merged_with(incoming).0,
                    None => schema,
                };
                let size = input.size_bytes();
                let d = match input.again_from(line) {
                    Ok((first, r)) => {
                        let mut progress = Progress::bytes("checking", size, quiet);
                        diagnose::scan(&schema, &name, progress.wrap(r), first, bad.max_errors, None)?
                    }
                    Err(why) => {
                        eprintln!("tinydelta: {e}");
                        report(&[format!("{name}: the lines after line {line} were not checked: {why}")]);
                        return Err(Fail::Reported(exit::code(&e)));
                    }
                };
                if d.total == 0 {
                    // The input changed between the passes: report what the write saw.
                    return Err(e.into());
                }
                report(&d.report(more));
                Err(Fail::Reported(exit::code(&e)))
            }
            other => Ok((other?, None)),
        };
    };
    let schema = t.latest_snapshot()?.schema;
    let schema = match &opts.merge_schema {
        Some(incoming) => schema.merged_with(incoming).0,
        None => schema,
    };
    let mut rejects = Rejects::create(rejects_path)?;
    let scanned = {
        let mut progress = Progress::bytes("checking", input.size_bytes(), quiet);
        input
            .reader()
            .and_then(|r| diagnose::scan(&schema, &name, progress.wrap(r), 1, bad.max_errors, Some(&mut rejects)))
            .and_then(|d| rejects.finish().map(|()| d))
    };
    let d = match scanned {
        Ok(d) => d,
        Err(e) => {
            rejects.discard();
            return Err(e.into());
        }
    };
    let (shown, errors_shown) = (rejects.path.display(), rejects.errors_path.display());
    if d.good == 0 && d.total > 0 {
        let mut lines = d.report(more);
        let at = d.listed.len();
        let every = format!(
            "{name}: every line is bad ({}, written to {shown}, their errors to {errors_shown}); nothing was committed",
            diagnose::count(d.total, "bad line", "bad lines")
        );
        // The report has a count line (replaced by this one) only for more than one bad line or
        // when not every bad line is listed.
        if d.total > 1 || (at as u64) < d.total {
            lines[at] = every;
        } else {
            lines.insert(at, every);
        }
        report(&lines);
        return Err(Fail::Reported(5));
    }
    if let Err(e) = tinydelta::failpoint::hit("rejects-scanned") {
        rejects.discard();
        return Err(e.into());
    }
    if merge_schema && d.total > 0 && opts.merge_schema.is_some() {
        // Only the rows that are committed add columns: infer again without the rejected lines
        // (docs/CLI.md "Adding columns while appending").
        let again = input.reader().and_then(|r| {
            let good = BufReader::with_capacity(1 << 20, SkipLines::new(r, d.bad_ranges.clone()));
            tinydelta::infer::infer_columns(good, &name)
        });
        match again {
            Ok(found) => opts.merge_schema = found.map(|f| f.schema),
            Err(e) => {
                rejects.discard();
                return Err(e.into());
            }
        }
    }
    opts.extra_params.push(("rejectedLines".into(), d.total.to_string()));
    opts.extra_params.push(("rejectsFile".into(), shown.to_string()));
    let written = {
        let mut progress = Progress::bytes(label, input.size_bytes(), quiet);
        input.reader().and_then(|r| {
            let mut good = BufReader::with_capacity(1 << 20, SkipLines::new(progress.wrap(r), d.bad_ranges.clone()));
            write(&mut good, &opts)
        })
    };
    match written {
        Ok(Written::Version(v)) => {
            let mut lines = d.report(more);
            lines.retain(|l| !l.ends_with("nothing was committed"));
            let at = d.listed.len();
            lines.insert(
                at,
                format!(
                    "{name}: rejected {} into {shown} (their errors in {errors_shown}); the good rows were committed as version {v}",
                    diagnose::count(d.total, "bad line", "bad lines")
                ),
            );
            report(&lines);
            Ok((Written::Version(v), Some(d)))
        }
        Ok(other) => {
            // Nothing committed (no rows, or the txn was applied before): the rejects would
            // describe a write that did not happen.
            rejects.discard();
            Ok((other, None))
        }
        // Published, durability unknown: the good rows may be in the table, so their rejects stay.
        Err(e @ Error::NotDurable { .. }) => Err(e.into()),
        Err(e) => {
            rejects.discard();
            Err(e.into())
        }
    }
}

use tinydelta::time::shown_ms as rfc3339_ms;

/// Whether the reader of stdout has gone (a pipe whose read end is closed reports POLLERR).
fn stdout_closed() -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let fd = rustix::stdio::stdout();
    let mut fds = [PollFd::new(&fd, PollFlags::empty())];
    let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
    matches!(poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

/// `alter set-property` / `unset-property`: commit and say what happened.
fn set_properties_cli(
    out: &mut impl Write,
    table: &std::path::Path,
    changes: &[(String, Option<String>)],
    expect_version: Option<u64>,
) -> Result<(), Fail> {
    let t = Table::open(table)?;
    let opts = WriteOptions {
        expect_version,
        ..Default::default()
    };
    let shown: Vec<String> = changes
        .iter()
        .map(|(k, v)| match v {
            Some(v) => format!("{}={}", tinydelta::quote::shortened(k), tinydelta::quote::shortened(v)),
            None => tinydelta::quote::shortened(k),
        })
        .collect();
    match tinydelta::alter::set_properties(&t, changes, &opts)? {
        Some(v) if changes.iter().all(|(_, v)| v.is_none()) => {
            writeln!(out, "unset {} on {} as version {v}", shown.join(" "), table.display())
        }
        Some(v) => writeln!(out, "set {} on {} as version {v}", shown.join(" "), table.display()),
        None => writeln!(
            out,
            "{} already has {}; nothing committed",
            table.display(),
            shown.join(" ")
        ),
    }
    .map_err(stdout_err)?;
    Ok(())
}

/// Auto compaction after the CLI's own write (docs/FORMAT.md "Auto compaction"): on when the
/// table's property says so. The write is done and reported: a compaction that fails is a
/// warning, never the command's outcome.
fn auto_compact_after_write(t: &Table, quiet: bool) {
    let settings = tinydelta::optimize::AutoCompact::default();
    match tinydelta::optimize::auto_compact(t, &settings) {
        Ok(Some(r)) if !quiet => eprintln!(
            "tinydelta: auto compaction packed {} into {} as version {}",
            count(r.removed_files as u64, "file", "files"),
            count(r.added_files as u64, "file", "files"),
            r.version.unwrap_or_default()
        ),
        Ok(_) => {}
        Err(e) => eprintln!("tinydelta: warning: auto compaction skipped: {e}"),
    }
}

/// A schema for a success line: the CLI syntax, or for one longer than 4 KiB (huge names, many
/// columns) its column count and where to see it.
fn shown_schema(schema: &Schema) -> String {
    let cli = schema.to_cli_string();
    if cli.len() <= 4096 {
        return cli;
    }
    format!(
        "{} (`tinydelta describe` prints the schema)",
        count(schema.columns.len() as u64, "column", "columns")
    )
}

fn stdout_err(e: io::Error) -> Error {
    Error::io("write", "<stdout>", e)
}

fn run(cmd: Cmd, quiet: bool) -> Result<(), Fail> {
    let mut out = io::stdout().lock();
    match cmd {
        Cmd::Create {
            table,
            columns,
            infer,
            sample_rows,
            dry_run,
        } => {
            let schema = match &infer {
                Some(path) => {
                    let f = File::open(path).map_err(|e| Error::io("open", path, e))?;
                    let found =
                        tinydelta::infer::infer_schema(BufReader::new(f), &path.display().to_string(), sample_rows)?;
                    // The notes go to stderr, so that stdout is the schema alone.
                    for note in &found.notes {
                        eprintln!("tinydelta: note: {note}");
                    }
                    if dry_run {
                        writeln!(out, "{}", found.schema.to_cli_string()).map_err(stdout_err)?;
                        return Ok(());
                    }
                    found.schema
                }
                None => Schema::parse_cli(&columns)?,
            };
            Table::create(&table, &schema)?;
            writeln!(
                out,
                "created table {} at version 0: {}",
                table.display(),
                shown_schema(&schema)
            )
            .map_err(stdout_err)?;
        }
        Cmd::Append {
            table,
            file,
            expect_version,
            txn,
            merge_schema,
            bad,
            json,
        } => {
            let txn = parse_txn(txn)?;
            let t = Table::open(&table)?;
            let opts = WriteOptions {
                expect_version,
                max_line_bytes: bad.max_line_bytes(),
                ..Default::default()
            };
            let mode = match &txn {
                Some((app, version)) => Mode::Txn(app, *version),
                None => Mode::Append,
            };
            let (written, _) = write_rows(&t, mode, &file, opts, &bad, merge_schema, quiet)?;
            let committed = matches!(written, Written::Version(_));
            let name = file.as_ref().map_or("<stdin>".into(), |p| p.display().to_string());
            let tag = txn.as_ref().map(|(a, v)| format!(" (txn {a}:{v})")).unwrap_or_default();
            if json {
                let doc = match written {
                    Written::Version(v) => outcome(&t, &table, v)?,
                    Written::AlreadyApplied(recorded) => json!({
                        "table": table.display().to_string(), "committed": false, "version": null,
                        "reason": "txnAlreadyApplied", "txnRecordedVersion": recorded,
                    }),
                    Written::NoRows => json!({
                        "table": table.display().to_string(), "committed": false, "version": null,
                        "reason": "noRows",
                    }),
                };
                writeln!(out, "{doc}").map_err(stdout_err)?;
                out.flush().map_err(stdout_err)?;
                if committed {
                    auto_compact_after_write(&t, quiet);
                }
                return Ok(());
            }
            match (written, &txn) {
                (Written::Version(v), _) => {
                    let rows = t.snapshot_rows_added(v)?;
                    // The columns this commit added: its schema against the version before.
                    let added = if merge_schema && v > 0 {
                        let before = t.snapshot(v - 1)?.schema;
                        before.merged_with(&t.snapshot(v)?.schema).1
                    } else {
                        Vec::new()
                    };
                    if !added.is_empty() {
                        writeln!(
                            out,
                            "added {} {} to the schema",
                            if added.len() == 1 { "column" } else { "columns" },
                            added.iter().map(|p| tinydelta::quote::shortened(p)).collect::<Vec<_>>().join(", ")
                        )
                        .map_err(stdout_err)?;
                    }
                    writeln!(
                        out,
                        "appended {} to {} as version {v}{tag}",
                        count(rows, "row", "rows"),
                        table.display()
                    )
                }
                (Written::AlreadyApplied(recorded), Some((app, version))) => writeln!(
                    out,
                    "txn {app}:{version} was already applied to {} (it records version {recorded} for {app}); nothing committed",
                    table.display()
                ),
                (_, Some(_)) => writeln!(out, "nothing committed to {}", table.display()),
                (_, None) => writeln!(out, "no rows in {name}; nothing committed to {}", table.display()),
            }
            .map_err(stdout_err)?;
            out.flush().map_err(stdout_err)?;
            if committed {
                auto_compact_after_write(&t, quiet);
            }
        }
        Cmd::Overwrite {
            table,
            file,
            expect_version,
            bad,
            json,
        } => {
            let t = Table::open(&table)?;
            let opts = WriteOptions {
                expect_version,
                max_line_bytes: bad.max_line_bytes(),
                ..Default::default()
            };
            let (written, _) = write_rows(&t, Mode::Overwrite, &file, opts, &bad, false, quiet)?;
            let committed = matches!(written, Written::Version(_));
            if json {
                let doc = match written {
                    Written::Version(v) => outcome(&t, &table, v)?,
                    _ => json!({
                        "table": table.display().to_string(), "committed": false, "version": null,
                        "reason": "noRows",
                    }),
                };
                writeln!(out, "{doc}").map_err(stdout_err)?;
            } else if let Written::Version(v) = written {
                let rows = t.snapshot_rows_added(v)?;
                writeln!(
                    out,
                    "overwrote {} with {} as version {v}",
                    table.display(),
                    count(rows, "row", "rows")
                )
                .map_err(stdout_err)?;
            }
            if committed {
                out.flush().map_err(stdout_err)?;
                auto_compact_after_write(&t, quiet);
            }
        }
        Cmd::Read {
            table,
            version,
            as_of,
            where_,
            columns,
            limit,
            explain,
        } => {
            let t = Table::open(&table)?;
            let v = match (version, as_of) {
                (Some(v), _) => v,
                (None, Some(time)) => t.version_at_time(&time)?,
                (None, None) => t.latest_version()?,
            };
            let snap = t.snapshot_arc(v)?;
            if where_.is_some() || columns.is_some() || limit.is_some() || explain {
                let opts = tinydelta::dml::ReadOptions {
                    predicate: where_
                        .map(|w| tinydelta::dml::Predicate::parse(&snap.schema, &w))
                        .transpose()?,
                    columns,
                    limit,
                };
                let mut w = io::BufWriter::with_capacity(256 << 10, &mut out);
                let r = tinydelta::dml::read(&t, &snap, &opts, &mut w)?;
                w.flush().map_err(stdout_err)?;
                if explain {
                    eprintln!(
                        "tinydelta: read version {v}: {} total, {} skipped by statistics, {} read; {} read, {} printed",
                        count(r.skipping.files_total as u64, "file", "files"),
                        r.skipping.files_skipped,
                        r.skipping.files_read,
                        count(r.rows_read, "row", "rows"),
                        r.rows_out
                    );
                }
                return Ok(());
            }
            out.flush().map_err(stdout_err)?;
            // Copy straight to fd 1, not through Stdout's line buffering (8 KiB writes, split at
            // newlines).
            // SAFETY: fd 1 is open for the life of the process; ManuallyDrop never closes it.
            let mut fd1 = std::mem::ManuallyDrop::new(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(1) });
            // No copy through user space: spliced into a pipe (`tinydelta read | jq`); std::io::copy
            // uses copy_file_range into a file and sendfile into /dev/null or a socket.
            let to_pipe = rustix::fs::fstat(&*fd1)
                .is_ok_and(|st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Fifo);
            // Every file is opened and its size checked before the first byte goes out (with
            // a bounded number kept open: a version of a million files reads too).
            let mut files = t.open_data_files(&snap)?;
            while let Some((f, mut src)) = files.next_file()? {
                let n =
                    copy_out(&mut src, &mut fd1, to_pipe).map_err(|e| Error::io("copy", t.root().join(&f.path), e))?;
                // A file cut or grown after its check is not a shorter or longer version.
                files.check_len(&f, n)?;
            }
        }
        Cmd::Changes {
            table,
            from_version,
            to_version,
            follow,
        } => {
            let t = Table::open(&table)?;
            // SIGINT ends --follow with exit 0 (docs/CLI.md "Usage"); SIGPIPE is ignored by Rust,
            // so a closed pipe is a BrokenPipe error, which main() turns into exit 0 too.
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            if follow {
                signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
                    .map_err(|e| Error::io("install a SIGINT handler for", &table, e))?;
            }
            let mut out = io::BufWriter::with_capacity(256 << 10, io::stdout().lock());
            let mut note = |s: &str| eprintln!("tinydelta: {s}");
            tinydelta::changes::print(
                &t,
                from_version,
                to_version,
                follow,
                &mut note,
                &mut out,
                &stop,
                &stdout_closed,
            )?;
        }
        Cmd::Describe { table, version, json } => {
            let t = Table::open(&table)?;
            let v = match version {
                Some(v) => v,
                None => t.latest_version()?,
            };
            // The numbers come from the log: only print them when the files back them.
            t.stat_data_files(&*t.snapshot_arc(v)?)?;
            let readable = tinydelta::readable_versions(&t)?;
            if json {
                let s = t.snapshot_arc(v)?;
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
                    // `rows` and `bytes` as the text output says them; `numRecords` and
                    // `sizeBytes` (Delta's words) stay as aliases (docs/CLI.md "Usage").
                    "rows": s.num_records() + counted,
                    "numRecords": s.num_records() + counted,
                    "bytes": s.size_bytes(),
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
                    1 => format!(
                        "{} (1 file has no row count in its stats: its rows were counted)",
                        s.num_records + counted
                    ),
                    n => format!(
                        "{} ({n} files have no row count in their stats: their rows were counted)",
                        s.num_records + counted
                    ),
                };
                let schema =
                    Schema::of_metadata(&s.metadata).map_err(|reason| Schema::refused(t.commit_path(v), reason))?;
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
                            "recordedTimestamp": e.recorded_timestamp,
                            "operation": e.commit_info.short_operation(),
                            "deltaOperation": e.commit_info.operation,
                            "operationParameters": e.commit_info.operation_parameters,
                            "rows": e.rows,
                            "tableRows": e.table_rows,
                            "tableFiles": e.table_files,
                            "source": e.source(),
                        })
                    })
                    .collect();
                writeln!(out, "{}", serde_json::Value::Array(rows)).map_err(stdout_err)?;
            } else {
                // The OPERATION column is as wide as its longest entry (`VACUUM START`, another
                // writer's operation), so ROWS and TABLE_ROWS stay aligned.
                let ops: Vec<String> = h.iter().map(|e| e.commit_info.short_operation()).collect();
                let w = ops.iter().map(|o| o.chars().count()).max().unwrap_or(0).max(10);
                writeln!(
                    out,
                    "{:<8} {:<24} {:<w$} {:>10} {:>12}  SOURCE",
                    "VERSION", "TIME", "OPERATION", "ROWS", "TABLE_ROWS"
                )
                .map_err(stdout_err)?;
                for (e, op) in h.iter().zip(&ops) {
                    let line = format!(
                        "{:<8} {:<24} {:<w$} {:>10} {:>12}  {}",
                        e.version,
                        rfc3339_ms(e.commit_info.timestamp),
                        op,
                        e.rows.map_or("?".to_string(), |n| n.to_string()),
                        e.table_rows.map_or("?".to_string(), |n| n.to_string()),
                        e.source().unwrap_or_default()
                    );
                    // No trailing blanks when SOURCE is empty.
                    writeln!(out, "{}", line.trim_end()).map_err(stdout_err)?;
                }
            }
        }
        Cmd::Delete { table, where_, change } => {
            let t = Table::open(&table)?;
            let opts = change_options(&change)?;
            let r = {
                let _p = Progress::spinner(&format!("delete from {}", table.display()), quiet);
                tinydelta::dml::delete(&t, &where_, &opts)?
            };
            change_outcome(&mut out, &t, &table, &r, change.json, "from")?;
            if r.version.is_some() {
                out.flush().map_err(stdout_err)?;
                auto_compact_after_write(&t, quiet);
            }
        }
        Cmd::Update {
            table,
            set,
            where_,
            change,
        } => {
            let t = Table::open(&table)?;
            let opts = change_options(&change)?;
            let r = {
                let _p = Progress::spinner(&format!("update {}", table.display()), quiet);
                tinydelta::dml::update(&t, &where_, &set, &opts)?
            };
            change_outcome(&mut out, &t, &table, &r, change.json, "in")?;
            if r.version.is_some() {
                out.flush().map_err(stdout_err)?;
                auto_compact_after_write(&t, quiet);
            }
        }
        Cmd::Merge {
            table,
            file,
            on,
            delete_when,
            ignore_unmatched,
            max_source_bytes,
            change,
        } => {
            let t = Table::open(&table)?;
            let max_source_bytes = match max_source_bytes {
                Some(s) => tinydelta::optimize::parse_size(&s).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "--max-source-bytes {} is not a size like 1GiB or 65536",
                        tinydelta::quote::quoted(&s)
                    ))
                })?,
                None => tinydelta::dml::DEFAULT_MAX_SOURCE_BYTES,
            };
            let opts = tinydelta::dml::MergeOptions {
                on,
                delete_when,
                ignore_unmatched,
                max_source_bytes,
                change: change_options(&change)?,
            };
            let mut input = tinydelta::diagnose::Input::open(file.as_deref(), false)?;
            let name = input.name().to_string();
            let input = input.reader()?;
            let r = {
                let _p = Progress::spinner(&format!("merge into {}", table.display()), quiet);
                tinydelta::dml::merge(&t, &name, input, &opts)?
            };
            change_outcome(&mut out, &t, &table, &r, change.json, "into")?;
            if r.version.is_some() {
                out.flush().map_err(stdout_err)?;
                auto_compact_after_write(&t, quiet);
            }
        }
        Cmd::Restore {
            table,
            version,
            expect_version,
            json,
        } => {
            let t = Table::open(&table)?;
            let opts = WriteOptions {
                expect_version,
                ..Default::default()
            };
            let v = t.restore(version, &opts)?;
            if json {
                let mut doc = outcome(&t, &table, v)?;
                doc["restoredVersion"] = json!(version);
                writeln!(out, "{doc}").map_err(stdout_err)?;
            } else {
                writeln!(out, "restored {} to version {version} as version {v}", table.display())
                    .map_err(stdout_err)?;
            }
        }
        Cmd::Alter { table, change } => match change {
            AlterCmd::AddColumn { column, expect_version } => {
                let t = Table::open(&table)?;
                let opts = WriteOptions {
                    expect_version,
                    ..Default::default()
                };
                let v = tinydelta::alter::add_column(&t, &column, &opts)?;
                let schema = shown_schema(&t.snapshot(v)?.schema);
                writeln!(
                    out,
                    "added column {} to {} as version {v}: {}",
                    tinydelta::quote::shortened(&column),
                    table.display(),
                    schema
                )
                .map_err(stdout_err)?;
            }
            AlterCmd::SetProperty {
                properties,
                expect_version,
            } => {
                let changes = properties
                    .iter()
                    .map(|p| {
                        p.split_once('=')
                            .map(|(k, v)| (k.trim().to_string(), Some(v.trim().to_string())))
                            .ok_or_else(|| {
                                Error::InvalidArgument(format!(
                                    "{} is not KEY=VALUE, e.g. delta.autoOptimize.autoCompact=true",
                                    tinydelta::quote::quoted(p)
                                ))
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                set_properties_cli(&mut out, &table, &changes, expect_version)?;
            }
            AlterCmd::UnsetProperty { keys, expect_version } => {
                let changes: Vec<(String, Option<String>)> = keys.into_iter().map(|k| (k, None)).collect();
                set_properties_cli(&mut out, &table, &changes, expect_version)?;
            }
            AlterCmd::DropColumn { name } => {
                return Err(Error::InvalidArgument(format!(
                    "cannot drop column {}: tinydelta only adds nullable columns (dropping needs Delta column mapping)",
                    tinydelta::quote::quoted(&name)
                ))
                .into());
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
                    Error::InvalidArgument(format!(
                        "--target-size {} is not a size like 128MiB, 1GiB or 65536",
                        tinydelta::quote::quoted(&s)
                    ))
                })?,
                None => tinydelta::optimize::DEFAULT_TARGET_SIZE,
            };
            let opts = WriteOptions {
                expect_version,
                ..Default::default()
            };
            let r = {
                let _p = Progress::spinner(&format!("optimize {}", table.display()), quiet);
                tinydelta::optimize::optimize(
                    &t,
                    &tinydelta::optimize::OptimizeOptions {
                        target_size: target,
                        write: opts,
                        settled_before_ms: None,
                        tiered: false,
                    },
                )?
            };
            match r.version {
                Some(v) => writeln!(
                    out,
                    "optimized {}: {} ({}) into {} as version {v}; {} live",
                    table.display(),
                    count(r.removed_files as u64, "file", "files"),
                    count(r.removed_bytes, "byte", "bytes"),
                    r.added_files,
                    count(r.files_after as u64, "file", "files")
                ),
                None => writeln!(
                    out,
                    "nothing to optimize in {}: no two files smaller than {target} bytes fit one file ({} live)",
                    table.display(),
                    count(r.files_after as u64, "file", "files")
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
            let _p = Progress::spinner(&format!("check {}", table.display()), quiet);
            let report = match Table::open(&table) {
                Ok(t) => tinydelta::check::check(&t, &tinydelta::check::CheckOptions { deep, repair })?,
                Err(e) if e.is_damage() => tinydelta::check::Report::unopenable(e),
                Err(e) => return Err(e.into()),
            };
            drop(_p);
            if json {
                writeln!(out, "{}", json!({"table": table.display().to_string(), "whole": report.is_whole(), "readableThrough": report.readable_through, "problems": report.problems, "notes": report.notes, "repaired": report.repaired})).map_err(stdout_err)?;
            } else {
                for p in &report.problems {
                    let sev = match p.severity {
                        tinydelta::check::Severity::Damage => "damage",
                        tinydelta::check::Severity::Warning => "warning",
                    };
                    writeln!(out, "{sev}: {} (what to do: {})", p.message, p.hint).map_err(stdout_err)?;
                }
                for n in &report.notes {
                    writeln!(out, "note: {n}").map_err(stdout_err)?;
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
                }
                .into());
            }
        }
        Cmd::Vacuum {
            table,
            retain,
            force,
            older_than,
            dry_run,
            json,
        } => {
            let t = Table::open(&table)?;
            let duration = |flag: &str, d: Option<String>| -> Result<Option<std::time::Duration>> {
                d.map(|d| {
                    humantime::parse_duration(&d).map_err(|e| {
                        Error::InvalidArgument(format!(
                            "{flag} {} is not a duration: write a number and a unit, e.g. 0s, 30m, 1h, 7d or 2weeks ({e})",
                            tinydelta::quote::quoted(&d)
                        ))
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
            let report = {
                let _p = Progress::spinner(&format!("vacuum {}", table.display()), quiet);
                tinydelta::vacuum::vacuum(&t, &opts)?
            };
            let verb = if dry_run { "would delete" } else { "deleted" };
            if json {
                let files: Vec<_> = report
                    .deleted
                    .iter()
                    .map(|(p, size)| json!({"path": p.display().to_string(), "size": size}))
                    .collect();
                let doc = json!({
                    "table": table.display().to_string(),
                    "dryRun": dry_run,
                    "files": files,
                    "numFiles": report.deleted.len(),
                    "sizeBytes": report.bytes,
                    "numExpiredDataFiles": report.expired,
                    "numExpiredChangeDataFiles": report.expired_change_data,
                    "retentionMillis": report.retention.as_millis() as u64,
                    "dataKept": report.data_kept,
                    "stagingSkipped": report.staging_skipped,
                    "vacuumStartVersion": report.commits.map(|c| c.0),
                    "vacuumEndVersion": report.commits.map(|c| c.1),
                });
                writeln!(out, "{doc}").map_err(stdout_err)?;
                return Ok(());
            }
            if let Some(why) = &report.data_kept {
                writeln!(out, "kept every data file: {why}").map_err(stdout_err)?;
            }
            for (p, size) in &report.deleted {
                writeln!(out, "{verb} {} ({})", p.display(), count(*size, "byte", "bytes")).map_err(stdout_err)?;
            }
            writeln!(
                out,
                "{verb} {} ({}) from {}; {} of them data files removed more than {} ago{}",
                count(report.deleted.len() as u64, "file", "files"),
                count(report.bytes, "byte", "bytes"),
                table.display(),
                report.expired,
                tinydelta::vacuum::format_duration(report.retention),
                match report.expired_change_data {
                    0 => String::new(),
                    n => format!(
                        " and {} written that long ago",
                        count(n as u64, "change data file", "change data files")
                    ),
                },
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
        Cmd::Serve {
            table,
            port,
            bind,
            writable,
            max_upload_bytes,
            threads,
            max_event_streams,
        } => {
            let max_upload_bytes = match max_upload_bytes {
                Some(s) => tinydelta::optimize::parse_size(&s).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "--max-upload-bytes {} is not a size like 64MiB or 65536",
                        tinydelta::quote::quoted(&s)
                    ))
                })?,
                None => tinydelta::server::DEFAULT_MAX_UPLOAD_BYTES,
            };
            let opts = tinydelta::server::ServeOptions {
                bind,
                port,
                writable,
                max_upload_bytes,
                threads,
                max_event_streams,
            };
            let server = tinydelta::server::Server::start(&table, opts)?;
            writeln!(out, "serving {} at {}", table.display(), server.url()).map_err(stdout_err)?;
            out.flush().map_err(stdout_err)?;
            drop(out);
            server.run()?;
        }
        Cmd::Export {
            table,
            dest,
            version,
            all_versions,
        } => export(&mut out, &table, &dest, version, all_versions, quiet)?,
        Cmd::Completions { shell, bin } => {
            let mut cmd = match bin.as_str() {
                "tinydelta-mount" => mount_cli::command(),
                _ => Cli::command(),
            };
            // Into a buffer first: clap_complete panics on a failed write (a closed pipe).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, bin.as_str(), &mut script);
            out.write_all(&script).map_err(stdout_err)?;
            out.flush().map_err(stdout_err)?;
        }
        Cmd::Man { dir } => {
            let written = write_man_pages(&dir)?;
            writeln!(
                out,
                "wrote {} into {} (view one with: man -l {}/tinydelta.1)",
                count(written as u64, "man page", "man pages"),
                dir.display(),
                dir.display()
            )
            .map_err(stdout_err)?;
        }
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
    quiet: bool,
) -> Result<()> {
    use tinydelta::export::{self, Mode};
    let t = Table::open(table)?;
    let mode = if all_versions {
        Mode::AllVersions
    } else {
        Mode::Snapshot(version)
    };
    let label = format!("export {}", table.display());
    let p = Progress::spinner(&label, quiet);
    let r = export::export(&t, dest, mode, &mut |e| {
        p.set_message(format!(
            "{label}: version {} of {} exported, {} of JSONL read",
            e.source_version,
            e.last_version,
            count(e.bytes_in, "byte", "bytes")
        ))
    })?;
    drop(p);
    if let Some(from) = r.started_at {
        // Said on stderr: what was left out and why (stdout keeps its one summary line).
        eprintln!(
            "tinydelta: {}: versions before {from} are not exported: a retention vacuum deleted data files they need \
             (`tinydelta describe` lists the readable versions); {} starts at version {from}, with a checkpoint",
            table.display(),
            dest.display()
        );
    }
    // Decimal units as `ls -h --si` and `df -H`; a small table is not "0.0 MB".
    let mb = |b: u64| match b {
        0..1_000 => format!("{b} bytes"),
        1_000..1_000_000 => format!("{:.1} kB", b as f64 / 1e3),
        _ => format!("{:.1} MB", b as f64 / 1e6),
    };
    match r.dest_versions {
        None => writeln!(
            out,
            "{} is up to date: it holds version {} of {} ({}); nothing exported",
            dest.display(),
            r.source_version,
            table.display(),
            count(r.rows_held, "row", "rows")
        ),
        Some((a, b)) => writeln!(
            out,
            "exported {} to {} as {} (holding version {} of the table, {}): {} written, {} reused, \
             {} written, {} of JSONL -> {} of Parquet{}",
            table.display(),
            dest.display(),
            if a == b {
                format!("version {a}")
            } else {
                format!("versions {a}-{b}")
            },
            r.source_version,
            count(r.rows_held, "row", "rows"),
            count(r.files_written as u64, "Parquet file", "Parquet files"),
            r.files_reused,
            count(r.rows, "row", "rows"),
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

/// Write `tinydelta.1`, `tinydelta-SUB.1` for every subcommand (and `tinydelta-alter-SUB.1`) and
/// `tinydelta-mount.1` into `dir` (clap_mangen), creating it if needed. Returns the number of
/// pages written.
fn write_man_pages(dir: &std::path::Path) -> Result<usize> {
    use tinydelta::IoContext;
    std::fs::create_dir_all(dir).ctx("create", dir)?;
    let mut n = 0;
    let mut page = |cmd: clap::Command, name: String| -> Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        // clap names are &'static str (no "string" feature): a few bytes leaked, once per page.
        let name: &'static str = Box::leak(name.into_boxed_str());
        clap_mangen::Man::new(cmd.name(name))
            .render(&mut buf)
            .ctx("render", &path)?;
        std::fs::write(&path, buf).ctx("write", &path)?;
        n += 1;
        Ok(())
    };
    let mut top = Cli::command();
    top.build();
    page(top.clone(), "tinydelta".into())?;
    for sub in top
        .get_subcommands()
        .filter(|s| s.get_name() != "help" && !s.is_hide_set())
    {
        let name = format!("tinydelta-{}", sub.get_name());
        for subsub in sub
            .get_subcommands()
            .filter(|s| s.get_name() != "help" && !s.is_hide_set())
        {
            page(subsub.clone(), format!("{name}-{}", subsub.get_name()))?;
        }
        page(sub.clone(), name)?;
    }
    page(mount_cli::command(), "tinydelta-mount".into())?;
    Ok(n)
}

/// Rows of the live files without stats (other Delta writers may omit them), counted by reading
/// them: (rows, files).
/// The options of delete, update and merge from their flags.
fn change_options(f: &ChangeFlags) -> Result<tinydelta::dml::ChangeOptions> {
    Ok(tinydelta::dml::ChangeOptions {
        write: WriteOptions {
            expect_version: f.expect_version,
            ..Default::default()
        },
        txn: parse_txn(f.txn.clone())?,
    })
}

/// `--txn APP_ID:VERSION`.
fn parse_txn(txn: Option<String>) -> Result<Option<(String, i64)>> {
    txn.map(|txn| {
        txn.rsplit_once(':')
            .and_then(|(a, v)| Some((a.to_string(), v.parse::<i64>().ok()?)))
            .filter(|(a, v)| !a.is_empty() && *v >= 0)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "--txn {} is not APP_ID:VERSION (a non-empty id and a version from 0), e.g. etl:5",
                    tinydelta::quote::quoted(&txn)
                ))
            })
    })
    .transpose()
}

/// Print what a delete, update or merge did (docs/CLI.md "Row-level changes").
fn change_outcome(
    out: &mut impl Write,
    t: &Table,
    table: &std::path::Path,
    r: &tinydelta::dml::ChangeReport,
    json: bool,
    what: &str,
) -> Result<(), Fail> {
    let sk = r.skipping;
    if json {
        let mut doc = match r.version {
            Some(v) => {
                let mut d = outcome(t, table, v)?;
                if let Some(o) = d.as_object_mut() {
                    for k in ["rows", "files", "bytes", "removedFiles"] {
                        o.remove(k);
                    }
                }
                d
            }
            None => json!({
                "table": table.display().to_string(), "committed": false, "version": null,
                "operation": r.operation, "reason": r.reason,
            }),
        };
        if let Some(rec) = r.txn_recorded {
            doc["txnRecordedVersion"] = json!(rec);
        }
        if r.reason != Some("txnAlreadyApplied") {
            doc["operationMetrics"] = json!(r.metrics);
            doc["filesTotal"] = json!(sk.files_total);
            doc["filesSkipped"] = json!(sk.files_skipped);
            doc["filesRead"] = json!(sk.files_read);
        }
        writeln!(out, "{doc}").map_err(stdout_err)?;
        return Ok(());
    }
    let m = |k: &str| r.metrics.get(k).copied().unwrap_or(0);
    let line = match (r.version, r.reason) {
        (None, Some("txnAlreadyApplied")) => format!(
            "the txn was already applied to {} (it records version {}); nothing committed",
            table.display(),
            r.txn_recorded.unwrap_or_default()
        ),
        (None, _) => format!("no row matches; nothing committed to {}", table.display()),
        (Some(v), _) => {
            let rows = match r.operation {
                "DELETE" => format!("deleted {}", count(m("numDeletedRows"), "row", "rows")),
                "UPDATE" => format!("updated {}", count(m("numUpdatedRows"), "row", "rows")),
                _ => format!(
                    "merged {}: {} updated, {} deleted, {} inserted",
                    count(m("numSourceRows"), "source row", "source rows"),
                    m("numTargetRowsUpdated"),
                    m("numTargetRowsDeleted"),
                    m("numTargetRowsInserted")
                ),
            };
            format!(
                "{rows} {what} {} as version {v}: rewrote {} of {} ({} skipped by statistics), {} copied",
                table.display(),
                m("numRemovedFiles"),
                count(sk.files_total as u64, "file", "files"),
                sk.files_skipped,
                count(m("numCopiedRows").max(m("numTargetRowsCopied")), "row", "rows")
            )
        }
    };
    writeln!(out, "{line}").map_err(stdout_err)?;
    Ok(())
}

fn counted_rows(t: &Table, s: &tinydelta::Snapshot) -> Result<(u64, u64)> {
    let mut rows = 0u64;
    let mut files = 0u64;
    for f in s.files.iter().filter(|f| !f.has_stats) {
        let (file, _) = t.open_rows(f, &s.schema)?;
        rows += tinydelta::count_rows(file, &t.root().join(&f.path))?;
        files += 1;
    }
    Ok((rows, files))
}

/// Rows a commit wrote: Delta's `numOutputRows`, or delta-rs's `num_added_rows`.
fn rows_of(ci: &tinydelta::CommitInfo) -> u64 {
    ci.metric("numOutputRows")
        .or_else(|| ci.metric("num_added_rows"))
        .unwrap_or(0)
}

impl BadLines {
    /// `--max-line-bytes` as [`WriteOptions::max_line_bytes`] (a value past the address space
    /// is as good as no limit).
    fn max_line_bytes(&self) -> Option<usize> {
        self.max_line_bytes.map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    }
}

/// What `append`, `overwrite` and `restore --json` print for the version `v` they committed
/// (docs/CLI.md "Usage"): the commit's own numbers (`rows` in, `files` and `bytes` of the files it added,
/// `removedFiles`) and the table's after it (`tableRows`, `tableFiles`, `tableBytes`), the
/// same words `describe` and `history` use.
fn outcome(t: &Table, table: &std::path::Path, v: u64) -> Result<serde_json::Value> {
    let commit = t.read_commit(v)?;
    let (mut files, mut bytes, mut removed, mut rows) = (0u64, 0u64, 0u64, Some(0u64));
    for a in &commit.actions {
        if let Some(add) = &a.add {
            files += 1;
            bytes = bytes.saturating_add(add.size);
            // Rows added are the data change: a compaction's re-added file (dataChange false)
            // adds none (Delta PROTOCOL "Add File and Remove File").
            if add.data_change {
                rows = rows.zip(add.num_records()).map(|(a, b)| a.saturating_add(b));
            }
        }
        if a.remove.is_some() {
            removed += 1;
        }
    }
    let s = t.snapshot(v)?;
    let (counted, _) = counted_rows(t, &s)?;
    let info = commit.info.unwrap_or_default();
    Ok(json!({
        "table": table.display().to_string(),
        "committed": true,
        "version": v,
        "operation": info.short_operation(),
        "timestamp": s.timestamp,
        "time": rfc3339_ms(s.timestamp),
        "rows": match rows {
            Some(n) => n,
            None => t.snapshot_rows_added(v)?,
        },
        "files": files,
        "bytes": bytes,
        "removedFiles": removed,
        "tableRows": s.num_records() + counted,
        "tableFiles": s.files.len(),
        "tableBytes": s.size_bytes(),
    }))
}

trait RowsAdded {
    fn snapshot_rows_added(&self, v: u64) -> Result<u64>;
}

impl RowsAdded for Table {
    fn snapshot_rows_added(&self, v: u64) -> Result<u64> {
        Ok(rows_of(&self.commit_info(v)?))
    }
}

/// Copy `src` from its offset to its end into `out`, returning the bytes copied. Into a pipe
/// the data file's pages are spliced (splice(2): handed to the pipe, never copied through
/// user space; std::io::copy reads and writes 8 KiB at a time there), waiting for room in a
/// non-blocking one; anything else, or a pipe that refuses splicing, goes through std::io::copy
/// (copy_file_range into a file, sendfile into /dev/null or a socket). Errors: the I/O error
/// of the read or write (EPIPE when the reader went away).
fn copy_out(src: &mut File, out: &mut File, to_pipe: bool) -> io::Result<u64> {
    use rustix::io::Errno;
    let mut n = 0u64;
    if to_pipe {
        loop {
            match rustix::pipe::splice(&*src, None, &*out, None, 1 << 30, rustix::pipe::SpliceFlags::MORE) {
                Ok(0) => return Ok(n),
                Ok(k) => n += k as u64,
                Err(Errno::INTR) => {}
                // A non-blocking pipe that is full: wait until its reader makes room (poll(2)).
                Err(Errno::AGAIN) => {
                    let mut fds = [rustix::event::PollFd::new(&*out, rustix::event::PollFlags::OUT)];
                    match rustix::event::poll(&mut fds, None) {
                        Ok(_) | Err(Errno::INTR) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                // Not spliceable (a file system without splice_read): the plain copy from the
                // offset reached, as without splicing.
                Err(Errno::INVAL | Errno::NOSYS) => break,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(n + io::copy(src, out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/CLI.md's "## Usage" section (up to the next `## ` heading).
    fn usage_section() -> String {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/CLI.md")).expect("docs/CLI.md");
        let start = readme.find("\n## Usage\n").expect("docs/CLI.md has a ## Usage section");
        let rest = &readme[start + 1..];
        let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
        rest[..end].to_string()
    }

    /// The long and short flags (`--name`, `-x`) in `text`.
    fn flags(text: &str) -> Vec<String> {
        text.split(|c: char| c.is_whitespace() || "[]|(),`".contains(c))
            .filter_map(|w| {
                let w = w.split('=').next().unwrap_or(w);
                let name = w.strip_prefix("--").or_else(|| w.strip_prefix('-'))?;
                (!name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '-')).then(|| w.to_string())
            })
            .collect()
    }

    /// Whether `cmd`, one of its subcommands, or a global flag of `top` has the flag `flag`.
    fn has_flag(top: &clap::Command, cmd: &clap::Command, flag: &str) -> bool {
        let matches = |a: &clap::Arg| match flag.strip_prefix("--") {
            Some(long) => a.get_long() == Some(long),
            None => a.get_short() == flag.strip_prefix('-').and_then(|s| s.chars().next()),
        };
        cmd.get_arguments().any(matches)
            || cmd.get_subcommands().any(|s| s.get_arguments().any(matches))
            || top.get_arguments().any(|a| a.is_global_set() && matches(a))
            || flag == "--help"
            || flag == "--version"
    }

    /// Every command and flag docs/CLI.md "Usage" names exists in the clap definitions: the
    /// synopsis lines (`tinydelta CMD ... --flag`, continuation lines belong to the command above)
    /// and inline code that starts with a subcommand (`read --as-of TIME`).
    #[test]
    fn readme_usage_names_only_real_commands_and_flags() {
        let mut top = Cli::command();
        top.build();
        let mut mount = mount_cli::command();
        mount.build();
        let usage = usage_section();
        let sub = |name: &str| top.find_subcommand(name).cloned();
        let mut checked = 0;
        let mut current: Option<(clap::Command, &clap::Command)> = None;
        for line in usage.lines() {
            let Some(code) = line.strip_prefix("    ") else {
                current = None;
                continue;
            };
            let words: Vec<&str> = code.split_whitespace().collect();
            let cmd = match words.first() {
                Some(&"tinydelta") => {
                    let name = words.get(1).expect("a subcommand after tinydelta");
                    let c = sub(name)
                        .unwrap_or_else(|| panic!("docs/CLI.md names `tinydelta {name}`, which clap does not define"));
                    current = Some((c, &top));
                    current.as_ref().map(|c| c.0.clone())
                }
                Some(&"tinydelta-mount") => {
                    current = Some((mount.clone(), &mount));
                    current.as_ref().map(|c| c.0.clone())
                }
                Some(w) if w.starts_with('[') || w.starts_with("--") => current.as_ref().map(|c| c.0.clone()),
                _ => {
                    current = None;
                    None
                }
            };
            let Some(cmd) = cmd else { continue };
            let owner = current.as_ref().map_or(&top, |c| c.1);
            for f in flags(code) {
                assert!(
                    has_flag(owner, &cmd, &f),
                    "docs/CLI.md's usage line {code:?} names {f}, which `{}` does not have",
                    cmd.get_name()
                );
                checked += 1;
            }
        }
        // Inline code in the prose: `read --as-of TIME`, `vacuum --retain 0s --force`, ...
        for span in usage.split('`').skip(1).step_by(2) {
            let mut words = span.split_whitespace();
            let Some(first) = words.next() else { continue };
            let (owner, cmd) = match first {
                "tinydelta-mount" => (&mount, Some(mount.clone())),
                "tinydelta" => (&top, words.next().and_then(sub)),
                name => (&top, sub(name)),
            };
            let Some(cmd) = cmd else { continue };
            for f in flags(span) {
                assert!(
                    has_flag(owner, &cmd, &f),
                    "docs/CLI.md's usage section has `{span}`, but `{}` has no {f}",
                    cmd.get_name()
                );
                checked += 1;
            }
        }
        assert!(
            checked >= 40,
            "only {checked} flags found in docs/CLI.md's usage section: did its format change?"
        );
        // Every subcommand is in the synopsis.
        for c in top.get_subcommands().filter(|c| c.get_name() != "help") {
            assert!(
                usage.contains(&format!("    tinydelta {}", c.get_name())),
                "docs/CLI.md's usage synopsis does not list `tinydelta {}`",
                c.get_name()
            );
        }
    }

    #[test]
    fn the_flags_parser_finds_flags() {
        assert_eq!(
            flags("TABLE [--retain DUR [--force]] [-o OPTIONS] `--json`"),
            ["--retain", "--force", "-o", "--json"]
        );
    }
}
