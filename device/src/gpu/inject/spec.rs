//! The words of one injection, as `ctl arm` takes them and a plan file holds them (one per
//! line): an action, then `key=value` targets and flags.
//!
//! ```text
//! hang                          [node=0|1] [fence=F | nth=N | probability=P seed=S] [standing]
//! slow DURATION                 [node=0|1] ...
//! lost-interrupt                ...                       (paging node)
//! fault packet=I status=NAME    ...                       (paging node)
//! page-fault va=VA [write]      ...                       (virtual node)
//! preempt-refuse                [standing]
//! preempt-slow DURATION         [standing]
//! power-loss                    [standing]                (at SET_POWER_STATE below D0)
//! ```

use std::time::Duration;

use wddm_gpu_abi::context::{WDDM_GPU_NODE_PAGING, WDDM_GPU_NODE_VIRTUAL};
use wddm_gpu_abi::submit::SubmitStatus;

use crate::support::number::parse_u64;

/// Longest delay a `slow` or `preempt-slow` may ask for: a test wants a TDR, not a stuck VM.
pub const MAX_DELAY: Duration = Duration::from_secs(600);

/// What an injection makes the device do.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// The submission never completes until a RESET (the driver's or the frontend's); the
    /// engine does not answer a PREEMPT meanwhile (a hung engine does not preempt).
    Hang,
    /// The submission starts this much later (a PREEMPT or RESET still stops it at once).
    Slow(Duration),
    /// The submission completes and the status page says so, but its answer is held until the
    /// driver asks (QUERY_ENGINE_STATUS, RESET): an interrupt that never came.
    LostInterrupt,
    /// Packet `packet` (0 = the first of the submission) faults with `status` instead of
    /// running.
    Fault {
        /// Index of the packet in the submission.
        packet: u32,
        /// The status the fault reports.
        status: SubmitStatus,
    },
    /// The virtual node's submission takes a page fault at GPU VA `address` at its first
    /// packet, as if that address did not translate (`NOT_PRESENT` at the leaf level): the
    /// node stops until RESET_ENGINE, as for a real page fault.
    PageFault {
        /// The faulting GPU VA.
        address: u64,
        /// A write access (a read otherwise).
        write: bool,
    },
    /// A PREEMPT stops nothing: the answer says nothing was preempted.
    RefusePreempt,
    /// A PREEMPT takes effect at once, but its answer comes this much later.
    SlowPreempt(Duration),
    /// The next power-down (SET_POWER_STATE below D0) loses the contents of every memory
    /// segment its power action does not preserve (`PreservedDuringStandby` for sleep,
    /// `PreservedDuringHibernate` for hibernation, none for shutdown), as hardware does.
    PowerLoss,
}

/// What an action fires on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Occasion {
    /// A node's submission, as it is taken.
    Submission,
    /// A PREEMPT.
    Preempt,
    /// A power-down (SET_POWER_STATE below D0).
    PowerDown,
}

impl Occasion {
    /// Its name in listings.
    pub fn name(self) -> &'static str {
        match self {
            Occasion::Submission => "submission",
            Occasion::Preempt => "preempt",
            Occasion::PowerDown => "power-down",
        }
    }

    /// The command it is, for messages.
    pub fn command(self) -> &'static str {
        match self {
            Occasion::Submission => "SUBMIT or SUBMIT_VIRTUAL",
            Occasion::Preempt => "PREEMPT",
            Occasion::PowerDown => "SET_POWER_STATE",
        }
    }
}

impl Action {
    /// What it fires on.
    pub fn occasion(self) -> Occasion {
        match self {
            Action::RefusePreempt | Action::SlowPreempt(_) => Occasion::Preempt,
            Action::PowerLoss => Occasion::PowerDown,
            _ => Occasion::Submission,
        }
    }

    /// The action's name, as the plan spells it (and the statistics count it).
    pub fn name(self) -> &'static str {
        match self {
            Action::Hang => "hang",
            Action::Slow(_) => "slow",
            Action::LostInterrupt => "lost-interrupt",
            Action::Fault { .. } => "fault",
            Action::PageFault { .. } => "page-fault",
            Action::RefusePreempt => "preempt-refuse",
            Action::SlowPreempt(_) => "preempt-slow",
            Action::PowerLoss => "power-loss",
        }
    }

    /// Every action name, in the order the statistics list them.
    pub const NAMES: [&'static str; 8] = [
        "hang",
        "slow",
        "lost-interrupt",
        "fault",
        "page-fault",
        "preempt-refuse",
        "preempt-slow",
        "power-loss",
    ];
}

