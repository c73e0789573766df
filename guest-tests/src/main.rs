//! `wddm-guest`: the guest-side reference driver and test runner (see the library docs).
//! Exit codes: 0 all checks passed, 1 a check failed, 2 bad command line.

use std::process::ExitCode;

use wddm_guest::cli::{self, Command, USAGE};
use wddm_guest::scenario::{bench, lifecycle, probe, scanout, slice, suite, tdr};

fn main() -> ExitCode {
    let options = match cli::parse(std::env::args().skip(1)) {
        Ok(options) => options,
        Err(err) => {
            eprintln!("wddm-guest: {err}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let passed = match &options.command {
        Command::Help => {
            println!("{USAGE}");
            true
        }
        Command::Probe => probe::run(&options),
        Command::Lifecycle => lifecycle::run(&options),
        Command::Scanout => scanout::run(&options),
        Command::Tdr => tdr::run(&options),
        Command::Slice { json, bench } => slice::run(*json, *bench, &options),
        Command::Bench { json } => bench::run(*json, &options),
        Command::Suite { only } | Command::Paging { only } | Command::Gpuva { only } => {
            let group = match options.command {
                Command::Paging { .. } => suite::Group::Paging,
                Command::Gpuva { .. } => suite::Group::Gpuva,
                _ => suite::Group::All,
            };
            match suite::run(group, only, &options) {
                Ok(passed) => passed,
                Err(err) => {
                    eprintln!("wddm-guest: {err}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
