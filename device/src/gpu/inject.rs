//! Fault injection: the device misbehaving when told, in a chosen and repeatable way, so a
//! KMD's TDR and recovery paths run on demand. Injections are armed from the owner-only
//! control socket or a plan file given at start (one [`spec::Spec`] each), never by the guest;
//! the scheduler asks [`Injector::on_submission`] as each paging submission is taken and
//! [`Injector::on_preempt`] at each PREEMPT. Every firing is logged, counted in the statistics,
//! marked on the trace timeline and kept (the latest [`FIRED_KEPT`]) for `ctl fired`.
//!
//! With nothing armed a submission pays one relaxed atomic load.

pub mod spec;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use log::info;
use serde::Serialize;

use self::spec::{Action, Occasion, Spec, SpecError, Trigger};
use crate::observe::stats::Stats;
use crate::observe::trace::{Mark, MarkSource, Trace};
use crate::support::sync::lock;

/// Firings kept for `ctl fired`; older ones are counted only.
pub const FIRED_KEPT: usize = 256;

/// Injections armed at once, at most (a plan is a test's script, not a log).
pub const MAX_ARMED: usize = 64;

/// One armed injection.
struct Armed {
    id: u32,
    spec: Spec,
    /// The words it was armed with, for listings.
    text: String,
    /// Submissions (or PREEMPTs) it has seen since it was armed.
    seen: u64,
    fired: u64,
    /// The seeded generator of a random trigger.
    random: Option<fastrand::Rng>,
}

impl Armed {
    /// Whether it fires on this submission (counted as seen) with this fence.
    fn fires(&mut self, fence: Option<u32>) -> bool {
        self.seen += 1;
        match self.spec.trigger {
            Trigger::Next => true,
            Trigger::Fence(wanted) => fence == Some(wanted),
            Trigger::Nth(nth) => self.seen == nth,
            Trigger::Random { probability, .. } => self
                .random
                .as_mut()
                .is_some_and(|random| random.f64() < probability),
        }
    }
}

/// An injection as `ctl list` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ArmedView {
    /// Its id (for `ctl disarm`).
    pub id: u32,
    /// The words it was armed with.
    pub spec: String,
    /// Submissions or PREEMPTs it has seen.
    pub seen: u64,
    /// Times it fired.
    pub fired: u64,
}

/// One firing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fired {
    /// The injection's id.
    pub id: u32,
    /// Its action's name.
    pub action: &'static str,
    /// The words it was armed with.
    pub spec: String,
    /// The submission it fired on (none for a PREEMPT or a power-down).
    pub fence: Option<u32>,
    /// What it fired on: `submission`, `preempt` or `power-down`.
    pub occasion: &'static str,
    /// Milliseconds since the backend started.
    pub at_ms: u64,
}

/// What `ctl list` and `ctl fired` report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Listing {
    /// Armed now, in arming order.
    pub armed: Vec<ArmedView>,
    /// The latest firings, oldest first.
    pub fired: Vec<Fired>,
    /// Firings in all.
    pub fired_total: u64,
}

struct State {
    next_id: u32,
    armed: Vec<Armed>,
    fired: VecDeque<Fired>,
    fired_total: u64,
}

/// The device's injections.
pub struct Injector {
    /// Armed injections: 0 spares the submission path the lock.
    armed: AtomicUsize,
    state: Mutex<State>,
    started: Instant,
    stats: Arc<Stats>,
    trace: Option<Arc<Trace>>,
}

/// Why an injection was not armed.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ArmError {
    /// The words do not make an injection.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// [`MAX_ARMED`] are armed already.
    #[error("{MAX_ARMED} injections are armed already (disarm some first)")]
    Full,
}

/// The log line of a firing (docs/fault-injection.md shows it): on a submission, its node and
/// fence (`on_submission` gives both).
fn firing_line(id: u32, occasion: Occasion, submission: Option<(u32, u32)>, text: &str) -> String {
    match (occasion, submission) {
        (Occasion::Submission, Some((node, fence))) => {
            format!("injection {id} fired on node {node} submission fence {fence}: {text}")
        }
        (Occasion::PowerDown, _) => format!("injection {id} fired on a power-down: {text}"),
        _ => format!("injection {id} fired on a PREEMPT: {text}"),
    }
}

impl Injector {
    /// Nothing armed; firings count into `stats` and are marked on `trace`.
    pub fn new(stats: Arc<Stats>, trace: Option<Arc<Trace>>) -> Self {
        Self {
            armed: AtomicUsize::new(0),
            state: Mutex::new(State {
                next_id: 1,
                armed: Vec::new(),
                fired: VecDeque::new(),
                fired_total: 0,
            }),
            started: Instant::now(),
            stats,
            trace,
        }
    }

