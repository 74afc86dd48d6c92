//! Server (and loadgen) CPU time, RSS (and its peak) and run-queue wait from `/proc`.

/// A process's CPU seconds (utime + stime) and resident set (KiB), from `/proc`.
pub fn proc_sample(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; fields resume after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after `) `.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status_kib(&status, "VmRSS:")?;
    // USER_HZ is 100 on every Linux this runs on (sysconf(_SC_CLK_TCK)).
    Some((ticks as f64 / 100.0, rss))
}

/// A process's resident set and its peak (VmRSS, VmHWM; KiB), from `/proc`.
pub fn memory(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some((status_kib(&status, "VmRSS:")?, status_kib(&status, "VmHWM:")?))
}

/// A `kB` field (`VmRSS:`, `VmHWM:`) of a `/proc/<pid>/status` text.
fn status_kib(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix(field))?.trim().trim_end_matches("kB").trim().parse().ok()
}

/// [`proc_sample`] summed over `pids`; `None` when empty or one cannot be read.
pub fn sample_all(pids: &[u32]) -> Option<(f64, u64)> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().try_fold((0.0, 0), |(cpu, rss), pid| proc_sample(*pid).map(|(c, r)| (cpu + c, rss + r)))
}

/// [`runqueue_wait_s`] summed over `pids`.
pub fn wait_all(pids: &[u32]) -> Option<f64> {
    if pids.is_empty() {
        return None;
    }
    pids.iter().try_fold(0.0, |sum, pid| runqueue_wait_s(*pid).map(|w| sum + w))
}

/// Seconds all threads of `pid` have waited on a run queue (`/proc/<pid>/task/*/schedstat`).
pub fn runqueue_wait_s(pid: u32) -> Option<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let text = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        ns += text.split_whitespace().nth(1).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    }
    Some(ns as f64 / 1e9)
}
