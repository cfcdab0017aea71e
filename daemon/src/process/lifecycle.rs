//! A process's lifecycle as the actor publishes it ([`ProcState`]), typed so that only states that
//! can happen can be built: an end always has its time and run time, a lost process always its
//! reason, a running one none of these, and an end that is not settled yet is reported as
//! running ([`ProcState::reported`]).
//!
//! The wire (`pb::ProcessInfo`) and the record (`record.json`) keep their flat fields (a status
//! plus optional exit code, signal, end, duration, `ended_by`, `lost_reason`): they are read and
//! written at the edges, [`ProcState::from_record`] and `ProcessFacts::record`.

use std::time::{Duration, SystemTime};

use super::tree::Identity;
use crate::record::ProcessRecord;
use crate::status::{EndedBy, ExitHow, LostReason, Status, from_unix_ms};

/// What the actor publishes about its process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcState {
    /// The shell's identity (`None` before the spawn, and in a record written before it).
    pub identity: Option<Identity>,
    /// Descendants still running: after the shell exited, or survivors of a stop's SIGKILL.
    pub descendants: u32,
    /// Where the process is in its life.
    pub life: Life,
}

/// Where a process is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Life {
    /// Not ended yet (or not even spawned).
    Running,
    /// Its end is decided.
    Ended {
        /// How it ended.
        end: End,
        /// The result is final: the shell has exited and its output is drained (or the grace
        /// for pipes held by descendants ran out), or a stop/timeout has taken the whole tree
        /// down and the readers have the rest of its output (or were cut off). `exec` and
        /// `wait` return at this point, and only from here on do clients see the end
        /// ([`ProcState::reported`]).
        settled: bool,
    },
    /// Left running under a holder that speaks a newer holder protocol than this daemon (a
    /// downgrade): reported `lost` (`newer_holder`), with no end, for a daemon that speaks its
    /// protocol to re-adopt. Only ever in memory: its record keeps saying `running`.
    LeftToNewerHolder,
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct End {
    /// The status it ended with.
    pub status: EndStatus,
    /// How the shell ended, once its holder said so (a lost holder never does; a stop's
    /// process may learn it after the tree was found gone).
    pub exit: Option<ExitHow>,
    /// Wall-clock end.
    pub at: SystemTime,
    /// Run time, fixed at the end.
    pub duration: Duration,
}

/// The status of an ended process, with what only that status has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndStatus {
    /// The shell exited on its own.
    Completed,
    /// Ended by `stop` or by the daemon's shutdown (or, read from a record, a word a newer
    /// daemon wrote).
    Stopped(EndedBy),
    /// Ended because `timeout_ms` fired.
    TimedOut,
    /// The daemon failed while running it (only ever read from a record).
    Failed,
    /// Its supervision failed, for this reason.
    Lost(LostReason),
}

impl EndStatus {
    /// The lifecycle status.
    pub fn status(self) -> Status {
        match self {
            EndStatus::Completed => Status::Completed,
            EndStatus::Stopped(_) => Status::Stopped,
            EndStatus::TimedOut => Status::TimedOut,
            EndStatus::Failed => Status::Failed,
            EndStatus::Lost(_) => Status::Lost,
        }
    }

    /// What ended it, when it did not complete on its own.
    pub fn ended_by(self) -> Option<EndedBy> {
        match self {
            EndStatus::Stopped(by) => Some(by),
            EndStatus::TimedOut => Some(EndedBy::Timeout),
            EndStatus::Completed | EndStatus::Failed | EndStatus::Lost(_) => None,
        }
    }

    /// Why it is lost.
    pub fn lost_reason(self) -> Option<LostReason> {
        match self {
            EndStatus::Lost(reason) => Some(reason),
            _ => None,
        }
    }
}

impl ProcState {
    /// Spawned, and nothing else known yet.
    pub(crate) fn running(identity: Identity) -> ProcState {
        ProcState {
            identity: Some(identity),
            descendants: 0,
            life: Life::Running,
        }
    }

    /// Before the spawn: nothing known yet.
    pub(crate) fn starting() -> ProcState {
        ProcState {
            identity: None,
            descendants: 0,
            life: Life::Running,
        }
    }

