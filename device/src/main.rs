//! `vhost-user-wddm-gpu`: the backend process QEMU's `vhost-user-gpu-pci` connects to.

use std::io::{ErrorKind, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use vhost_user_wddm_gpu::cli::{Cli, Command, RunArgs};
use vhost_user_wddm_gpu::daemon::{self, Config};
use vhost_user_wddm_gpu::{
    dxgk_values, endpoint, replay, watch, LayoutReport, ReplayError, ReplayOptions, ReplayReport,
    WatchError, WatchOptions,
};

/// Exit code for invalid input (bad layout, bad value): the same as clap's usage errors.
const EXIT_INVALID: u8 = 2;

/// Exit code of a replay in which some answer differs from the recorded one.
const EXIT_MISMATCH: u8 = 3;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    match cli.command {
        Some(Command::CheckLayout {
            file,
            vram_size,
            json,
        }) => check_layout(&file, vram_size, json),
        Some(Command::Decode { kind, value }) => {
            value_command(&kind, |kind| dxgk_values::decode(kind, &value))
        }
        Some(Command::Encode { kind, fields }) => {
            value_command(&kind, |kind| dxgk_values::encode(kind, &fields))
        }
        Some(Command::Stats {
            socket,
            prometheus,
            json,
            watch,
            count,
        }) => {
            let request = if prometheus {
                "prometheus"
            } else if json {
                "json"
            } else {
                "table"
            };
            let path = stats_socket_for(&socket);
            match watch {
                Some(interval) if request == "table" => watch_command(
                    &path,
                    WatchOptions {
                        interval,
                        frames: count,
                        terminal: std::io::stdout().is_terminal(),
                    },
                ),
                _ => stats_command(&path, request, watch.map(|interval| (interval, count))),
            }
        }
        Some(Command::Ctl { socket, request }) => ctl_command(&socket, &request.join(" ")),
        Some(Command::Replay {
            file,
            json,
            trace,
            dump_vram,
        }) => replay_command(&file, json, ReplayOptions { trace, dump_vram }),
        None => serve(&cli.run),
    }
}

/// A command line clap refused, as one line with the common prefix (clap's own rendering adds
/// a usage block); `--help` and `--version` print as clap prints them.
fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind::{
        DisplayHelp, DisplayHelpOnMissingArgumentOrSubcommand, DisplayVersion,
    };
    if matches!(
        error.kind(),
        DisplayHelp | DisplayHelpOnMissingArgumentOrSubcommand | DisplayVersion
    ) {
        error.exit();
    }
    // The message is the rendering's first paragraph (a list of missing arguments is indented
    // under its first line); the usage block after it is what --help shows.
    let rendered = error.render().to_string();
    let message = rendered
        .lines()
        .take_while(|line| !line.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    eprintln!("vhost-user-wddm-gpu: error: {message} (see --help)");
    ExitCode::from(EXIT_INVALID)
}

/// `ctl SOCKET WORDS...`: one request to the control socket, its answer on standard output.
fn ctl_command(socket: &Path, request: &str) -> ExitCode {
    let companion = endpoint::default_control_path(socket);
    let path = if std::fs::symlink_metadata(&companion).is_ok() {
        companion
    } else {
        socket.to_owned()
    };
    match endpoint::query_bytes(&path, request) {
        Ok(answer) => {
            let mut stdout = std::io::stdout().lock();
            // A closed pipe (e.g. `| head`) is not an error of the request.
            let _ = stdout.write_all(&answer).and_then(|()| stdout.flush());
            ExitCode::SUCCESS
        }
        Err(error) if error.kind() == ErrorKind::InvalidInput => {
            eprintln!("vhost-user-wddm-gpu: error: ctl: {error}");
            ExitCode::from(EXIT_INVALID)
        }
        Err(error) => {
            eprintln!(
                "vhost-user-wddm-gpu: error: no control endpoint at {}: {error} (is the backend \
                 running? it serves --ctl-socket, by default its --socket-path with .ctl appended)",
                path.display()
            );
            ExitCode::from(EXIT_INVALID)
        }
    }
}

