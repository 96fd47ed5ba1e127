//! Arrival order for one connection's tool calls.
//!
//! rmcp runs every incoming request in its own tokio task, so handlers of one
//! connection run concurrently and may start in any order. The transport's
//! `receive`, though, is sequential: it hands out a [`Ticket`] to each message
//! that must keep its place (tool calls, and the roots refreshes that re-open
//! the session) synchronously, as the line is read. A handler waits for its
//! ticket's turn before it starts, and the turn passes on when the ticket is
//! dropped: after the call finished, or when rmcp discarded the message
//! without running a handler (so a dropped request never blocks the queue).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// Hands out tickets in arrival order and tracks whose turn it is.
#[derive(Debug)]
pub struct Sequencer {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    /// The lowest ticket not yet finished: the one whose turn it is.
    serving: u64,
    /// Finished tickets above `serving` (dropped out of order).
    finished: BTreeSet<u64>,
    /// Handlers waiting for their turn, by ticket. Only the one whose turn
    /// comes is woken (with many calls in flight, waking every waiter at each
    /// turn would cost more than the calls).
    waiting: HashMap<u64, oneshot::Sender<()>>,
}

impl Sequencer {
    pub fn new() -> Arc<Sequencer> {
        Arc::new(Sequencer { state: Mutex::new(State::default()) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next ticket; call it in arrival order (from the transport's `receive`).
    pub fn issue(self: &Arc<Self>) -> Ticket {
        let mut state = self.lock();
        let number = state.next;
        state.next += 1;
        Ticket(Arc::new(Inner { number, sequencer: self.clone() }))
    }

    fn finish(&self, number: u64) {
        let mut guard = self.lock();
        let state = &mut *guard;
        state.finished.insert(number);
        while state.finished.remove(&state.serving) {
            state.serving += 1;
            let serving = state.serving;
            if let Some(waiter) = state.waiting.remove(&serving) {
                // The waiter may have gone (its call was cancelled); nothing to do then.
                let _ = waiter.send(());
            }
        }
    }
}

/// A place in the queue. Cloning shares the place; the turn passes on when
/// the last clone is dropped. (Clone only because rmcp's extensions need it.)
#[derive(Debug, Clone)]
pub struct Ticket(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    number: u64,
    sequencer: Arc<Sequencer>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.sequencer.finish(self.number);
    }
}

impl Ticket {
    /// Waits until every earlier ticket is finished (dropped).
    pub async fn turn(&self) {
        let number = self.0.number;
        loop {
            let woken = {
                let mut state = self.0.sequencer.lock();
                if state.serving >= number {
                    return;
                }
                let (send, woken) = oneshot::channel();
                state.waiting.insert(number, send);
                woken
            };
            // Woken when `serving` reaches `number`; a lost sender (another
            // wait on the same ticket replaced this one) only means look again.
            let _ = woken.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Tickets issued in order, handlers started in reverse order with random
    /// delays on a multi-thread runtime: they still run one at a time, in order.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn turns_follow_issue_order_whatever_the_start_order() {
        let sequencer = Sequencer::new();
        let tickets: Vec<Ticket> = (0..64).map(|_| sequencer.issue()).collect();
        let log = Arc::new(Mutex::new(Vec::new()));
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut handles = Vec::new();
        for (i, ticket) in tickets.into_iter().enumerate().rev() {
            let log = log.clone();
            let running = running.clone();
            handles.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros((i as u64 * 7919) % 500)).await;
                ticket.turn().await;
                assert_eq!(running.fetch_add(1, std::sync::atomic::Ordering::SeqCst), 0, "overlap");
                tokio::task::spawn_blocking(move || {
                    std::thread::sleep(Duration::from_micros(50));
                    log.lock().unwrap().push(i);
                    running.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    drop(ticket);
                })
                .await
                .unwrap();
            }));
        }
        for h in handles {
            h.await.unwrap();
        }
        let log = log.lock().unwrap().clone();
        assert_eq!(log, (0..64).collect::<Vec<_>>());
    }

    /// A ticket dropped without running (a request rmcp discarded) does not block later ones.
    #[tokio::test]
    async fn a_dropped_ticket_passes_the_turn() {
        let sequencer = Sequencer::new();
        let a = sequencer.issue();
        let b = sequencer.issue();
        let c = sequencer.issue();
        drop(b);
        let waiter = tokio::spawn(async move { c.turn().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "c ran before a finished");
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
    }
}