    /// Arms the injection `text` says; returns its id.
    pub fn arm(&self, text: &str) -> Result<u32, ArmError> {
        let spec: Spec = text.parse()?;
        let mut state = lock(&self.state);
        if state.armed.len() >= MAX_ARMED {
            return Err(ArmError::Full);
        }
        let id = state.next_id;
        state.next_id = state.next_id.wrapping_add(1).max(1);
        let random = match spec.trigger {
            Trigger::Random { seed, .. } => Some(fastrand::Rng::with_seed(seed)),
            _ => None,
        };
        let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
        info!("injection {id} armed: {text}");
        state.armed.push(Armed {
            id,
            spec,
            text,
            seen: 0,
            fired: 0,
            random,
        });
        self.armed.store(state.armed.len(), Ordering::Release);
        Ok(id)
    }

    /// Disarms injection `id`; false when none has that id.
    pub fn disarm(&self, id: u32) -> bool {
        let mut state = lock(&self.state);
        let before = state.armed.len();
        state.armed.retain(|armed| armed.id != id);
        self.armed.store(state.armed.len(), Ordering::Release);
        state.armed.len() < before
    }

    /// Disarms everything; returns how many were armed.
    pub fn disarm_all(&self) -> usize {
        let mut state = lock(&self.state);
        let count = state.armed.len();
        state.armed.clear();
        self.armed.store(0, Ordering::Release);
        count
    }

    /// The injection a submission on `node` with this fence is taken with, if one fires.
    #[inline]
    pub fn on_submission(&self, node: u32, fence: u32) -> Option<Action> {
        if self.armed.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.fire(Occasion::Submission, Some(node), Some(fence))
    }

    /// The injection a PREEMPT is handled with, if one fires.
    pub fn on_preempt(&self) -> Option<Action> {
        if self.armed.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.fire(Occasion::Preempt, None, None)
    }

    /// The injection a power-down is handled with, if one fires.
    pub fn on_power_down(&self) -> Option<Action> {
        if self.armed.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.fire(Occasion::PowerDown, None, None)
    }

    /// Every armed injection of the occasion (of `node`'s, for submissions) sees it; the first,
    /// in arming order, that fires is the one returned. The others that would have fired only
    /// count it as seen: a one-shot among them stays armed (and a `nth=` one has passed its
    /// turn), as docs/fault-injection.md says.
    fn fire(&self, occasion: Occasion, node: Option<u32>, fence: Option<u32>) -> Option<Action> {
        let mut state = lock(&self.state);
        let mut chosen = None;
        for armed in state.armed.iter_mut() {
            let sees = armed.spec.action.occasion() == occasion
                && node.is_none_or(|node| armed.spec.node == node);
            if !sees {
                continue;
            }
            if armed.fires(fence) && chosen.is_none() {
                armed.fired += 1;
                chosen = Some((armed.id, armed.spec, armed.text.clone()));
            }
        }
        let (id, spec, text) = chosen?;
        if !spec.standing {
            state.armed.retain(|armed| armed.id != id);
            self.armed.store(state.armed.len(), Ordering::Release);
        }
        let at = self.started.elapsed();
        let action = spec.action.name();
        info!("{}", firing_line(id, occasion, node.zip(fence), &text));
        if state.fired.len() == FIRED_KEPT {
            state.fired.pop_front();
        }
        state.fired.push_back(Fired {
            id,
            action,
            spec: text,
            fence,
            occasion: occasion.name(),
            at_ms: u64::try_from(at.as_millis()).unwrap_or(u64::MAX),
        });
        state.fired_total += 1;
        drop(state);
        self.stats.injected(action);
        if let Some(trace) = &self.trace {
            trace.mark(Mark {
                at: Instant::now(),
                name: action,
                fence,
                source: MarkSource::Injection { id },
            });
        }
        Some(spec.action)
    }

    /// What is armed and what fired.
    pub fn listing(&self) -> Listing {
        let state = lock(&self.state);
        Listing {
            armed: state
                .armed
                .iter()
                .map(|armed| ArmedView {
                    id: armed.id,
                    spec: armed.text.clone(),
                    seen: armed.seen,
                    fired: armed.fired,
                })
                .collect(),
            fired: state.fired.iter().cloned().collect(),
            fired_total: state.fired_total,
        }
    }

    /// Arms every injection of a plan file's text (one per line; `#` starts a comment). The
    /// whole plan is checked first: a bad line is refused with its number, and then nothing of
    /// the plan is armed.
    pub fn arm_plan(&self, plan: &str) -> Result<Vec<u32>, PlanError> {
        let lines = check_plan(plan)?;
        let room = MAX_ARMED.saturating_sub(self.armed.load(Ordering::Acquire));
        if let Some(&(line, _)) = lines.get(room) {
            return Err(PlanError::TooMany { line });
        }
        lines
            .iter()
            .map(|&(line, text)| {
                self.arm(text).map_err(|error| match error {
                    ArmError::Spec(error) => PlanError::Line { line, error },
                    ArmError::Full => PlanError::TooMany { line },
                })
            })
            .collect()
    }
}

