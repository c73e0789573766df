//! `suite` and `paging`: named tests, each printing `GUEST-TEST <name> PASS` or `GUEST-TEST
//! <name> FAIL <reason>`, then `GUEST-SUMMARY <passed> passed, <failed> failed`. After every
//! test the DMA pages are rechecked: a moved page fails the test that was running. `paging` runs
//! the setup tests, the paging tests and the final check; `suite` runs everything, the paging
//! tests after the hostile ones; `gpuva` runs the setup tests, the GPU virtual addressing tests
//! and the final check.

use crate::cli::Options;
use crate::engine::Engine;
use crate::failure::{Failure, Outcome};
use crate::report;
use crate::scenario::{bar, gpuva, hostile, paging, segments, setup, valid};

/// Which tests a command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// `suite`: every test.
    All,
    /// `paging`: the paging tests (with the setup tests and the final check).
    Paging,
    /// `gpuva`: the GPU virtual addressing tests (layouts with `[gpummu]`).
    Gpuva,
}

/// Tests that prepare the engine; they always run.
const SETUP_TESTS: [&str; 3] = ["device_init", "capset_layout", "cpu_translated_matches_bar"];
/// The last test.
const FINAL_TEST: &str = "dma_addresses_stable";

/// Every test name, in run order.
pub fn all_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = SETUP_TESTS.to_vec();
    names.extend(valid::TESTS.iter().map(|(name, _)| *name));
    names.extend(segments::TESTS.iter().map(|(name, _)| *name));
    names.extend(bar::TESTS.iter().map(|(name, _)| *name));
    names.extend(hostile::names());
    names.extend(paging::names());
    names.push(FINAL_TEST);
    names
}

/// The test names of `group`, in run order.
pub fn group_names(group: Group) -> Vec<&'static str> {
    match group {
        Group::All => all_names(),
        Group::Paging => {
            let mut names: Vec<&str> = SETUP_TESTS.to_vec();
            names.extend(paging::names());
            names.push(FINAL_TEST);
            names
        }
        Group::Gpuva => {
            let mut names: Vec<&str> = SETUP_TESTS.to_vec();
            names.extend(gpuva::names());
            names.push(FINAL_TEST);
            names
        }
    }
}

/// Counts test results as they are printed.
#[derive(Default)]
pub(crate) struct Tally {
    /// Tests passed.
    pub(crate) passed: u32,
    /// Tests failed.
    pub(crate) failed: u32,
}

impl Tally {
    /// Prints `GUEST-TEST <name> PASS` or `... FAIL <why>` and counts it.
    pub(crate) fn report(&mut self, name: &str, outcome: &Outcome) {
        match outcome {
            Ok(()) => {
                self.passed += 1;
                println!("GUEST-TEST {name} PASS");
            }
            Err(why) => {
                self.failed += 1;
                println!("GUEST-TEST {name} FAIL {why}");
            }
        }
    }

    /// Prints `GUEST-SUMMARY <passed> passed, <failed> failed`; true iff nothing failed.
    pub(crate) fn summary(&self) -> bool {
        println!(
            "GUEST-SUMMARY {} passed, {} failed",
            self.passed, self.failed
        );
        self.failed == 0
    }
}

/// Runs the group (or its `only` tests plus setup); true iff nothing failed. Unknown names are
/// refused before anything runs.
pub fn run(group: Group, only: &[String], options: &Options) -> Result<bool, String> {
    let seed = options.seed;
    let names = group_names(group);
    if let Some(unknown) = only.iter().find(|n| !names.contains(&n.as_str())) {
        return Err(format!(
            "unknown test {unknown:?}; tests: {}",
            names.join(" ")
        ));
    }
    let selected: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| {
            only.is_empty()
                || SETUP_TESTS.contains(n)
                || n == &FINAL_TEST
                || only.iter().any(|o| o == n)
        })
        .collect();
    println!("SEED {seed:#x}");
    let mut tally = Tally::default();
    match prepare(&mut tally, options) {
        Ok(mut engine) => run_tests(&mut tally, &mut engine, &selected),
        Err(why) => {
            let skipped = Failure(format!("not run: {why}"));
            for name in selected
                .iter()
                .skip(tally.passed as usize + tally.failed as usize)
            {
                tally.report(name, &Err(skipped.clone()));
            }
        }
    }
    Ok(tally.summary())
}

/// The setup tests; returns the engine when they all passed.
fn prepare(tally: &mut Tally, options: &Options) -> Outcome<Engine> {
    let (arena, device) = setup::arena_and_device(options);
    tally.report(
        "device_init",
        &device.as_ref().map(|_| ()).map_err(Clone::clone),
    );
    let (arena, mut device) = (arena?, device?);

    let layout = setup::layout(&mut device);
    if let Ok(layout) = &layout {
        print!("{}", report::layout_text(layout));
    }
    tally.report(
        "capset_layout",
        &layout.as_ref().map(|_| ()).map_err(Clone::clone),
    );
    let layout = layout?;

    let vram = setup::vram(&device, &layout);
    let matches = vram
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|vram| setup::cpu_translated_matches_bar(&layout, vram).map(|_| ()));
    tally.report("cpu_translated_matches_bar", &matches);
    Engine::new(arena, device, layout, vram?, options.seed)
}

fn run_tests(tally: &mut Tally, engine: &mut Engine, selected: &[&str]) {
    let mut paging_ctx = None;
    let mut gpuva_ctx = None;
    for name in selected.iter().filter(|n| !SETUP_TESTS.contains(n)) {
        let outcome = if *name == FINAL_TEST {
            Ok(())
        } else if let Some((_, test)) = valid::TESTS
            .iter()
            .chain(segments::TESTS.iter())
            .chain(bar::TESTS.iter())
            .find(|(n, _)| n == name)
        {
            test(engine)
        } else if let Some(outcome) = paging::run(name, engine, &mut paging_ctx) {
            outcome
        } else if let Some(outcome) = gpuva::run(name, engine, &mut gpuva_ctx) {
            outcome
        } else {
            hostile::run(name, engine).unwrap_or_else(|| Err(Failure(format!("no test {name}"))))
        };
        // A page that moved makes every DMA since then suspect, so it fails this test.
        let outcome = outcome.and_then(|()| engine.arena.recheck().map_err(Failure::from));
        tally.report(name, &outcome);
    }
}