fn serve(args: &RunArgs) -> ExitCode {
    if args.print_capabilities {
        println!("{{\n  \"type\": \"gpu\",\n  \"features\": []\n}}");
        return ExitCode::SUCCESS;
    }
    let (mut layout, layout_text) =
        match daemon::load_layout_with_text(args.layout.as_deref(), args.vram_size) {
            Ok(loaded) => loaded,
            Err(lines) => {
                for line in lines {
                    eprintln!("vhost-user-wddm-gpu: error: {line}");
                }
                return ExitCode::from(EXIT_INVALID);
            }
        };
    if let Some(link) = &args.link {
        layout.link = Some(link.clone());
    }
    let config = Config {
        layout_text,
        ..args.config()
    };
    match daemon::run(&config, layout) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            ExitCode::from(1)
        }
    }
}

fn check_layout(path: &Path, vram_size: u64, json: bool) -> ExitCode {
    match daemon::load_layout(Some(path), vram_size) {
        Ok(layout) => {
            let report = LayoutReport::new(&layout, vram_size);
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(text) => println!("{text}"),
                    Err(error) => {
                        eprintln!("vhost-user-wddm-gpu: error: {error}");
                        return ExitCode::from(1);
                    }
                }
            } else {
                print!("{}", report.text());
            }
            ExitCode::SUCCESS
        }
        Err(lines) => {
            for line in lines {
                eprintln!("vhost-user-wddm-gpu: error: {line}");
            }
            ExitCode::from(EXIT_INVALID)
        }
    }
}

fn value_command(
    kind: &str,
    apply: impl FnOnce(dxgk_values::ValueKind) -> Result<String, dxgk_values::CodecError>,
) -> ExitCode {
    match dxgk_values::ValueKind::from_name(kind).and_then(apply) {
        Ok(text) => {
            println!("{}", text.trim_end());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

/// The stats socket `stats SOCKET` means: `SOCKET.stats` when that exists (SOCKET is then
/// the vhost-user socket), else SOCKET itself.
fn stats_socket_for(socket: &Path) -> PathBuf {
    let companion = endpoint::default_path(socket);
    if std::fs::symlink_metadata(&companion).is_ok() {
        companion
    } else {
        socket.to_owned()
    }
}

/// `stats SOCKET`: one rendering of the stats endpoint at `path`, or with `repeat` (interval,
/// frames) one every interval.
fn stats_command(path: &Path, request: &str, repeat: Option<(Duration, Option<u64>)>) -> ExitCode {
    let mut separator = "";
    let mut printed = 0u64;
    loop {
        let answer = match endpoint::query(path, request) {
            Ok(answer) => answer,
            Err(error) => return stats_unreachable(path, &error),
        };
        let mut stdout = std::io::stdout().lock();
        if write!(stdout, "{separator}{answer}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            // A closed pipe (e.g. `| head`): nothing more to show.
            return ExitCode::SUCCESS;
        }
        drop(stdout);
        printed += 1;
        let Some((interval, frames)) = repeat else {
            return ExitCode::SUCCESS;
        };
        if frames.is_some_and(|frames| printed >= frames) {
            return ExitCode::SUCCESS;
        }
        std::thread::sleep(interval);
        separator = "\n";
    }
}

/// `stats --watch SECS SOCKET`: the live view until interrupted.
fn watch_command(path: &Path, options: WatchOptions) -> ExitCode {
    match watch(path, options, std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(WatchError::Query { source, .. }) => stats_unreachable(path, &source),
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            ExitCode::from(EXIT_INVALID)
        }
    }
}

/// The stats endpoint at `path` did not answer: says why (and what to check when nothing is
/// there at all).
fn stats_unreachable(path: &Path, error: &std::io::Error) -> ExitCode {
    let at = path.display();
    if matches!(
        error.kind(),
        ErrorKind::NotFound | ErrorKind::ConnectionRefused
    ) {
        eprintln!(
            "vhost-user-wddm-gpu: error: no stats endpoint at {at}: {error} \
             (is the backend running? it serves --stats-socket, by default its \
             --socket-path with .stats appended)"
        );
    } else {
        eprintln!("vhost-user-wddm-gpu: error: stats endpoint {at}: {error}");
    }
    ExitCode::from(EXIT_INVALID)
}

fn replay_command(file: &Path, json: bool, options: ReplayOptions) -> ExitCode {
    let report = match replay(file, &options) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {}: {error}", file.display());
            return ExitCode::from(match error {
                ReplayError::Format(_) | ReplayError::Layout(_) => EXIT_INVALID,
                _ => 1,
            });
        }
    };
    for mismatch in &report.counts.mismatches {
        eprintln!(
            "vhost-user-wddm-gpu: replay: entry {} (node {}, fence {}) answered differently:\n  recorded {:?}\n  replayed {:?}",
            mismatch.entry, mismatch.node, mismatch.fence, mismatch.recorded, mismatch.replayed
        );
    }
    for refusal in &report.counts.refusals {
        eprintln!(
            "vhost-user-wddm-gpu: replay: entry {} ({}) was accepted by the backend, refused here: {}",
            refusal.entry, refusal.command, refusal.error
        );
    }
    let printed = if json {
        replay_json(&report)
    } else {
        Ok(format!(
            "{}\n{}\n",
            report.stats.snapshot().to_table(),
            replay_summary(&report)
        ))
    };
    match printed {
        Ok(text) => print!("{text}"),
        Err(error) => {
            eprintln!("vhost-user-wddm-gpu: error: {error}");
            return ExitCode::from(1);
        }
    }
    if report.counts.mismatches.is_empty() && report.counts.refusals.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_MISMATCH)
    }
}

