//! A user's SN software ([`crate::kernel::sn::SnSoftware`]) as the explorer's SN
//! actor: each [`SnOp`] is one atomic step on the descriptor, replayed like the
//! handler (a coroutine is rebuilt from its start with the results it was given).
//!
//! While the program runs it may still recheck, so a post that SN suppressed is not
//! yet a loss (the built-in actor excuses it the same way until its recheck); a
//! notification it owes after setting ON counts as pending until it sends it. Once
//! the program has returned, the usual checks apply, so a sequence that forgets the
//! recheck fails `nothing-lost` at quiescence.

use super::model::{narrate, Invariant, StepNote, Violation, World};
use crate::engine::{Coroutine, Step};
use crate::kernel::sn::{SnOp, SnPort, SnSoftware};

/// Re-runs `sw` with `results` and returns where it stops next (after the last
/// result answered `performed`, if any).
pub(super) fn advance_sn(
    sw: &dyn SnSoftware,
    toggles: u32,
    results: &[u64],
    performed: Option<SnOp>,
) -> Result<Step<SnOp>, Violation> {
    let mut co: Coroutine<SnOp, u64> = Coroutine::from_boxed(|p| sw.run(SnPort::new(p), toggles));
    let mut step = co.resume(None);
    let Some((last, earlier)) = results.split_last() else {
        return Ok(step);
    };
    for r in earlier {
        step = co.resume(Some(*r));
    }
    if performed.map(Step::Request).as_ref() != Some(&step) {
        return Err(Violation::new(
            Invariant::HandlerContract,
            format!(
                "SN software {} is not deterministic: given the same results it asked for \
                 {step:?} where it had asked for {performed:?}",
                sw.name()
            ),
        ));
    }
    Ok(co.resume(Some(*last)))
}

impl World {
    /// The SN software performs `op`. Returns its result, whether it sent a
    /// notification, and a description.
    pub fn sn_op(
        &mut self,
        op: SnOp,
        checks: &mut u64,
    ) -> Result<(u64, bool, StepNote), Violation> {
        let before = self.desc;
        let (result, sent, note) = match op {
            SnOp::SetSn | SnOp::ClearSn => {
                let note = self.set_sn(op == SnOp::SetSn, false, checks)?;
                (0, false, note.0)
            }
            SnOp::LoadPir { word } => {
                if word >= 4 {
                    return Err(Violation::new(
                        Invariant::HandlerContract,
                        format!("SN software: {op:?}: PIR word {word} does not exist (0..4)"),
                    ));
                }
                let v = self.desc.pir_word(word);
                (v, false, narrate(|| format!("load PIR[{word}] -> {v:#x}")))
            }
            SnOp::TestAndSetOn => {
                let was = self.desc.on();
                self.desc.set_on(true);
                if !was {
                    self.notify_owed = true;
                }
                (
                    was as u64,
                    false,
                    narrate(|| format!("test-and-set ON -> {}", was as u8)),
                )
            }
            SnOp::SendNotification => {
                self.notify_owed = false;
                self.notifications += 1;
                self.in_flight += 1;
                (0, true, narrate(|| "send notification".into()))
            }
        };
        self.check_pir_source(&before, 0, 0, checks)?;
        Ok((result, sent, StepNote(note)))
    }

    /// Whether the SN software may still act: while it runs, a post it suppressed is
    /// not yet lost.
    /// Once it has returned, a notification it still owed is one it never sends.
    pub fn set_sn_running(&mut self, running: bool) {
        self.rechecks_due = u32::from(running);
        if !running {
            self.notify_owed = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::sn::SnRecheck;

    #[test]
    fn replay_follows_the_results_and_rejects_a_different_history() {
        assert_eq!(
            advance_sn(&SnRecheck, 2, &[], None).unwrap(),
            Step::Request(SnOp::SetSn)
        );
        let next = advance_sn(&SnRecheck, 2, &[0], Some(SnOp::SetSn)).unwrap();
        assert_eq!(next, Step::Request(SnOp::ClearSn));
        let err = advance_sn(&SnRecheck, 2, &[0, 0], Some(SnOp::TestAndSetOn)).unwrap_err();
        assert_eq!(err.invariant, Invariant::HandlerContract);
    }

    #[test]
    fn setting_on_owes_a_notification_until_it_is_sent_or_the_program_ends() {
        let mut w = World::new();
        let mut checks = 0;
        w.set_sn_running(true);
        let (was, sent, _) = w.sn_op(SnOp::TestAndSetOn, &mut checks).unwrap();
        assert_eq!((was, sent), (0, false));
        assert!(w.notify_owed && w.check_nothing_lost(&mut checks).is_ok());
        let (_, sent, _) = w.sn_op(SnOp::SendNotification, &mut checks).unwrap();
        assert!(sent && !w.notify_owed && w.in_flight == 1);
        w.in_flight = 0;
        w.sn_op(SnOp::TestAndSetOn, &mut checks).unwrap();
        w.set_sn_running(false);
        assert!(
            w.check_nothing_lost(&mut checks).is_err(),
            "ON set, nothing coming"
        );
        assert!(w.sn_op(SnOp::LoadPir { word: 4 }, &mut checks).is_err());
    }
}
