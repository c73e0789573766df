//! Command-line parsing (a handful of flags; no parser crate needed).

use std::time::Duration;

use thiserror::Error;

/// Default scatter seed: fixed, so runs are reproducible unless a seed is given.
pub const DEFAULT_SEED: u64 = 0x5744_444d_2d47_5055;
/// Default per-request timeout: generous because TCG guests are slow.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default iterations per benchmark operation (see `scenario::bench`).
pub const DEFAULT_ITERATIONS: u32 = 200;

/// Usage text.
pub const USAGE: &str = "\
usage: wddm-guest <command> [options]
commands:
  slice   read the segment layout, check the VRAM BAR, round-trip a scattered transfer
  suite   run the guest test suite (valid, layout, BAR, hostile and paging tests)
  paging  run the paging tests alone (every packet, aperture, status page, events,
          preemption, reset, evict/restore)
  gpuva   run the GPU virtual addressing tests (a layout with [gpummu]): capset 62, two
          address spaces, 4 KiB and 64 KiB pages, monitored fences, page faults, a skipped
          FLUSH_TLB caught by the checking mode
  probe   bring the device up and list what it answers (works on any virtio-gpu)
  bench   a short paging benchmark: guest-side latency (kick to completion) of each
          packet kind, every result checked
  lifecycle  the GPU in use across VM stop/cont and system_reset, synchronised with a host
          helper: GUEST-SYNC <point> on the console, the answer read from /dev/ttyS1
  scanout the primary surface from VRAM: flips between two surfaces, VBLANK events counted,
          each surface checked by the host's screendump (GUEST-SYNC as lifecycle)
  tdr     timeout detection and recovery: the host arms each fault injection of the paging
          node (hang, slow, lost interrupt, packet fault, refused and slow PREEMPT) at a sync
          point (GUEST-SYNC as lifecycle); the driver recovers and checks nothing was lost
options:
  --json          (slice, bench) also print one WDDM-GUEST-JSON line
  --bench         (slice) run the benchmark after the slice, in the same report
  --iterations N  (slice --bench, bench) submissions per operation (default 200)
  --hold SECS     (slice --bench, bench) after the benchmark, print GUEST-BENCH-DONE and keep
                  the device up SECS seconds (so the host can read the backend's statistics)
  --only a,b      (suite, paging, gpuva) run only these tests (bare names after the command
                  work too, since the guest's /init turns commas into spaces)
  --seed N        scatter seed (decimal or 0x hex)
  --timeout SECS  per-request timeout (default 10)
  --verbose       log every control-queue exchange and completion";

/// What to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// The slice test.
    Slice {
        /// Also print the JSON line.
        json: bool,
        /// Run the benchmark after it.
        bench: bool,
    },
    /// The paging benchmark.
    Bench {
        /// Also print the JSON line.
        json: bool,
    },
    /// The guest test suite.
    Suite {
        /// Test names to run (all when empty).
        only: Vec<String>,
    },
    /// The paging tests alone (same output as the suite).
    Paging {
        /// Test names to run (all paging tests when empty).
        only: Vec<String>,
    },
    /// The GPU virtual addressing tests (same output as the suite).
    Gpuva {
        /// Test names to run (all GPU VA tests when empty).
        only: Vec<String>,
    },
    /// Device bring-up and listing.
    Probe,
    /// The VM lifecycle tests (stop/cont, reset) with the host helper.
    Lifecycle,
    /// The VRAM scanout tests with the host helper's screendumps.
    Scanout,
    /// The TDR tests against the injections the host helper arms.
    Tdr,
    /// Print usage.
    Help,
}

/// Parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// What to run.
    pub command: Command,
    /// Scatter seed.
    pub seed: u64,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Log every control-queue exchange.
    pub verbose: bool,
    /// Benchmark iterations per operation.
    pub iterations: u32,
    /// How long to keep the device up after the benchmark.
    pub hold: Duration,
}

/// The command line is wrong.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CliError {
    /// No command given.
    #[error("no command given")]
    NoCommand,
    /// Unknown command.
    #[error("unknown command {0:?}")]
    UnknownCommand(String),
    /// Unknown or misplaced option.
    #[error("unknown option {0:?} for this command")]
    UnknownOption(String),
    /// An option lacks its value or the value is malformed.
    #[error("option {0} needs a valid value")]
    BadValue(&'static str),
}