/// Which submissions (or PREEMPTs) an injection fires on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Trigger {
    /// The next one.
    Next,
    /// The submission with this `submission_fence_id`.
    Fence(u32),
    /// The Nth one counted from when it was armed (1 is the next).
    Nth(u64),
    /// Each with this probability, from a generator seeded with `seed` (the same seed, the
    /// same choices for the same sequence).
    Random {
        /// In (0, 1].
        probability: f64,
        /// The generator's seed.
        seed: u64,
    },
}

/// One injection, parsed and checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    /// What it does.
    pub action: Action,
    /// The node whose submissions it fires on (the paging node's 0 for the actions of a
    /// device command, PREEMPT or SET_POWER_STATE, which take no `node=`).
    pub node: u32,
    /// When it fires.
    pub trigger: Trigger,
    /// Stays armed after firing (a one-shot is disarmed by its first firing).
    pub standing: bool,
}

/// Why a spec was refused; each names the word and the rule.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum SpecError {
    /// Nothing given.
    #[error("empty injection (one of: hang, slow DURATION, lost-interrupt, fault packet=I status=NAME, preempt-refuse, preempt-slow DURATION)")]
    Empty,
    /// Not an action.
    #[error("unknown action {0:?} (one of: hang, slow, lost-interrupt, fault, page-fault, preempt-refuse, preempt-slow, power-loss)")]
    UnknownAction(String),
    /// `slow` or `preempt-slow` without its duration.
    #[error("{0} needs a duration (such as 50ms or 2s) right after it")]
    MissingDuration(&'static str),
    /// A duration that does not parse or is too long.
    #[error("duration {given:?}: {why}")]
    Duration {
        /// The word.
        given: String,
        /// The rule.
        why: String,
    },
    /// A word that is not `key=value` or `standing`.
    #[error("{0:?} is not key=value or standing (or write, for page-fault)")]
    NotKeyValue(String),
    /// A key this action does not take.
    #[error("{action} does not take {key}=")]
    UnknownKey {
        /// The action.
        action: &'static str,
        /// The key.
        key: String,
    },
    /// A key given twice.
    #[error("{0}= given twice")]
    Repeated(String),
    /// A value that does not parse.
    #[error("{key}={value}: {why}")]
    Value {
        /// The key.
        key: &'static str,
        /// The value.
        value: String,
        /// The rule.
        why: &'static str,
    },
    /// Two targets at once.
    #[error("give at most one of fence=, nth= and probability=")]
    TwoTriggers,
    /// `probability=` without `seed=`, or the other way round.
    #[error("probability= and seed= go together (a random trigger is always seeded, so a run can be repeated)")]
    Unseeded,
    /// `fault` without its packet or status.
    #[error("fault needs packet=I and status=NAME")]
    FaultIncomplete,
    /// A node the action does not apply to.
    #[error("{action} node={node}: {why}")]
    Node {
        /// The action.
        action: &'static str,
        /// The node given.
        node: u32,
        /// Which nodes it applies to.
        why: &'static str,
    },
    /// `page-fault` without its address.
    #[error("page-fault needs va=ADDRESS (decimal or 0x hex)")]
    PageFaultIncomplete,
    /// `node=` on an action that fires on a command of the whole device.
    #[error("{0} takes no node=: it fires on {1}, a command of the device, not of a node")]
    NodeNotTaken(&'static str, &'static str),
}

/// Statuses a `fault` may report: the ones a packet's fault reports (not OK, not the
/// interruptions, not the virtual node's).
fn fault_status(name: &str) -> Option<SubmitStatus> {
    let status = SubmitStatus::ALL
        .iter()
        .copied()
        .find(|status| status.name() == name.replace('-', "_"))?;
    let injectable = !matches!(
        status,
        SubmitStatus::Ok
            | SubmitStatus::Preempted
            | SubmitStatus::Reset
            | SubmitStatus::PageFault
            | SubmitStatus::NodeFaulted
            | SubmitStatus::BadContext
    );
    injectable.then_some(status)
}