/// The injections of a plan file's text, each checked, as (line number, text); what
/// [`Injector::arm_plan`] arms, checked before the backend creates anything.
pub fn check_plan(plan: &str) -> Result<Vec<(usize, &str)>, PlanError> {
    let lines: Vec<(usize, &str)> = plan
        .lines()
        .enumerate()
        .map(|(index, line)| (index + 1, line.split('#').next().unwrap_or("").trim()))
        .filter(|(_, line)| !line.is_empty())
        .collect();
    for &(line, text) in &lines {
        text.parse::<Spec>()
            .map_err(|error| PlanError::Line { line, error })?;
    }
    if let Some(&(line, _)) = lines.get(MAX_ARMED) {
        return Err(PlanError::TooMany { line });
    }
    Ok(lines)
}

/// Why a plan was refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A line that is not an injection.
    #[error("line {line}: {error}")]
    Line {
        /// 1-based.
        line: usize,
        /// Why.
        error: SpecError,
    },
    /// More injections than may be armed at once.
    #[error("line {line}: more than {MAX_ARMED} injections")]
    TooMany {
        /// The first line over the limit.
        line: usize,
    },
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::layout::SegmentLayout;

    fn injector() -> Injector {
        Injector::new(
            Arc::new(Stats::new(&SegmentLayout::default_for_vram(16 << 20))),
            None,
        )
    }

    /// (id, seen, fired) of each armed injection.
    fn armed(injector: &Injector) -> Vec<(u32, u64, u64)> {
        injector
            .listing()
            .armed
            .iter()
            .map(|armed| (armed.id, armed.seen, armed.fired))
            .collect()
    }

    #[test]
    fn of_two_matching_injections_the_first_armed_acts_and_the_other_waits_its_turn() {
        let injector = injector();
        assert_eq!(injector.arm("slow 1s"), Ok(1));
        assert_eq!(injector.arm("hang"), Ok(2));
        // Both match the next submission: the first armed acts; the other saw it.
        assert_eq!(
            injector.on_submission(0, 5),
            Some(Action::Slow(Duration::from_secs(1)))
        );
        assert_eq!(armed(&injector), [(2, 1, 0)]);
        // It stays armed and takes the next one.
        assert_eq!(injector.on_submission(0, 6), Some(Action::Hang));
        assert!(armed(&injector).is_empty());
    }

    #[test]
    fn a_counted_injection_that_another_one_beat_has_passed_its_turn() {
        let injector = injector();
        injector.arm("hang nth=1").unwrap();
        injector.arm("lost-interrupt nth=1").unwrap();
        assert_eq!(injector.on_submission(0, 1), Some(Action::Hang));
        assert_eq!(injector.on_submission(0, 2), None);
        // Still listed: seen twice, never fired (disarm it).
        assert_eq!(armed(&injector), [(2, 2, 0)]);
    }

    #[test]
    fn a_standing_injection_armed_first_keeps_the_later_ones_from_acting() {
        let injector = injector();
        injector.arm("lost-interrupt standing").unwrap();
        injector.arm("hang").unwrap();
        for fence in 1..=3 {
            assert_eq!(
                injector.on_submission(0, fence),
                Some(Action::LostInterrupt)
            );
        }
        assert_eq!(armed(&injector), [(1, 3, 3), (2, 3, 0)]);
    }

    #[test]
    fn only_injections_of_the_submissions_node_see_it() {
        let injector = injector();
        injector.arm("hang node=1").unwrap();
        injector.arm("slow 5ms").unwrap();
        assert_eq!(
            injector.on_submission(0, 1),
            Some(Action::Slow(Duration::from_millis(5)))
        );
        assert_eq!(armed(&injector), [(1, 0, 0)]);
        assert_eq!(injector.on_submission(1, 1), Some(Action::Hang));
    }

    #[test]
    fn the_firing_lines_are_the_ones_the_guide_shows() {
        let guide = include_str!("../../../docs/fault-injection.md");
        for line in [
            firing_line(1, Occasion::Submission, Some((0, 7)), "hang fence=7"),
            firing_line(2, Occasion::Preempt, None, "preempt-refuse"),
            firing_line(3, Occasion::PowerDown, None, "power-loss"),
        ] {
            assert!(
                guide.contains(&format!("`{line}`")),
                "the guide lacks `{line}`"
            );
        }
    }
}