    /// The state a record describes, as a restarting daemon first reads it: `starting` and
    /// `running` are running (recovery then looks for the process), every other status an end
    /// that is settled. Fields the status cannot have are ignored (an exit code is kept: a
    /// stopped shell may have exited on its own). A record lacking its end time or run time
    /// (one an earlier daemon wrote by hand after a crash) has them worked out from the other.
    pub fn from_record(r: &ProcessRecord) -> ProcState {
        let identity = r.pid.map(|pid| Identity {
            pid,
            start_time: r.start_time.unwrap_or(0),
        });
        let status = match r.status.status() {
            Status::Running => None,
            Status::Completed => Some(EndStatus::Completed),
            Status::Stopped => Some(EndStatus::Stopped(r.ended_by.unwrap_or(EndedBy::Unknown))),
            Status::TimedOut => Some(EndStatus::TimedOut),
            Status::Failed => Some(EndStatus::Failed),
            Status::Lost => Some(EndStatus::Lost(
                r.lost_reason.unwrap_or(LostReason::Unknown),
            )),
        };
        let life = match status {
            None => Life::Running,
            Some(status) => {
                let started = from_unix_ms(r.started_at_ms);
                let duration = r.duration_ms.map(Duration::from_millis);
                let at = match (r.ended_at_ms, duration) {
                    (Some(ms), _) => from_unix_ms(ms),
                    (None, Some(d)) => started + d,
                    (None, None) => started,
                };
                Life::Ended {
                    end: End {
                        status,
                        exit: ExitHow::from_parts(r.exit_code, r.signal),
                        at,
                        duration: duration
                            .unwrap_or_else(|| at.duration_since(started).unwrap_or_default()),
                    },
                    settled: true,
                }
            }
        };
        ProcState {
            identity,
            descendants: 0,
            life,
        }
    }

    /// The state as clients are told it: until the result is settled, `running`, with no exit
    /// and no end. The status alone must never say "ended" while the output is still being
    /// drained, or a client that reads until the status ends would miss the last bytes (usually
    /// the error message). Settled means the output is complete up to EOF (or the drain grace
    /// for pipes held by descendants, or the reader cutoff after a stop).
    pub fn reported(&self) -> ProcState {
        match self.life {
            Life::Ended { settled: false, .. } => ProcState {
                life: Life::Running,
                ..self.clone()
            },
            _ => self.clone(),
        }
    }

    /// The end, once decided (settled or not).
    pub fn end(&self) -> Option<&End> {
        match &self.life {
            Life::Ended { end, .. } => Some(end),
            Life::Running | Life::LeftToNewerHolder => None,
        }
    }

    /// Whether the result is final (see [`Life::Ended`]). A process left to a newer holder is
    /// as final as this daemon will ever know it.
    pub fn settled(&self) -> bool {
        match self.life {
            Life::Running => false,
            Life::Ended { settled, .. } => settled,
            Life::LeftToNewerHolder => true,
        }
    }

    /// Whether it is reported as running (see [`ProcState::reported`]): not ended, or ended
    /// but not settled.
    pub fn reported_running(&self) -> bool {
        matches!(
            self.life,
            Life::Running | Life::Ended { settled: false, .. }
        )
    }

    /// Whether nothing of it may run any more: settled, ended, no descendant left, and not left
    /// to a newer holder (which still runs it). What may be evicted, cleaned up, or left out of
    /// the shutdown sweep.
    pub fn finished(&self) -> bool {
        matches!(self.life, Life::Ended { settled: true, .. }) && self.descendants == 0
    }

    /// The lifecycle status (the decided one, also before it is settled; clients are told
    /// [`ProcState::reported`]'s).
    pub fn status(&self) -> Status {
        match &self.life {
            Life::Running => Status::Running,
            Life::Ended { end, .. } => end.status.status(),
            Life::LeftToNewerHolder => Status::Lost,
        }
    }

    /// How the shell ended, once known.
    pub fn exit(&self) -> Option<ExitHow> {
        self.end().and_then(|e| e.exit)
    }

    /// Wall-clock end.
    pub fn ended_at(&self) -> Option<SystemTime> {
        self.end().map(|e| e.at)
    }

    /// Run time, once ended.
    pub fn duration(&self) -> Option<Duration> {
        self.end().map(|e| e.duration)
    }

    /// What ended it, when it did not complete on its own.
    pub fn ended_by(&self) -> Option<EndedBy> {
        self.end().and_then(|e| e.status.ended_by())
    }

    /// Why it is lost.
    pub fn lost_reason(&self) -> Option<LostReason> {
        match &self.life {
            Life::Running => None,
            Life::Ended { end, .. } => end.status.lost_reason(),
            Life::LeftToNewerHolder => Some(LostReason::NewerHolder),
        }
    }

    /// Ends a process still running (settled or not as `settled` says); one that has ended
    /// keeps its end. Returns whether it ended now.
    pub(crate) fn end_with(&mut self, end: End, settled: bool) -> bool {
        if !matches!(self.life, Life::Running) {
            return false;
        }
        self.life = Life::Ended { end, settled };
        true
    }