fn duration(action: &'static str, word: Option<&str>) -> Result<Duration, SpecError> {
    let word = word.ok_or(SpecError::MissingDuration(action))?;
    let parsed = humantime::parse_duration(word).map_err(|error| SpecError::Duration {
        given: word.to_string(),
        why: error.to_string(),
    })?;
    if parsed > MAX_DELAY {
        return Err(SpecError::Duration {
            given: word.to_string(),
            why: format!("longer than the {} s limit", MAX_DELAY.as_secs()),
        });
    }
    Ok(parsed)
}

fn number<T: std::str::FromStr>(key: &'static str, value: &str) -> Result<T, SpecError> {
    value.parse().map_err(|_| SpecError::Value {
        key,
        value: value.to_string(),
        why: "not a number",
    })
}

/// The `key=value` words after an action, each at most once.
#[derive(Default)]
struct Keys<'a> {
    pairs: Vec<(&'a str, &'a str)>,
    standing: bool,
    /// `write` (page-fault).
    write: bool,
}

impl<'a> Keys<'a> {
    fn parse(words: impl Iterator<Item = &'a str>) -> Result<Self, SpecError> {
        let mut keys = Keys::default();
        for word in words {
            if word == "standing" {
                keys.standing = true;
                continue;
            }
            if word == "write" {
                keys.write = true;
                continue;
            }
            let (key, value) = word
                .split_once('=')
                .ok_or_else(|| SpecError::NotKeyValue(word.to_string()))?;
            if keys.pairs.iter().any(|(seen, _)| *seen == key) {
                return Err(SpecError::Repeated(key.to_string()));
            }
            keys.pairs.push((key, value));
        }
        Ok(keys)
    }

    /// Takes `key`'s value, if given.
    fn take(&mut self, key: &str) -> Option<&'a str> {
        let at = self.pairs.iter().position(|(seen, _)| *seen == key)?;
        Some(self.pairs.remove(at).1)
    }
}

impl std::str::FromStr for Spec {
    type Err = SpecError;

    fn from_str(text: &str) -> Result<Self, SpecError> {
        let mut words = text.split_whitespace();
        let name = words.next().ok_or(SpecError::Empty)?;
        let mut action = match name {
            "hang" => Action::Hang,
            "slow" => Action::Slow(duration("slow", words.next())?),
            "lost-interrupt" => Action::LostInterrupt,
            "fault" => Action::Fault {
                packet: 0,
                status: SubmitStatus::Ok,
            },
            "page-fault" => Action::PageFault {
                address: 0,
                write: false,
            },
            "preempt-refuse" => Action::RefusePreempt,
            "preempt-slow" => Action::SlowPreempt(duration("preempt-slow", words.next())?),
            "power-loss" => Action::PowerLoss,
            other => return Err(SpecError::UnknownAction(other.to_string())),
        };
        let mut keys = Keys::parse(words)?;
        if let Action::PageFault { address, write } = &mut action {
            let va = keys.take("va").ok_or(SpecError::PageFaultIncomplete)?;
            *address = address_value("va", va)?;
            *write = keys.write;
        } else if keys.write {
            return Err(SpecError::NotKeyValue("write".to_string()));
        }
        if let Action::Fault { packet, status } = &mut action {
            let (index, name) = (keys.take("packet"), keys.take("status"));
            let (Some(index), Some(name)) = (index, name) else {
                return Err(SpecError::FaultIncomplete);
            };
            *packet = number("packet", index)?;
            *status = fault_status(name).ok_or_else(|| SpecError::Value {
                key: "status",
                value: name.to_string(),
                why: "not a packet fault status (such as bad_segment, segment_range, \
                      unmapped_aperture, frame_not_in_ram, bad_packet_header)",
            })?;
        }
        let default_node = match action {
            Action::PageFault { .. } => WDDM_GPU_NODE_VIRTUAL,
            _ => WDDM_GPU_NODE_PAGING,
        };
        let node = match keys.take("node") {
            Some(_) if action.occasion() != Occasion::Submission => {
                return Err(SpecError::NodeNotTaken(
                    action.name(),
                    action.occasion().command(),
                ))
            }
            Some(value) => number("node", value)?,
            None => default_node,
        };
        check_node(action, node)?;
        let trigger = trigger(&mut keys)?;
        if let Some((key, _)) = keys.pairs.first() {
            return Err(SpecError::UnknownKey {
                action: action.name(),
                key: key.to_string(),
            });
        }
        if action.occasion() != Occasion::Submission && !matches!(trigger, Trigger::Next) {
            return Err(SpecError::UnknownKey {
                action: action.name(),
                key: "fence, nth or probability".to_string(),
            });
        }
        Ok(Spec {
            action,
            node,
            trigger,
            standing: keys.standing,
        })
    }
}

