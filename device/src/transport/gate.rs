//! The answer gate: holds the answers completed while the frontend has the rings stopped, and
//! sends them, in the order they were completed, when the rings run again. Every answer passes
//! through it; sending under its lock keeps that order when held answers are released.

use std::sync::Mutex;

use crate::support::sync::lock;

/// An answer the gate lets through or holds: written to its ring by [`Deliver::deliver`].
pub trait Deliver {
    /// Writes `response` and completes the request (the gate is open).
    fn deliver(self, response: &[u8]);
}

/// Lets answers through, or holds them while closed.
pub struct AnswerGate<A> {
    state: Mutex<GateState<A>>,
}

struct GateState<A> {
    closed: bool,
    held: Vec<(A, Vec<u8>)>,
}

impl<A> Default for AnswerGate<A> {
    fn default() -> Self {
        Self {
            state: Mutex::new(GateState {
                closed: false,
                held: Vec::new(),
            }),
        }
    }
}

impl<A: Deliver> AnswerGate<A> {
    /// From now on answers are held.
    pub fn close(&self) {
        lock(&self.state).closed = true;
    }

    /// Sends the held answers, then lets answers through again; returns how many were held.
    pub fn open(&self) -> usize {
        let mut state = lock(&self.state);
        state.closed = false;
        let held = std::mem::take(&mut state.held);
        let count = held.len();
        for (answer, response) in held {
            answer.deliver(&response);
        }
        count
    }

    /// Drops the held answers with their rings and lets answers through again; returns how
    /// many were dropped.
    pub fn discard(&self) -> usize {
        let mut state = lock(&self.state);
        state.closed = false;
        std::mem::take(&mut state.held).len()
    }

    /// Lets `answer` through (delivers `response` now), or holds it while the gate is closed.
    pub fn pass(&self, answer: A, response: &[u8]) {
        let mut state = lock(&self.state);
        if state.closed {
            state.held.push((answer, response.to_vec()));
        } else {
            answer.deliver(response);
        }
    }
}
