//! Kernel algorithms as coroutines that any driver can step.
//!
//! A Linux algorithm is written once as an `async` block that awaits hardware
//! operations through a [`Port`]. Awaiting an operation suspends the algorithm and hands
//! the request to whoever is driving it: the timed engine (which completes it after the
//! operation's latency, letting other hardware act meanwhile), the interleaving
//! explorer (which tries every ordering of the steps of all actors), a proptest schedule,
//! or a native driver performing it on real atomics. The algorithm cannot tell which.
//!
//! There is no async runtime here: a [`Coroutine`] is polled with a no-op waker, and
//! every suspension must be a [`Port::call`]. Awaiting anything else (a timer, a
//! channel from a runtime) is a bug and panics with a message saying so.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

struct Mailbox<Req, Resp> {
    request: Cell<Option<Req>>,
    response: Cell<Option<Resp>>,
}

/// The algorithm's side of the hardware: each call is one operation the driver performs.
pub struct Port<Req, Resp> {
    mailbox: Rc<Mailbox<Req, Resp>>,
}

impl<Req, Resp> Clone for Port<Req, Resp> {
    fn clone(&self) -> Self {
        Port {
            mailbox: Rc::clone(&self.mailbox),
        }
    }
}

impl<Req, Resp> Port<Req, Resp> {
    /// Requests one operation and suspends until the driver supplies its result.
    pub fn call(&self, request: Req) -> Call<Req, Resp> {
        // Posted now, not at the first poll: carried inside the future, the request
        // was written field by field and then reloaded whole to move it into the
        // mailbox, a reload that store forwarding cannot serve.
        self.mailbox.request.set(Some(request));
        Call {
            mailbox: Rc::clone(&self.mailbox),
            suspended: false,
        }
    }
}

/// Future of one hardware operation.
#[must_use = "a hardware operation does nothing until awaited"]
pub struct Call<Req, Resp> {
    mailbox: Rc<Mailbox<Req, Resp>>,
    /// Whether the algorithm has suspended on this call once (its request, posted by
    /// [`Port::call`], is then the driver's).
    suspended: bool,
}

// Call holds no self-references; moving it is fine.
impl<Req, Resp> Unpin for Call<Req, Resp> {}

impl<Req, Resp> Drop for Call<Req, Resp> {
    fn drop(&mut self) {
        // A call dropped before it was awaited withdraws its request, so that it is
        // never mistaken for the one a later suspension made.
        if !self.suspended {
            self.mailbox.request.take();
        }
    }
}

impl<Req, Resp> Future for Call<Req, Resp> {
    type Output = Resp;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Resp> {
        if !self.suspended {
            self.suspended = true;
            return Poll::Pending;
        }
        match self.mailbox.response.take() {
            Some(resp) => Poll::Ready(resp),
            None => Poll::Pending,
        }
    }
}

/// What a coroutine did when resumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<Req> {
    /// It is suspended on this operation; resume it with the operation's result.
    Request(Req),
    /// It ran to completion.
    Done,
}

impl<Req> Step<Req> {
    /// The same step with its request wrapped by `f` (a driver running algorithms of
    /// several interfaces names their operations in one type).
    #[inline(always)]
    pub fn map<T>(self, f: impl FnOnce(Req) -> T) -> Step<T> {
        match self {
            Step::Request(r) => Step::Request(f(r)),
            Step::Done => Step::Done,
        }
    }
}

type BoxedAlgorithm = Pin<Box<dyn Future<Output = ()>>>;

/// A running instance of an algorithm.
pub struct Coroutine<Req, Resp> {
    future: Option<BoxedAlgorithm>,
    mailbox: Rc<Mailbox<Req, Resp>>,
    steps: u64,
}

impl<Req, Resp> Coroutine<Req, Resp> {
    /// Creates a port and starts nothing yet: the first [`Coroutine::resume`] runs the
    /// algorithm up to its first operation.
    pub fn new<F>(algorithm: impl FnOnce(Port<Req, Resp>) -> F) -> Self
    where
        F: Future<Output = ()> + 'static,
    {
        Coroutine::from_boxed(|port| Box::pin(algorithm(port)))
    }

    /// Same as [`Coroutine::new`] for an algorithm that is already boxed (trait objects).
    pub fn from_boxed(algorithm: impl FnOnce(Port<Req, Resp>) -> BoxedAlgorithm) -> Self {
        let mailbox = Rc::new(Mailbox {
            request: Cell::new(None),
            response: Cell::new(None),
        });
        let port = Port {
            mailbox: Rc::clone(&mailbox),
        };
        Coroutine {
            future: Some(algorithm(port)),
            mailbox,
            steps: 0,
        }
    }

    /// Runs the algorithm until its next operation, delivering `response` as the
    /// result of the operation it was suspended on (`None` on the first resume).
    ///
    /// # Panics
    /// If the algorithm suspends without having requested an operation, or if it is
    /// resumed after finishing.
    // Inlined into the driver, so the step it returns stays in registers: returned
    // through memory, the request (written by the poll with narrow stores) was copied
    // out again at other widths, stalling store forwarding on every operation.
    #[inline(always)]
    pub fn resume(&mut self, response: Option<Resp>) -> Step<Req> {
        let future = self
            .future
            .as_mut()
            .expect("resumed a coroutine that already finished");
        if let Some(r) = response {
            self.mailbox.response.set(Some(r));
        }
        let mut cx = Context::from_waker(Waker::noop());
        match future.as_mut().poll(&mut cx) {
            Poll::Ready(()) => {
                self.future = None;
                Step::Done
            }
            Poll::Pending => {
                self.steps += 1;
                let request = self.mailbox.request.take().expect(
                    "algorithm suspended on something other than a Port call; \
                     only hardware operations may be awaited",
                );
                Step::Request(request)
            }
        }
    }

    /// Whether the algorithm has returned.
    pub fn is_done(&self) -> bool {
        self.future.is_none()
    }

    /// Operations requested so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_supplies_each_result_in_turn() {
        let log = Rc::new(Cell::new(0u64));
        let seen = Rc::clone(&log);
        let mut co: Coroutine<&'static str, u64> = Coroutine::new(|port| async move {
            let a = port.call("load").await;
            let b = port.call("xchg").await;
            seen.set(a * 10 + b);
        });
        assert!(!co.is_done(), "not started yet");
        assert_eq!(co.resume(None), Step::Request("load"));
        assert!(!co.is_done(), "suspended on its first call");
        assert_eq!(co.resume(Some(4)), Step::Request("xchg"));
        assert_eq!(co.resume(Some(2)), Step::Done);
        assert_eq!(log.get(), 42);
        assert!(co.is_done());
        assert_eq!(co.steps(), 2);
    }

    #[test]
    #[should_panic(expected = "only hardware operations")]
    fn a_call_dropped_unawaited_leaves_no_request_behind() {
        let mut co: Coroutine<&'static str, ()> = Coroutine::new(|port| async move {
            drop(port.call("never awaited"));
            std::future::pending::<()>().await;
        });
        co.resume(None);
    }

    #[test]
    #[should_panic(expected = "only hardware operations")]
    fn awaiting_foreign_futures_is_rejected() {
        let mut co: Coroutine<(), ()> = Coroutine::new(|_port| async move {
            std::future::pending::<()>().await;
        });
        co.resume(None);
    }
}