/// Parses the arguments after the program name.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Options, CliError> {
    let mut args = args.into_iter();
    let mut command = match args.next().as_deref() {
        None => return Err(CliError::NoCommand),
        Some("slice") => Command::Slice {
            json: false,
            bench: false,
        },
        Some("bench") => Command::Bench { json: false },
        Some("suite") => Command::Suite { only: Vec::new() },
        Some("paging") => Command::Paging { only: Vec::new() },
        Some("gpuva") => Command::Gpuva { only: Vec::new() },
        Some("probe") => Command::Probe,
        Some("lifecycle") => Command::Lifecycle,
        Some("scanout") => Command::Scanout,
        Some("tdr") => Command::Tdr,
        Some("help" | "-h" | "--help") => Command::Help,
        Some(other) => return Err(CliError::UnknownCommand(other.to_string())),
    };
    let mut seed = DEFAULT_SEED;
    let mut timeout = DEFAULT_TIMEOUT;
    let mut verbose = false;
    let mut iterations = DEFAULT_ITERATIONS;
    let mut hold = Duration::ZERO;
    while let Some(arg) = args.next() {
        match (arg.as_str(), &mut command) {
            ("--json", Command::Slice { json, .. } | Command::Bench { json }) => *json = true,
            ("--bench", Command::Slice { bench, .. }) => *bench = true,
            ("--iterations", Command::Slice { .. } | Command::Bench { .. }) => {
                iterations = args
                    .next()
                    .as_deref()
                    .and_then(parse_number)
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| (1..=1_000_000).contains(n))
                    .ok_or(CliError::BadValue("--iterations"))?;
            }
            ("--hold", Command::Slice { .. } | Command::Bench { .. }) => {
                let secs = args
                    .next()
                    .as_deref()
                    .and_then(parse_number)
                    .filter(|s| *s <= 600)
                    .ok_or(CliError::BadValue("--hold"))?;
                hold = Duration::from_secs(secs);
            }
            (
                "--only",
                Command::Suite { only } | Command::Paging { only } | Command::Gpuva { only },
            ) => {
                let list = args.next().ok_or(CliError::BadValue("--only"))?;
                only.extend(list.split(',').filter(|s| !s.is_empty()).map(String::from));
            }
            ("--seed", _) => {
                seed = args
                    .next()
                    .as_deref()
                    .and_then(parse_number)
                    .ok_or(CliError::BadValue("--seed"))?;
            }
            ("--timeout", _) => {
                let secs = args
                    .next()
                    .as_deref()
                    .and_then(parse_number)
                    .filter(|s| *s > 0)
                    .ok_or(CliError::BadValue("--timeout"))?;
                timeout = Duration::from_secs(secs);
            }
            ("-h" | "--help", _) => command = Command::Help,
            ("-v" | "--verbose", _) => verbose = true,
            (
                name,
                Command::Suite { only } | Command::Paging { only } | Command::Gpuva { only },
            ) if !name.starts_with('-') => only.push(arg),
            _ => return Err(CliError::UnknownOption(arg)),
        }
    }
    Ok(Options {
        command,
        seed,
        timeout,
        verbose,
        iterations,
        hold,
    })
}

fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Result<Options, CliError> {
        parse(line.split_whitespace().map(String::from))
    }

    #[test]
    fn parses_commands_and_options() {
        let o = args("slice --json --seed 0x10 --timeout 30").unwrap();
        assert_eq!(
            o.command,
            Command::Slice {
                json: true,
                bench: false
            }
        );
        assert_eq!(o.iterations, DEFAULT_ITERATIONS);
        assert_eq!(o.seed, 16);
        assert_eq!(o.timeout, Duration::from_secs(30));
        assert!(!o.verbose);
        assert!(args("probe --verbose").unwrap().verbose);
        let o = args("suite --only a,b --only c").unwrap();
        assert_eq!(
            o.command,
            Command::Suite {
                only: vec!["a".into(), "b".into(), "c".into()]
            }
        );
        assert_eq!(o.seed, DEFAULT_SEED);
        let o = args("suite a --seed 3 b").unwrap();
        assert_eq!(
            o.command,
            Command::Suite {
                only: vec!["a".into(), "b".into()]
            }
        );
        assert_eq!(args("probe").unwrap().command, Command::Probe);
        let o = args("lifecycle --seed 7 --timeout 20").unwrap();
        assert_eq!(o.command, Command::Lifecycle);
        assert_eq!(args("scanout").unwrap().command, Command::Scanout);
        assert_eq!(args("tdr").unwrap().command, Command::Tdr);
        assert_eq!((o.seed, o.timeout), (7, Duration::from_secs(20)));
        assert_eq!(
            args("paging paging_reset --only paging_fill")
                .unwrap()
                .command,
            Command::Paging {
                only: vec!["paging_reset".into(), "paging_fill".into()]
            }
        );
        assert_eq!(
            args("paging").unwrap().command,
            Command::Paging { only: Vec::new() }
        );
        assert_eq!(
            args("gpuva gpuva_capset --only gpuva_page_faults")
                .unwrap()
                .command,
            Command::Gpuva {
                only: vec!["gpuva_capset".into(), "gpuva_page_faults".into()]
            }
        );
        assert_eq!(args("suite --help").unwrap().command, Command::Help);
        let o = args("slice --json --bench --iterations 20").unwrap();
        assert_eq!(
            o.command,
            Command::Slice {
                json: true,
                bench: true
            }
        );
        assert_eq!(o.iterations, 20);
        assert_eq!(o.hold, Duration::ZERO);
        let o = args("bench --json --iterations 0x10 --hold 3").unwrap();
        assert_eq!(o.command, Command::Bench { json: true });
        assert_eq!(o.iterations, 16);
        assert_eq!(o.hold, Duration::from_secs(3));
        assert_eq!(
            args("bench").unwrap().command,
            Command::Bench { json: false }
        );
    }

    #[test]
    fn rejects_bad_command_lines() {
        assert_eq!(args(""), Err(CliError::NoCommand));
        assert_eq!(args("frob"), Err(CliError::UnknownCommand("frob".into())));
        assert_eq!(
            args("suite --json"),
            Err(CliError::UnknownOption("--json".into()))
        );
        assert_eq!(args("slice --seed"), Err(CliError::BadValue("--seed")));
        assert_eq!(args("slice --seed zz"), Err(CliError::BadValue("--seed")));
        assert_eq!(
            args("slice --timeout 0"),
            Err(CliError::BadValue("--timeout"))
        );
        for bad in [
            "bench --iterations 0",
            "bench --iterations",
            "bench --iterations x",
        ] {
            assert_eq!(args(bad), Err(CliError::BadValue("--iterations")), "{bad}");
        }
        assert_eq!(
            args("suite --iterations 5"),
            Err(CliError::UnknownOption("--iterations".into()))
        );
        assert_eq!(
            args("lifecycle extra"),
            Err(CliError::UnknownOption("extra".into()))
        );
        assert_eq!(
            args("bench --bench"),
            Err(CliError::UnknownOption("--bench".into()))
        );
    }
}
