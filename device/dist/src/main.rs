//! `wddm-gpu-dist OUT_DIR [--date YYYY-MM-DD]`: writes the backend's man pages and shell
//! completions, generated from its clap definitions (`vhost_user_wddm_gpu::cli`), for
//! `scripts/package`:
//!
//! - `OUT_DIR/man/vhost-user-wddm-gpu.1` and one `vhost-user-wddm-gpu-<subcommand>.1` a
//!   subcommand (clap_mangen), each with the exit codes, and `vhost-user-wddm-gpu-libvirt.1`
//!   for the libvirt wrapper the package ships beside the backend;
//! - `OUT_DIR/completions/`: `vhost-user-wddm-gpu.bash`, `_vhost-user-wddm-gpu` (zsh) and
//!   `vhost-user-wddm-gpu.fish` (clap_complete).
//!
//! A separate, unpublished program rather than a hidden subcommand of the backend: the shipped
//! binary carries no generator, and nothing generated is committed that could drift from the
//! definitions.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::roff::{bold, roman, Roff};
use clap_mangen::Man;
use vhost_user_wddm_gpu::cli::{Cli, BIN_NAME};

/// The exit codes every command of the program uses (docs/launching.md has the same table).
const EXIT_CODES: [(&str, &str); 4] = [
    (
        "0",
        "The command did what it was asked. For the backend: the session ended normally (the \
         frontend hung up, or SIGTERM or SIGINT ended it in order).",
    ),
    (
        "1",
        "A start that was refused or failed before serving (another backend serves the socket, a \
         missing directory, a VRAM file in use, of another size or larger than the free space, a \
         bad --fd, an injection plan that cannot be read or parsed, a file or socket that cannot \
         be created), or an error while serving.",
    ),
    (
        "2",
        "Invalid input: a bad command line (clap's usage errors), a bad layout file, a refused \
         value or request, a stats or control socket at which no backend answers.",
    ),
    (
        "3",
        "replay only: an answer differs from the recording, or a context command the backend \
         accepted is refused by the replay.",
    ),
];

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let mut out = None;
    let mut date = String::new();
    while let Some(arg) = args.next() {
        if arg == "--date" {
            match args.next().and_then(|value| value.into_string().ok()) {
                Some(value) => date = value,
                None => return usage("--date needs a value (YYYY-MM-DD)"),
            }
        } else if out.is_none() && !arg.to_string_lossy().starts_with('-') {
            out = Some(PathBuf::from(arg));
        } else {
            return usage(&format!("unexpected argument {}", arg.to_string_lossy()));
        }
    }
    let Some(out) = out else {
        return usage("the output directory is missing");
    };
    match generate(&out, &date) {
        Ok(written) => {
            for path in written {
                println!("{}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("wddm-gpu-dist: error: {}: {error}", out.display());
            ExitCode::from(1)
        }
    }
}

fn usage(problem: &str) -> ExitCode {
    eprintln!("wddm-gpu-dist: {problem}\nusage: wddm-gpu-dist OUT_DIR [--date YYYY-MM-DD]");
    ExitCode::from(2)
}

/// Writes every man page and completion script under `out`; returns their paths.
fn generate(out: &Path, date: &str) -> std::io::Result<Vec<PathBuf>> {
    let man_dir = out.join("man");
    let completion_dir = out.join("completions");
    fs::create_dir_all(&man_dir)?;
    fs::create_dir_all(&completion_dir)?;
    let mut written = Vec::new();
    for (name, page) in man_pages(date)? {
        let path = man_dir.join(name);
        fs::write(&path, page)?;
        written.push(path);
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut command = Cli::command();
        written.push(clap_complete::generate_to(
            shell,
            &mut command,
            BIN_NAME,
            &completion_dir,
        )?);
    }
    Ok(written)
}

/// The command the pages describe: built (subcommands named `vhost-user-wddm-gpu-<name>`), no
/// `help` subcommand (it has no page of its own).
fn built_command() -> clap::Command {
    let mut command = Cli::command().disable_help_subcommand(true);
    command.build();
    command
}

/// Every man page, file name and text: the backend's, then one a subcommand.
fn man_pages(date: &str) -> std::io::Result<Vec<(String, Vec<u8>)>> {
    let command = built_command();
    let subcommands: Vec<clap::Command> = command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set())
        .cloned()
        .collect();
    let sub_pages: Vec<String> = subcommands
        .iter()
        .map(|sub| sub.get_display_name().unwrap_or(sub.get_name()).to_owned())
        .collect();
    let mut pages = vec![page(command, date, &sub_pages, true)?];
    for sub in subcommands {
        pages.push(page(sub, date, &[BIN_NAME.to_owned()], false)?);
    }
    pages.push((
        format!("{WRAPPER_NAME}.1"),
        wrapper_page(date).render().into_bytes(),
    ));
    Ok(pages)
}