/// The lines under the replay's table: what was replayed and whether the answers matched.
fn replay_summary(report: &ReplayReport) -> String {
    let verdict = match (report.counts.mismatches.len(), report.counts.refusals.len()) {
        (0, 0) => "every answer matched the recording".to_owned(),
        (n, 0) => format!("{n} answer(s) differ from the recording"),
        (n, refused) => {
            format!("{n} answer(s) differ from the recording, {refused} context command(s) refused")
        }
    };
    let data = match (report.header.data, report.counts.data_dropped) {
        (false, _) => "metadata only".to_owned(),
        (true, 0) => "with data".to_owned(),
        (true, dropped) => format!("with data ({dropped} bytes over the limit left out)"),
    };
    format!(
        "replay: {} submissions ({} on the virtual node), {} context commands, {} resets, {} engine resets, {} preempts ({data}); execution {:.3} ms recorded, {:.3} ms replayed; {verdict}",
        report.counts.submissions,
        report.counts.virtual_submissions,
        report.counts.context_commands,
        report.counts.resets,
        report.counts.engine_resets,
        report.counts.preempts,
        report.counts.recorded_ns as f64 / 1e6,
        report.counts.replayed_ns as f64 / 1e6,
    )
}

/// The `stats --json` object of the replay, with a `replay` member.
fn replay_json(report: &ReplayReport) -> Result<String, serde_json::Error> {
    let mut value = serde_json::to_value(report.stats.snapshot())?;
    let mismatches: Vec<serde_json::Value> = report
        .counts
        .mismatches
        .iter()
        .map(|mismatch| {
            serde_json::json!({
                "entry": mismatch.entry,
                "node": mismatch.node,
                "fence": mismatch.fence,
                "recorded": format!("{:?}", mismatch.recorded),
                "replayed": format!("{:?}", mismatch.replayed),
            })
        })
        .collect();
    let refusals: Vec<serde_json::Value> = report
        .counts
        .refusals
        .iter()
        .map(|refusal| {
            serde_json::json!({
                "entry": refusal.entry,
                "command": refusal.command,
                "error": refusal.error.to_string(),
            })
        })
        .collect();
    if let Some(object) = value.as_object_mut() {
        object.insert(
            "replay".into(),
            serde_json::json!({
                "submissions": report.counts.submissions,
                "virtual_submissions": report.counts.virtual_submissions,
                "context_commands": report.counts.context_commands,
                "engine_resets": report.counts.engine_resets,
                "resets": report.counts.resets,
                "preempts": report.counts.preempts,
                "data": report.header.data,
                "data_dropped": report.counts.data_dropped,
                "recorded_ns": report.counts.recorded_ns,
                "replayed_ns": report.counts.replayed_ns,
                "mismatches": mismatches,
                "refusals": refusals,
            }),
        );
    }
    let mut text = serde_json::to_string_pretty(&value)?;
    text.push('\n');
    Ok(text)
}
