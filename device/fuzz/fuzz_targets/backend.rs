//! The vhost-user backend in-process: a fresh `WddmGpuBackend` per input (its own VRAM file,
//! GPU and engine thread, and guest RAM in a memfd), driven by a sequence of frontend messages
//! and guest actions (`Op`, see `vhost_user_wddm_gpu_fuzz::frontend`): memory tables with and
//! without the VRAM BAR, ring set-up, stops and restarts, resets, features, and descriptor
//! chains of well-formed and malformed requests, submissions among them, kicked into the
//! backend as its vring worker would.
//!
//! Checked: no panic, no abort, no hang (libFuzzer's -timeout), and every config read answers
//! the size asked for. Dropping the backend at the end of each input joins its engine thread,
//! so work a submission left running must stop, and must release everything the input made
//! (a leak runs the process out of descriptors within seconds).
//!
//! Input: a header byte (bits 0-1: --bar-mode auto/ivshmem/shmem; bits 2-3: the layout; bit 4:
//! drop the backend as it stands instead of sending RESET_DEVICE first), then operations.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vhost_user_wddm_gpu_fuzz::debug;
use vhost_user_wddm_gpu_fuzz::frontend::{Frontend, Op, MAX_OPS};
use vhost_user_wddm_gpu_fuzz::input::Reader;

fuzz_target!(|data: &[u8]| {
    let mut input = Reader::new(data);
    let header = input.u8();
    let mut frontend = Frontend::new(header & 3, (header >> 2) & 3);
    frontend.reset_on_drop = header & 0x10 == 0;
    for _ in 0..MAX_OPS {
        if input.is_empty() || frontend.ended {
            break;
        }
        let op = Op::read(&mut input);
        frontend.run(&op);
        if debug() {
            eprintln!(
                "backend: {op:?}{}",
                if frontend.ended {
                    " (session ended)"
                } else {
                    ""
                }
            );
        }
    }
    if debug() {
        std::thread::sleep(std::time::Duration::from_millis(50));
        eprint!("{}", frontend.describe_used());
    }
    drop(frontend);
});