/// Which nodes each action reaches.
fn check_node(action: Action, node: u32) -> Result<(), SpecError> {
    let refuse = |why| {
        Err(SpecError::Node {
            action: action.name(),
            node,
            why,
        })
    };
    match action {
        Action::Hang | Action::Slow(_) if node > WDDM_GPU_NODE_VIRTUAL => {
            refuse("the device has nodes 0 (paging) and 1 (virtual)")
        }
        Action::Hang | Action::Slow(_) => Ok(()),
        Action::PageFault { .. } if node != WDDM_GPU_NODE_VIRTUAL => {
            refuse("page faults are the virtual node's (1)")
        }
        Action::LostInterrupt | Action::Fault { .. } if node != WDDM_GPU_NODE_PAGING => {
            refuse("injected on the paging node (0) only")
        }
        // PREEMPT and power actions never get a node= (refused before).
        _ => Ok(()),
    }
}

/// An address in decimal or with a `0x` prefix.
fn address_value(key: &'static str, value: &str) -> Result<u64, SpecError> {
    parse_u64(value).ok_or_else(|| SpecError::Value {
        key,
        value: value.to_string(),
        why: "not an address (decimal or 0x hex)",
    })
}

fn trigger(keys: &mut Keys<'_>) -> Result<Trigger, SpecError> {
    let fence = keys.take("fence");
    let nth = keys.take("nth");
    let probability = keys.take("probability");
    let seed = keys.take("seed");
    let given = [fence.is_some(), nth.is_some(), probability.is_some()];
    if given.iter().filter(|&&given| given).count() > 1 {
        return Err(SpecError::TwoTriggers);
    }
    if probability.is_some() != seed.is_some() {
        return Err(SpecError::Unseeded);
    }
    if let Some(fence) = fence {
        return Ok(Trigger::Fence(number("fence", fence)?));
    }
    if let Some(nth) = nth {
        let nth: u64 = number("nth", nth)?;
        if nth == 0 {
            return Err(SpecError::Value {
                key: "nth",
                value: "0".to_string(),
                why: "counts from 1 (the next submission)",
            });
        }
        return Ok(Trigger::Nth(nth));
    }
    if let (Some(probability), Some(seed)) = (probability, seed) {
        let value: f64 = number("probability", probability)?;
        if !(value > 0.0 && value <= 1.0) {
            return Err(SpecError::Value {
                key: "probability",
                value: probability.to_string(),
                why: "must be in (0, 1]",
            });
        }
        return Ok(Trigger::Random {
            probability: value,
            seed: number("seed", seed)?,
        });
    }
    Ok(Trigger::Next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> Spec {
        text.parse()
            .unwrap_or_else(|error| panic!("{text}: {error}"))
    }

    fn refused(text: &str) -> SpecError {
        text.parse::<Spec>().expect_err(text)
    }

    #[test]
    fn each_action_parses_with_its_targets() {
        assert_eq!(
            spec("hang fence=12"),
            Spec {
                action: Action::Hang,
                node: 0,
                trigger: Trigger::Fence(12),
                standing: false,
            }
        );
        assert_eq!(
            spec("slow 50ms nth=3 standing").action,
            Action::Slow(Duration::from_millis(50))
        );
        assert!(spec("slow 2s standing").standing);
        assert_eq!(spec("lost-interrupt").trigger, Trigger::Next);
        assert_eq!(
            spec("fault packet=2 status=bad-segment fence=9").action,
            Action::Fault {
                packet: 2,
                status: SubmitStatus::BadSegment
            }
        );
        assert_eq!(
            spec("lost-interrupt probability=0.25 seed=7 standing").trigger,
            Trigger::Random {
                probability: 0.25,
                seed: 7
            }
        );
        assert_eq!(spec("preempt-refuse").action, Action::RefusePreempt);
        assert!(spec("power-loss standing").standing);
        assert!(matches!(
            refused("power-loss fence=2"),
            SpecError::UnknownKey { .. }
        ));
        let fault = spec("page-fault va=0x1234000 write fence=3");
        assert_eq!(
            (fault.action, fault.node, fault.trigger),
            (
                Action::PageFault {
                    address: 0x123_4000,
                    write: true
                },
                1,
                Trigger::Fence(3)
            )
        );
        assert_eq!(spec("hang node=1").node, 1);
        assert_eq!(
            spec("preempt-slow 300ms").action,
            Action::SlowPreempt(Duration::from_millis(300))
        );
    }

    #[test]
    fn bad_specs_name_the_word_and_the_rule() {
        assert_eq!(refused(""), SpecError::Empty);
        assert!(matches!(refused("explode"), SpecError::UnknownAction(_)));
        assert_eq!(refused("slow"), SpecError::MissingDuration("slow"));
        assert!(matches!(refused("slow soon"), SpecError::Duration { .. }));
        assert!(matches!(refused("slow 1h"), SpecError::Duration { .. }));
        assert!(matches!(refused("hang 12"), SpecError::NotKeyValue(_)));
        assert_eq!(
            refused("hang fence=1 fence=2"),
            SpecError::Repeated("fence".into())
        );
        assert_eq!(refused("hang fence=1 nth=2"), SpecError::TwoTriggers);
        assert_eq!(refused("hang probability=0.5"), SpecError::Unseeded);
        assert!(matches!(
            refused("hang probability=1.5 seed=1"),
            SpecError::Value {
                key: "probability",
                ..
            }
        ));
        assert!(matches!(
            refused("hang nth=0"),
            SpecError::Value { key: "nth", .. }
        ));
        assert!(matches!(
            refused("hang fence=-1"),
            SpecError::Value { key: "fence", .. }
        ));
        assert_eq!(refused("fault packet=1"), SpecError::FaultIncomplete);
        assert!(matches!(
            refused("fault packet=1 status=ok"),
            SpecError::Value { key: "status", .. }
        ));
        assert!(matches!(
            refused("fault packet=1 status=reset"),
            SpecError::Value { key: "status", .. }
        ));
        assert!(matches!(
            refused("hang colour=red"),
            SpecError::UnknownKey { .. }
        ));
        assert!(matches!(
            refused("preempt-refuse fence=3"),
            SpecError::UnknownKey { .. }
        ));
        assert!(matches!(
            refused("hang node=2"),
            SpecError::Node { node: 2, .. }
        ));
        assert!(matches!(
            refused("lost-interrupt node=1"),
            SpecError::Node { .. }
        ));
        assert!(matches!(
            refused("page-fault va=0x1000 node=0"),
            SpecError::Node { .. }
        ));
        assert!(matches!(
            refused("preempt-refuse node=1"),
            SpecError::NodeNotTaken("preempt-refuse", "PREEMPT")
        ));
        assert_eq!(refused("page-fault"), SpecError::PageFaultIncomplete);
        assert!(matches!(
            refused("page-fault va=zz"),
            SpecError::Value { key: "va", .. }
        ));
        assert!(matches!(refused("hang write"), SpecError::NotKeyValue(_)));
    }

    #[test]
    fn the_device_commands_actions_take_no_node_not_even_0() {
        for (text, action, command) in [
            ("preempt-refuse node=0", "preempt-refuse", "PREEMPT"),
            ("preempt-slow 1s node=0", "preempt-slow", "PREEMPT"),
            ("power-loss node=0", "power-loss", "SET_POWER_STATE"),
            ("preempt-refuse node=x", "preempt-refuse", "PREEMPT"),
        ] {
            let error = refused(text);
            assert_eq!(error, SpecError::NodeNotTaken(action, command), "{text}");
            assert_eq!(
                error.to_string(),
                format!("{action} takes no node=: it fires on {command}, a command of the device, not of a node")
            );
        }
        assert_eq!(spec("preempt-refuse").node, WDDM_GPU_NODE_PAGING);
    }

    #[test]
    fn every_action_name_is_listed_once() {
        let actions = [
            Action::Hang,
            Action::Slow(Duration::ZERO),
            Action::LostInterrupt,
            Action::Fault {
                packet: 0,
                status: SubmitStatus::BadSegment,
            },
            Action::PageFault {
                address: 0,
                write: false,
            },
            Action::RefusePreempt,
            Action::SlowPreempt(Duration::ZERO),
            Action::PowerLoss,
        ];
        let names: Vec<_> = actions.iter().map(|action| action.name()).collect();
        assert_eq!(names, Action::NAMES);
    }
}