/// The libvirt wrapper the package installs beside the backend
/// (qemu-configs/windows/libvirt/vhost-user-wddm-gpu-libvirt, its paths made the package's).
const WRAPPER_NAME: &str = "vhost-user-wddm-gpu-libvirt";

/// The wrapper's page: a shell script, so written here rather than generated from clap.
fn wrapper_page(date: &str) -> Roff {
    let base = "/dev/shm/vhost-user-wddm-gpu-libvirt";
    let mut roff = Roff::new();
    roff.control(
        "TH",
        [
            WRAPPER_NAME,
            "1",
            date,
            &format!("{BIN_NAME} {}", env!("CARGO_PKG_VERSION")),
            "User Commands",
        ],
    );
    roff.control("SH", ["NAME"]);
    roff.text([roman(format!(
        "{WRAPPER_NAME} - the GPU backend as libvirt starts it, with the VRAM file a domain's \
         <shmem> maps"
    ))]);
    roff.control("SH", ["SYNOPSIS"]);
    roff.text([bold(WRAPPER_NAME), roman(" --fd=N")]);
    roff.control("br", []);
    roff.text([bold(WRAPPER_NAME), roman(" --print-capabilities")]);
    roff.control("SH", ["DESCRIPTION"]);
    roff.text([roman(format!(
        "libvirt starts a vhost-user GPU backend for <video><driver name='vhostuser'/> from the \
         first description of type gpu in /etc/qemu/vhost-user/ and /usr/share/qemu/vhost-user/ \
         (in file-name order) whose binary answers --print-capabilities, and passes it only the \
         socket it hands over (--fd=N). The VRAM file the domain's ivshmem-plain function maps \
         (<shmem name='vhost-user-wddm-gpu-libvirt'>, that is {base}.vram) must be the backend's, \
         so this wrapper runs {BIN_NAME} with --vram-path {base}.vram, --vram-size 256MiB, \
         --bar-mode ivshmem, the stats and control sockets {base}.stats and {base}.ctl, and the \
         arguments libvirt gave. libvirt sends a backend's output nowhere: the wrapper appends \
         it to {base}.log (RUST_LOG=info unless set). With --print-capabilities it runs the \
         backend with the arguments as given."
    ))]);
    roff.control("PP", []);
    roff.text([roman(
        "One domain at a time: the file names are fixed. The package's \
         10-vhost-user-wddm-gpu-libvirt.json in /usr/share/qemu/vhost-user/ names this wrapper and \
         sorts before 10-vhost-user-wddm-gpu.json (the backend itself), so libvirt takes the \
         wrapper; an empty file of that name in /etc/qemu/vhost-user/ masks it.",
    )]);
    roff.control("SH", ["FILES"]);
    for (file, what) in [
        (format!("{base}.vram"), "the VRAM file (256 MiB)"),
        (format!("{base}.log"), "the backend's log"),
        (
            format!("{base}.stats"),
            "the stats socket (vhost-user-wddm-gpu stats)",
        ),
        (
            format!("{base}.ctl"),
            "the control socket (vhost-user-wddm-gpu ctl)",
        ),
    ] {
        roff.control("TP", []);
        roff.text([bold(file)]);
        roff.text([roman(what)]);
    }
    roff.control("SH", ["EXIT STATUS"]);
    roff.text([roman(format!("The backend's: see {BIN_NAME}(1)."))]);
    roff.control("SH", ["SEE ALSO"]);
    roff.text([roman(format!(
        "{BIN_NAME}(1), libvirtd(8). The libvirt guide is \
         /usr/share/doc/vhost-user-wddm-gpu/docs/libvirt.md."
    ))]);
    roff
}