    /// The result is final (see [`Life::Ended`]). Nothing to settle while running.
    pub(crate) fn settle(&mut self) {
        if let Life::Ended { settled, .. } = &mut self.life {
            *settled = true;
        }
    }

    /// The shell's exit status arrived after its end was decided (a stop found the tree gone
    /// first): the end keeps its time and status.
    pub(crate) fn note_late_exit(&mut self, how: ExitHow) {
        if let Life::Ended { end, .. } = &mut self.life {
            end.exit = Some(how);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{RECORD_FORMAT, RecordBytes};
    use crate::status::RecordStatus;

    fn end(status: EndStatus) -> End {
        End {
            status,
            exit: Some(ExitHow::Signal(15)),
            at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            duration: Duration::from_millis(1234),
        }
    }

    fn ended(status: EndStatus, settled: bool) -> ProcState {
        ProcState {
            life: Life::Ended {
                end: end(status),
                settled,
            },
            descendants: 2,
            ..ProcState::running(Identity {
                pid: 42,
                start_time: 7,
            })
        }
    }

    #[test]
    fn an_end_is_reported_only_once_settled() {
        let running = ProcState::running(Identity {
            pid: 42,
            start_time: 7,
        });
        assert_eq!(running.reported(), running);
        assert!(running.reported_running() && !running.settled() && !running.finished());
        for status in [
            EndStatus::Completed,
            EndStatus::Stopped(EndedBy::Stop),
            EndStatus::TimedOut,
            EndStatus::Failed,
            EndStatus::Lost(LostReason::HolderDied),
        ] {
            // Decided but not settled: the output is still draining; clients see it running,
            // with no end, no exit and no cause (the descendants are counted already).
            let draining = ended(status, false);
            assert_eq!(draining.status(), status.status(), "decided: {status:?}");
            let told = draining.reported();
            assert_eq!(told.status(), Status::Running, "{status:?}");
            assert_eq!(
                (told.exit(), told.ended_at(), told.duration()),
                (None, None, None)
            );
            assert_eq!((told.ended_by(), told.lost_reason()), (None, None));
            assert_eq!((told.identity, told.descendants), (draining.identity, 2));
            assert!(draining.reported_running() && !draining.settled());
            // Settled: told as it is.
            let settled = ended(status, true);
            assert_eq!(settled.reported(), settled);
            assert_eq!(settled.exit(), Some(ExitHow::Signal(15)));
            assert_eq!(settled.duration(), Some(Duration::from_millis(1234)));
            assert!(!settled.reported_running() && settled.settled());
            assert!(!settled.finished(), "descendants still run");
            assert!(
                ProcState {
                    descendants: 0,
                    ..settled
                }
                .finished()
            );
        }
        let left = ProcState {
            life: Life::LeftToNewerHolder,
            ..running
        };
        assert_eq!(left.reported(), left);
        assert_eq!(
            (left.status(), left.lost_reason(), left.ended_at()),
            (Status::Lost, Some(LostReason::NewerHolder), None)
        );
        assert!(!left.reported_running() && left.settled());
        assert!(!left.finished(), "it still runs under its holder");
    }

    #[test]
    fn only_a_status_of_its_own_carries_a_cause() {
        assert_eq!(EndStatus::Completed.ended_by(), None);
        assert_eq!(EndStatus::TimedOut.ended_by(), Some(EndedBy::Timeout));
        assert_eq!(
            EndStatus::Stopped(EndedBy::DaemonShutdown).ended_by(),
            Some(EndedBy::DaemonShutdown)
        );
        assert_eq!(EndStatus::Lost(LostReason::DaemonCrash).ended_by(), None);
        assert_eq!(
            EndStatus::Lost(LostReason::DaemonCrash).lost_reason(),
            Some(LostReason::DaemonCrash)
        );
        assert_eq!(EndStatus::Stopped(EndedBy::Stop).lost_reason(), None);
    }

    #[test]
    fn an_end_once_decided_is_kept() {
        let mut s = ProcState::running(Identity {
            pid: 1,
            start_time: 1,
        });
        s.settle();
        assert_eq!(s.life, Life::Running, "nothing to settle while running");
        assert!(s.end_with(end(EndStatus::Completed), false));
        assert!(!s.end_with(end(EndStatus::TimedOut), true), "decided once");
        s.note_late_exit(ExitHow::Code(3));
        s.settle();
        assert_eq!(s.status(), Status::Completed);
        assert_eq!(s.exit(), Some(ExitHow::Code(3)));
        assert!(s.settled());
    }

    /// A record as the daemon of this release writes it (`ProcessFacts::record`), kept
    /// literally: the records of every daemon that re-adopts or lists this process must keep
    /// reading it.
    const STOPPED_RECORD: &str = r#"{
  "format": 1,
  "process_id": "proc_0123456789ab",
  "session_id": "sess_1",
  "name": "build",
  "command": "sleep 100",
  "cwd": "/srv/app",
  "status": "stopped",
  "pid": 4242,
  "start_time": 987654,
  "exit_code": null,
  "signal": 15,
  "started_at_ms": 1700000000000,
  "ended_at_ms": 1700000001500,
  "duration_ms": 1500,
  "ended_by": "stop",
  "lost_reason": null,
  "tty": true,
  "timeout_at_ms": 1700000060000
}"#;

    #[test]
    fn a_record_of_this_release_reads_back_and_writes_the_same() {
        let record: ProcessRecord = serde_json::from_str(STOPPED_RECORD).expect("record");
        let state = ProcState::from_record(&record);
        assert_eq!(
            state,
            ProcState {
                identity: Some(Identity {
                    pid: 4242,
                    start_time: 987654,
                }),
                descendants: 0,
                life: Life::Ended {
                    end: End {
                        status: EndStatus::Stopped(EndedBy::Stop),
                        exit: Some(ExitHow::Signal(15)),
                        at: from_unix_ms(1_700_000_001_500),
                        duration: Duration::from_millis(1500),
                    },
                    settled: true,
                },
            }
        );
        let facts = crate::process::ProcessFacts::from_record(&record);
        let written = facts.record(&state);
        assert_eq!(written, record);
        assert_eq!(
            serde_json::to_string_pretty(&written).expect("json"),
            STOPPED_RECORD
        );
    }

    #[test]
    fn records_of_every_status_read_as_states_of_their_own() {
        let base: ProcessRecord = serde_json::from_str(STOPPED_RECORD).expect("record");
        let read = |f: &dyn Fn(&mut ProcessRecord)| {
            let mut r = base.clone();
            f(&mut r);
            ProcState::from_record(&r)
        };
        // Running (and starting: never confirmed to end) has no end, whatever else it says.
        for status in [RecordStatus::Starting, RecordStatus::Running] {
            let s = read(&|r| r.status = status);
            assert_eq!(
                (s.life.clone(), s.ended_at(), s.exit()),
                (Life::Running, None, None)
            );
        }
        let s = read(&|r| {
            r.status = RecordStatus::Completed;
            r.signal = None;
            r.exit_code = Some(0);
        });
        assert_eq!(s.end().map(|e| e.status), Some(EndStatus::Completed));
        assert_eq!((s.exit(), s.ended_by()), (Some(ExitHow::Code(0)), None));
        let s = read(&|r| r.status = RecordStatus::TimedOut);
        assert_eq!(s.ended_by(), Some(EndedBy::Timeout));
        // A lost record written by a crashed daemon's successor, without a run time; and a
        // status word of a newer daemon: lost, for a reason this daemon cannot name.
        let s = read(&|r| {
            r.status = RecordStatus::Lost;
            r.lost_reason = Some(LostReason::RecordMissing);
            r.ended_by = None;
            r.duration_ms = None;
        });
        assert_eq!(s.lost_reason(), Some(LostReason::RecordMissing));
        assert_eq!(s.duration(), Some(Duration::from_millis(1500)));
        let s = read(&|r| {
            r.status = serde_json::from_str("\"paused\"").expect("word");
            r.lost_reason = None;
            r.ended_at_ms = None;
        });
        assert_eq!(s.status(), Status::Lost);
        assert_eq!(s.lost_reason(), Some(LostReason::Unknown));
        assert_eq!(s.ended_at(), Some(from_unix_ms(1_700_000_001_500)));
        // A record of the first format, before `tty`, `sandbox`, `twin` and the deadline.
        let oldest = r#"{"format":1,"process_id":"proc_a","session_id":"s","name":"",
            "command":{"hex":"ff00"},"cwd":"/","status":"completed","pid":7,"start_time":1,
            "exit_code":2,"signal":null,"started_at_ms":5,"ended_at_ms":9,"duration_ms":4,
            "ended_by":null,"lost_reason":null}"#;
        let r: ProcessRecord = serde_json::from_str(oldest).expect("oldest record");
        assert_eq!(r.format, RECORD_FORMAT);
        assert_eq!(r.command, RecordBytes::Hex { hex: "ff00".into() });
        let s = ProcState::from_record(&r);
        assert_eq!(
            (s.status(), s.exit(), s.duration()),
            (
                Status::Completed,
                Some(ExitHow::Code(2)),
                Some(Duration::from_millis(4))
            )
        );
    }
}
