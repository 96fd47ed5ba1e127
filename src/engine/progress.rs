//! A search's indexing counts turned into the steps a door reports: each further along than the
//! last (or at the same place with a new total, when a walk's end makes it known), at most one
//! every so often, a stage's last always; not how a door sends them.
//!
//! A search with a slow embedder indexes in two stages: every new file's words first
//! (`Progress::words_only`), then the round that embeds. Each stage counts its files from zero,
//! so the two are laid end to end on one scale (the words stage's files, then the embedding
//! stage's), which a client shows as one bar that only moves forward.

use crate::index::hybrid::Progress;
use std::time::{Duration, Instant};

/// One report: how far along on the scale, of how much (once the walk is over), in percent, and
/// the stage's counts in words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProgressStep {
    pub(crate) done: usize,
    pub(crate) total: Option<usize>,
    pub(crate) percentage: u32,
    pub(crate) message: String,
}

/// Turns the `Progress` a search's refresh reports into `ProgressStep`s (see the module header).
#[derive(Debug)]
pub(crate) struct ProgressSteps {
    /// The least time between two reports, unless the later one ends a stage.
    every: Duration,
    /// The last report's time, place on the scale and total.
    last: Option<(Instant, usize, Option<usize>)>,
    /// The files the words stage found, once one reported: the embedding stage comes after them.
    words_stage: Option<usize>,
}

impl ProgressSteps {
    pub(crate) fn new(every: Duration) -> ProgressSteps {
        ProgressSteps { every, last: None, words_stage: None }
    }

    /// The step to report for `p`, or `None` when it would not move forward or comes too soon.
    pub(crate) fn next(&mut self, p: &Progress) -> Option<ProgressStep> {
        // With a words stage, the whole takes twice its files: each is read for its words, then embedded.
        let (before, stages) = match (p.words_only, self.words_stage) {
            (true, _) => {
                self.words_stage = Some(p.found);
                (0, 2)
            }
            (false, Some(words)) => (words, 1),
            (false, None) => (0, 1),
        };
        let (stage_done, left) = p.checked();
        let done = before + stage_done;
        // The embedding stage's walk has not counted its files yet: the words stage's count stands for them.
        let total = match (p.walked, self.words_stage) {
            (true, _) => Some(before + p.found * stages),
            (false, Some(words)) if !p.words_only => Some(2 * words),
            (false, _) => None,
        };
        let stage_over = p.walked && stage_done + left >= p.found;
        let due = match self.last {
            None => true,
            Some((when, last_done, last_total)) => {
                let forward = done > last_done || (done == last_done && total != last_total);
                forward && (stage_over || when.elapsed() >= self.every)
            }
        };
        if !due {
            return None;
        }
        self.last = Some((Instant::now(), done, total));
        let percentage = match total {
            // Files left for later count as passed: the answer does not wait for them.
            Some(total) if total > 0 => ((done + left) * 100 / total).min(100) as u32,
            _ => 0,
        };
        Some(ProgressStep { done, total, percentage, message: p.summary() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(words_only: bool, done: usize, found: usize, walked: bool) -> Progress {
        Progress { words_only, done, found, walked, ..Progress::default() }
    }

    #[test]
    fn a_words_stage_and_the_embedding_after_it_make_one_bar_that_only_goes_forward() {
        let mut steps = ProgressSteps::new(Duration::ZERO);
        // The words stage leaves what it reads for the embedding (`pending`), as a search's does.
        let read = |done, words_read, found, walked| Progress {
            pending: words_read,
            words_read,
            ..counts(true, done, found, walked)
        };
        let reported: Vec<ProgressStep> = [
            read(0, 0, 3, false),
            read(1, 1, 10, true),
            read(1, 9, 10, true),
            // The embedding stage walks again from zero.
            counts(false, 0, 4, false),
            counts(false, 3, 4, false),
            counts(false, 4, 10, true),
            counts(false, 10, 10, true),
        ]
        .iter()
        .filter_map(|p| steps.next(p))
        .collect();
        let places: Vec<(usize, Option<usize>, u32)> =
            reported.iter().map(|s| (s.done, s.total, s.percentage)).collect();
        assert_eq!(
            places,
            [
                (0, None, 0),
                (2, Some(20), 10),
                (10, Some(20), 50),
                (13, Some(20), 65),
                (14, Some(20), 70),
                (20, Some(20), 100)
            ]
        );
        assert!(reported[1].message.starts_with("indexing words: 2 of 10 files checked"), "{}", reported[1].message);
        assert!(reported[4].message.starts_with("indexing: 4 of 10 files checked"), "{}", reported[4].message);
    }

    #[test]
    fn without_a_words_stage_the_scale_is_the_files_found() {
        let mut steps = ProgressSteps::new(Duration::ZERO);
        let walking = steps.next(&counts(false, 5, 5, false)).expect("a first report");
        assert_eq!((walking.done, walking.total, walking.percentage), (5, None, 0));
        let first = steps.next(&counts(false, 5, 8, true)).expect("the same place, now with its total");
        assert_eq!((first.done, first.total, first.percentage), (5, Some(8), 62));
        assert_eq!(steps.next(&counts(false, 5, 8, true)), None, "the same place twice");
        let left = Progress { pending: 3, ..counts(false, 5, 8, true) };
        assert_eq!(steps.next(&left), None, "files left for later do not move the place");
    }

    #[test]
    fn reports_between_the_first_and_a_stage_end_wait_their_turn() {
        let mut steps = ProgressSteps::new(Duration::from_secs(3600));
        assert!(steps.next(&counts(false, 1, 10, true)).is_some(), "the first is always sent");
        assert_eq!(steps.next(&counts(false, 5, 10, true)), None, "too soon after the first");
        let last = steps.next(&counts(false, 10, 10, true)).expect("a stage's end is always sent");
        assert_eq!(last.percentage, 100);
    }
}
