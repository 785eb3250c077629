//! The timer of a group-commit hold (see [`crate::raft::node::group_commit`]): tens to
//! hundreds of microseconds, where tokio's timer counts whole
//! milliseconds (a 100 us sleep there lasts one to two). `batond` uses a
//! kernel timer (timerfd) instead; a simulation keeps tokio's, whose
//! paused clock it drives.

use std::time::Duration;

/// Which clock a hold sleeps on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldClock {
    /// A timerfd on the monotonic clock, to the microsecond (Linux; tokio's
    /// timer elsewhere, or if the kernel refuses one).
    Kernel,
    /// tokio's timer: what a simulation's paused time drives.
    Runtime,
}

/// A sleeper for holds, made once per pump.
#[derive(Debug)]
pub enum HoldTimer {
    #[cfg(target_os = "linux")]
    Kernel(kernel::KernelTimer),
    Runtime,
}

impl HoldTimer {
    pub fn new(clock: HoldClock) -> HoldTimer {
        match clock {
            #[cfg(target_os = "linux")]
            HoldClock::Kernel => match kernel::KernelTimer::new() {
                Ok(timer) => HoldTimer::Kernel(timer),
                Err(error) => {
                    tracing::warn!(%error, "no timerfd: proposals are held on tokio's timer");
                    HoldTimer::Runtime
                }
            },
            _ => HoldTimer::Runtime,
        }
    }

    /// Sleeps for `wait`. Cancelled (dropped), it leaves no wake-up behind.
    pub async fn sleep(&self, wait: Duration) {
        match self {
            #[cfg(target_os = "linux")]
            HoldTimer::Kernel(timer) => timer.sleep(wait).await,
            HoldTimer::Runtime => tokio::time::sleep(wait).await,
        }
    }
}

#[cfg(target_os = "linux")]
mod kernel {
    use std::os::fd::{AsFd, AsRawFd, RawFd};
    use std::time::Duration;

    use nix::sys::time::TimeSpec;
    use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
    use tokio::io::unix::AsyncFd;

    /// The timerfd, as tokio's reactor needs it.
    #[derive(Debug)]
    struct Fd(TimerFd);

    impl AsRawFd for Fd {
        fn as_raw_fd(&self) -> RawFd {
            self.0.as_fd().as_raw_fd()
        }
    }

    #[derive(Debug)]
    pub struct KernelTimer {
        fd: AsyncFd<Fd>,
    }

    /// Disarms the timer when a sleep ends, early or not: an expiry
    /// left armed would wake the runtime for nothing.
    struct Disarm<'a>(&'a TimerFd);

    impl Drop for Disarm<'_> {
        fn drop(&mut self) {
            let _ = self.0.unset();
        }
    }

    impl KernelTimer {
        pub fn new() -> std::io::Result<KernelTimer> {
            let flags = TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC;
            let timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, flags)?;
            // tokio deprecated the safe registration because a value that
            // does not own its descriptor could close it while registered.
            // `Fd` owns its timerfd, and the AsyncFd that owns `Fd`
            // deregisters before dropping it; the replacement is `unsafe`,
            // which the workspace forbids.
            #[allow(deprecated)]
            let fd = AsyncFd::with_interest(Fd(timer), tokio::io::Interest::READABLE)?;
            Ok(KernelTimer { fd })
        }

        pub async fn sleep(&self, wait: Duration) {
            if wait.is_zero() {
                return;
            }
            let timer = &self.fd.get_ref().0;
            let expiry = Expiration::OneShot(TimeSpec::from_duration(wait));
            if let Err(error) = timer.set(expiry, TimerSetTimeFlags::empty()) {
                tracing::warn!(%error, "cannot arm the hold timer");
                return;
            }
            let _disarm = Disarm(timer);
            loop {
                let Ok(mut ready) = self.fd.readable().await else {
                    return;
                };
                // Arming anew reset the count of expiries, so a read that
                // succeeds is this sleep's; one that would block means the
                // readiness was an earlier sleep's.
                match timer.wait() {
                    Ok(()) => return,
                    Err(nix::errno::Errno::EAGAIN) => ready.clear_ready(),
                    Err(_) => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_kernel_timer_sleeps_at_least_its_time_and_again() {
        let timer = HoldTimer::new(HoldClock::Kernel);
        #[cfg(target_os = "linux")]
        assert!(matches!(timer, HoldTimer::Kernel(_)));
        for micros in [50, 200, 0, 120] {
            let wait = Duration::from_micros(micros);
            let started = std::time::Instant::now();
            timer.sleep(wait).await;
            assert!(started.elapsed() >= wait, "{micros} us");
        }
    }

    #[tokio::test]
    async fn a_cancelled_sleep_leaves_no_expiry_behind() {
        let timer = HoldTimer::new(HoldClock::Kernel);
        let early = tokio::time::timeout(
            Duration::from_millis(1),
            timer.sleep(Duration::from_secs(60)),
        );
        assert!(early.await.is_err());
        // Had the 60 s expiry stayed armed or its readiness been taken for
        // this one, this sleep would be cut short or last a minute.
        let started = std::time::Instant::now();
        timer.sleep(Duration::from_micros(300)).await;
        let took = started.elapsed();
        assert!(took >= Duration::from_micros(300), "{took:?}");
        assert!(took < Duration::from_secs(30), "{took:?}");
    }
}