/// One page: clap_mangen's sections, then EXIT STATUS (and SIGNALS on the backend's), SEE ALSO
/// naming `related` pages, and the version.
fn page(
    command: clap::Command,
    date: &str,
    related: &[String],
    backend: bool,
) -> std::io::Result<(String, Vec<u8>)> {
    let man = Man::new(command.clone())
        .date(date)
        .source(format!("{BIN_NAME} {}", env!("CARGO_PKG_VERSION")))
        .manual("User Commands");
    let mut text = Vec::new();
    man.render_title(&mut text)?;
    man.render_name_section(&mut text)?;
    man.render_synopsis_section(&mut text)?;
    man.render_description_section(&mut text)?;
    if command.get_arguments().any(|arg| !arg.is_hide_set()) {
        man.render_options_section(&mut text)?;
    }
    if command.has_subcommands() {
        man.render_subcommands_section(&mut text)?;
    }
    text.write_all(extra_sections(related, backend).render().as_bytes())?;
    Ok((man.get_filename(), text))
}

/// EXIT STATUS, SIGNALS (the backend's page) and SEE ALSO.
fn extra_sections(related: &[String], backend: bool) -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for (code, meaning) in EXIT_CODES {
        roff.control("TP", []);
        roff.text([bold(code)]);
        roff.text([roman(meaning)]);
    }
    if backend {
        roff.control("SH", ["SIGNALS"]);
        roff.text([roman(
            "SIGTERM and SIGINT end the session in order (exit status 0); a second one while \
             stopping ends the process at once (exit status 128 + the signal). SIGHUP is logged \
             and ignored: the backend has no configuration to reload.",
        )]);
        roff.control("SH", ["ENVIRONMENT"]);
        roff.control("TP", []);
        roff.text([bold("RUST_LOG")]);
        roff.text([roman(
            "Log verbosity (env_logger syntax), info by default. The log goes to standard error.",
        )]);
    }
    roff.control("SH", ["SEE ALSO"]);
    let mut see_also: Vec<String> = related.iter().map(|name| format!("{name}(1)")).collect();
    see_also.push("qemu-system-x86_64(1)".to_owned());
    roff.text([roman(format!(
        "{}. The guides (launching, layouts, libvirt, record and replay, fault injection) are \
         in /usr/share/doc/vhost-user-wddm-gpu/ when installed from the package.",
        see_also.join(", ")
    ))]);
    roff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_names_every_exit_code_and_each_subcommand_has_one() {
        let pages = man_pages("2026-01-01").unwrap();
        let names: Vec<&str> = pages.iter().map(|(name, _)| name.as_str()).collect();
        for expected in [
            "vhost-user-wddm-gpu.1",
            "vhost-user-wddm-gpu-stats.1",
            "vhost-user-wddm-gpu-ctl.1",
            "vhost-user-wddm-gpu-check-layout.1",
            "vhost-user-wddm-gpu-replay.1",
            "vhost-user-wddm-gpu-decode.1",
            "vhost-user-wddm-gpu-encode.1",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        assert!(!names.iter().any(|name| name.contains("help")), "{names:?}");
        for (name, text) in pages.iter().filter(|(name, _)| !name.contains("libvirt")) {
            let text = String::from_utf8_lossy(text);
            assert!(text.contains(".SH \"EXIT STATUS\""), "{name}");
            for (code, _) in EXIT_CODES {
                assert!(text.contains(&format!("\\fB{code}\\fR")), "{name}: {code}");
            }
        }
        let backend = String::from_utf8_lossy(&pages[0].1);
        assert!(backend.contains("SIGHUP"), "{backend}");
        assert!(
            backend.contains("vhost\\-user\\-wddm\\-gpu\\-stats(1)"),
            "{backend}"
        );
    }
}
