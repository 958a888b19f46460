//! Plain-text tables for the terminal.

use std::fmt::Write;

use super::{Report, MODEL_NOTE};

/// A simple right-aligned text table with a header row.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers and no rows.
    pub fn new<S: Into<String>>(headers: impl IntoIterator<Item = S>) -> Table {
        Table {
            headers: headers.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row of cells, one per column.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// The table as text: cells right-aligned to their column's widest, a rule under the
    /// headers.
    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut width = vec![0usize; cols];
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            for (i, c) in r.iter().enumerate().take(cols) {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, r: &Vec<String>| {
            let cells: Vec<String> = (0..cols)
                .map(|i| {
                    let c = r.get(i).map(String::as_str).unwrap_or("");
                    format!("{c:>w$}", w = width[i])
                })
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        };
        line(&mut out, &self.headers);
        let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
        let _ = writeln!(out, "{}", rule.join("  "));
        for r in &self.rows {
            line(&mut out, r);
        }
        out
    }
}

/// How much of a run [`render_report_with`] prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Detail {
    /// A kind of component (NVMe drives, a NIC's queues, VMD domains, shootdown
    /// loads, IOAPIC pins) with more than [`SUMMARY_MAX_LINES`] entries gets one line
    /// of totals and ranges; the CPU table keeps its [`SUMMARY_MAX_LINES`] busiest
    /// CPUs when there are more than twice that.
    #[default]
    Summary,
    /// A line per component and a row per CPU.
    Full,
}

/// Entries of one kind that [`Detail::Summary`] still prints one by one.
pub const SUMMARY_MAX_LINES: usize = 8;

/// The human summary of one run, large kinds summarised (see [`Detail::Summary`]).
pub fn render_report(r: &Report) -> String {
    render_report_with(r, Detail::Summary)
}

/// `lo..hi` of `values` with `digits` decimals, or one value when they are all equal
/// at that precision.
fn span(values: impl IntoIterator<Item = f64>, digits: usize) -> String {
    let (lo, hi) = values
        .into_iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if lo > hi {
        return "-".into();
    }
    let (a, b) = (format!("{lo:.digits$}"), format!("{hi:.digits$}"));
    if a == b {
        a
    } else {
        format!("{a}..{b}")
    }
}

/// Whether `n` entries of a kind are summarised at `detail`.
fn summarised(detail: Detail, n: usize) -> bool {
    detail == Detail::Summary && n > SUMMARY_MAX_LINES
}

const FULL_HINT: &str = "one line each with --full";

/// The human summary of one run at `detail`.
pub fn render_report_with(r: &Report, detail: Detail) -> String {
    let mut s = String::new();
    // The PIR-handling variant, the notification counts and the descriptor line exist
    // only where interrupts are posted.
    let posted = r.mode == "posted";
    if posted {
        let _ = writeln!(
            s,
            "scenario {:?}  seed {}  mode {}  variant {}{}",
            r.scenario,
            r.seed,
            r.mode,
            r.variant,
            if r.variant_broken {
                "  (BROKEN ON PURPOSE)"
            } else {
                ""
            }
        );
    } else {
        let _ = writeln!(
            s,
            "scenario {:?}  seed {}  mode {}",
            r.scenario, r.seed, r.mode
        );
    }
    let _ = writeln!(
        s,
        "simulated {:.1} us, {} events, wall {:.3} s",
        r.sim_time_ns / 1e3,
        r.events,
        r.wall_time_s
    );
    let m = &r.msis;
    let dropped: u64 = m.dropped.values().sum();
    let _ = writeln!(
        s,
        "MSIs: generated {}  handled {}  pending {}  dropped {}  (merged {}){}",
        m.generated,
        m.handled,
        m.pending,
        dropped,
        m.merged,
        if m.balanced { "" } else { "  BALANCE BROKEN" }
    );
    if m.held_back_in_devices > 0 {
        let _ = writeln!(
            s,
            "  held back in devices by flow control, not yet generated: {}  (offered {})",
            m.held_back_in_devices,
            m.generated + m.held_back_in_devices
        );
    }
    if let Some(age) = m.oldest_pending_at_cpu_age_ns {
        let _ = writeln!(
            s,
            "  oldest MSI waiting at a CPU: raised {:.1} us before the end (not in the latency percentiles, which count handled MSIs)",
            age / 1e3
        );
    }
    for (reason, n) in &m.dropped {
        let _ = writeln!(s, "  dropped {reason}: {n}");
    }
    if posted {
        let _ = writeln!(
            s,
            "notifications: sent {}  suppressed {}   interrupts taken {}",
            r.notifications.sent, r.notifications.suppressed, r.interrupts_taken
        );
    } else {
        let _ = writeln!(s, "interrupts taken {}", r.interrupts_taken);
    }
    let l = &r.latency_ns;
    let _ = writeln!(
        s,
        "latency raise->handler (ns): p50 {:.0}  p90 {:.0}  p99 {:.0}  p99.9 {:.0}  max {:.0}",
        l.p50, l.p90, l.p99, l.p999, l.max
    );
    if posted {
        let _ = writeln!(
            s,
            "PID line: cpu misses {}  iommu updates {}",
            r.pid_line.cpu_misses, r.pid_line.iommu_updates
        );
    }
    render_nvme(&mut s, r, detail);
    render_vmd(&mut s, r, detail);
    render_nics(&mut s, r, detail);
    render_cross_calls(&mut s, r, detail);
    render_ioapic(&mut s, r, detail);
    render_retriggers(&mut s, r);
    render_migrations(&mut s, r);
    render_smmu_and_transmit(&mut s, r);
    render_cpus(&mut s, r, detail);
    let _ = writeln!(s, "({MODEL_NOTE})");
    s
}

fn render_nvme(s: &mut String, r: &Report, detail: Detail) {
    let drives = &r.io.nvme;
    if summarised(detail, drives.len()) {
        let t = &r.io.nvme_total;
        let _ = writeln!(
            s,
            "NVMe: {} drives, {:.0} IOPS in all (per drive {}), interrupts/IO {}, latency (us) over all I/O p50 {:.1} p99 {:.1} p99.9 {:.1} ({FULL_HINT})",
            drives.len(),
            t.iops,
            span(drives.iter().map(|d| d.iops), 0),
            span(drives.iter().map(|d| d.interrupts_per_io), 3),
            t.latency_us.p50,
            t.latency_us.p99,
            t.latency_us.p999
        );
        if let Some(note) = queue_full_note(t.rejected_queue_full) {
            let _ = writeln!(s, "  {note}");
        }
        return;
    }
    for d in drives {
        let _ = writeln!(
            s,
            "NVMe {}: {:.0} IOPS, {:.3} interrupts/IO, latency (us) p50 {:.1} p99 {:.1} p99.9 {:.1}{}",
            d.name,
            d.iops,
            d.interrupts_per_io,
            d.latency_us.p50,
            d.latency_us.p99,
            d.latency_us.p999,
            queue_full_note(d.rejected_queue_full)
                .map(|note| format!("; {note}"))
                .unwrap_or_default()
        );
    }
}

/// Submissions that found their queue full. The jobs' depth on a queue exceeded its
/// entries, so the drive ran at the queue's depth, not at the jobs' `iodepth`.
fn queue_full_note(refused: u64) -> Option<String> {
    (refused > 0).then(|| {
        format!("{refused} submissions found the queue full (jobs' iodepth above its entries)")
    })
}

fn render_vmd(s: &mut String, r: &Report, detail: Detail) {
    let domains = &r.io.vmd;
    if summarised(detail, domains.len()) {
        let _ = writeln!(
            s,
            "VMD: {} domains ({} remap), {} vectors used, {} child handler calls, {} found nothing ({FULL_HINT})",
            domains.len(),
            domains.iter().filter(|v| v.mode == "remap").count(),
            domains.iter().map(|v| u64::from(v.vectors_used)).sum::<u64>(),
            domains.iter().map(|v| v.child_handler_calls).sum::<u64>(),
            domains.iter().map(|v| v.empty_child_handler_calls).sum::<u64>()
        );
        return;
    }
    for v in domains {
        let _ = writeln!(
            s,
            "VMD {} ({}): {} vectors used, {} child handler calls, {} found nothing",
            v.name, v.mode, v.vectors_used, v.child_handler_calls, v.empty_child_handler_calls
        );
    }
}

fn render_nics(s: &mut String, r: &Report, detail: Detail) {
    // Queues of one NIC are contiguous in the report.
    let mut rest = &r.io.nics[..];
    while let Some(first) = rest.first() {
        let n = rest.iter().take_while(|q| q.name == first.name).count();
        let (queues, tail) = rest.split_at(n);
        rest = tail;
        let active: Vec<_> = queues
            .iter()
            .filter(|q| q.rx_packets > 0 || q.interrupts > 0 || q.tx_sent > 0)
            .collect();
        if summarised(detail, active.len()) {
            let rx: Vec<_> = active.iter().filter(|q| q.rx_packets > 0).collect();
            let _ = writeln!(
                s,
                "NIC {}: {} active queues of {}, {} packets received, {} dropped (ring full), {} sent, {} interrupts; per RX queue interrupts/packet {}, latency (us) p50 {} p99 {} ({FULL_HINT})",
                first.name,
                active.len(),
                queues.len(),
                active.iter().map(|q| q.rx_packets).sum::<u64>(),
                active.iter().map(|q| q.packets_dropped).sum::<u64>(),
                active.iter().map(|q| q.tx_sent).sum::<u64>(),
                active.iter().map(|q| q.interrupts).sum::<u64>(),
                span(rx.iter().map(|q| q.interrupts_per_packet), 3),
                span(rx.iter().map(|q| q.latency_us.p50), 1),
                span(rx.iter().map(|q| q.latency_us.p99), 1)
            );
            continue;
        }
        for q in active {
            render_nic_queue(s, q);
        }
    }
}

fn render_nic_queue(s: &mut String, q: &crate::system::io::NicReport) {
    if q.rx_packets == 0 && q.tx_sent > 0 {
        let _ = writeln!(
            s,
            "NIC {} q{} (cpu {}): {} packets sent, {} interrupts",
            q.name, q.queue, q.cpu, q.tx_sent, q.interrupts
        );
        return;
    }
    let _ = writeln!(
        s,
        "NIC {} q{} (cpu {}): {} packets, {} dropped (ring full), {:.3} interrupts/packet, latency (us) p50 {:.1} p99 {:.1}",
        q.name, q.queue, q.cpu, q.rx_packets, q.packets_dropped, q.interrupts_per_packet, q.latency_us.p50, q.latency_us.p99
    );
}

fn render_cross_calls(s: &mut String, r: &Report, detail: Detail) {
    let Some(x) = &r.cross_calls else {
        return;
    };
    let loads = &x.shootdowns;
    if summarised(detail, loads.len()) {
        let _ = writeln!(
            s,
            "shootdowns: {} loads, {} completed of {} requested, {} ICR writes, latency p50 (us) per load {} ({FULL_HINT})",
            loads.len(),
            loads.iter().map(|l| l.completed).sum::<u64>(),
            loads.iter().map(|l| l.requested).sum::<u64>(),
            loads.iter().map(|l| l.icr_writes).sum::<u64>(),
            span(loads.iter().map(|l| l.latency_ns.p50 / 1e3), 2)
        );
        return;
    }
    for l in loads {
        let _ = writeln!(
            s,
            "shootdown {} ({}, {} targets): {} completed of {} requested, {} ICR writes, latency (us) p50 {:.2} p99 {:.2} max {:.2}",
            l.name,
            l.ipi_mode,
            l.targets,
            l.completed,
            l.requested,
            l.icr_writes,
            l.latency_ns.p50 / 1e3,
            l.latency_ns.p99 / 1e3,
            l.latency_ns.max / 1e3
        );
    }
}

fn render_ioapic(s: &mut String, r: &Report, detail: Detail) {
    let pins = &r.ioapic;
    if summarised(detail, pins.len()) {
        let _ = writeln!(
            s,
            "IOAPIC: {} pins, {} asserted, {} handler runs, {} replayed by enable_irq, masked {} % of the time per pin ({FULL_HINT})",
            pins.len(),
            pins.iter().map(|p| p.asserted).sum::<u64>(),
            pins.iter().map(|p| p.handler_runs).sum::<u64>(),
            pins.iter().map(|p| p.replays).sum::<u64>(),
            span(pins.iter().map(|p| p.masked_frac * 100.0), 1)
        );
        return;
    }
    for p in pins {
        let _ = writeln!(
            s,
            "IOAPIC pin {} {} ({} {} {}, {}, cpu {}): {} asserted, {} handler runs, masked {:.1} % of the time{}",
            p.pin,
            p.name,
            p.chip,
            p.trigger,
            p.flow,
            p.driver,
            p.cpu,
            p.asserted,
            p.handler_runs,
            p.masked_frac * 100.0,
            if p.replays > 0 {
                format!(", {} replayed by enable_irq", p.replays)
            } else {
                String::new()
            }
        );
    }
}

fn render_retriggers(s: &mut String, r: &Report) {
    let Some(t) = &r.retriggers else {
        return;
    };
    if t.sent > 0 {
        let _ = writeln!(
            s,
            "retriggers ({}): {} sent, {} merged in IRR, {} posted vectors taken through the IDT ({} acks with EOI, {} without)",
            t.posted_msi_ack,
            t.sent,
            t.merged,
            t.taken_posted,
            t.acked_with_eoi,
            t.acked_without_eoi
        );
    }
    for st in &t.stale_isr {
        let _ = writeln!(
            s,
            "  warning: cpu {}: {} in service with no interrupt running; nothing will EOI it, so vectors {:#04x} and below are never delivered to this CPU again",
            st.cpu,
            st.vectors.join(", "),
            st.blocked_class as u32 * 16 + 15
        );
    }
}

fn render_migrations(s: &mut String, r: &Report) {
    let Some(m) = &r.migrations else {
        return;
    };
    for mv in &m.moves {
        let _ = writeln!(
            s,
            "migration {}: cpu {} {} -> cpu {} {}, vector cleanup ({}) {}",
            mv.device,
            mv.from_cpu,
            mv.from_vector,
            mv.to_cpu,
            if mv.to_vector.is_empty() {
                "(not yet, or no free vector)"
            } else {
                &mv.to_vector
            },
            m.vector_cleanup,
            match mv.freed_at_ns {
                Some(ns) => format!(
                    "freed the old vector at {:.3} us after {} runs",
                    ns / 1e3,
                    mv.cleanup_attempts
                ),
                None => format!(
                    "has not freed the old vector ({} runs)",
                    mv.cleanup_attempts
                ),
            }
        );
    }
    if m.dispatched_after_free > 0 {
        let _ = writeln!(
            s,
            "  warning: {} handler dispatches of a freed vector: their MSIs are lost (msis.dropped.vector_freed)",
            m.dispatched_after_free
        );
    }
}

fn render_smmu_and_transmit(s: &mut String, r: &Report) {
    if let Some(m) = r
        .smmu
        .as_ref()
        .filter(|m| m.cmdq.consumed > 0 || !m.loads.is_empty())
    {
        let c = &m.call_latency_ns;
        let _ = writeln!(
            s,
            "SMMU ({}, lock {}): {} CMD_SYNCs, {} commands; issue_cmdlist (ns) p50 {:.0} p99 {:.0}",
            m.poll_mode, m.cmdq_lock, m.cmdq.sync, m.cmdq.consumed, c.p50, c.p99
        );
        for l in &m.loads {
            let _ = write!(
                s,
                "SMMU load {} ({} CPUs): {} calls, latency (ns) p50 {:.0} p99 {:.0}",
                l.name, l.cpus, l.completed, l.latency_ns.p50, l.latency_ns.p99
            );
            if l.in_flight > 0 {
                let _ = write!(
                    s,
                    "; {} in flight at the end, the oldest for {:.0} ns",
                    l.in_flight, l.oldest_in_flight_ns
                );
            }
            let _ = writeln!(s);
            // Half the run in one call: nothing a queue drain explains.
            if l.oldest_in_flight_ns > r.sim_time_ns / 2.0 {
                let _ = writeln!(
                    s,
                    "  warning: a call of {} has not returned for {:.0} us (see smmu.host.full_waits and the busiest lines in --json)",
                    l.name,
                    l.oldest_in_flight_ns / 1e3
                );
            }
        }
    }
    for t in &r.transmit {
        let _ = writeln!(
            s,
            "transmit {} ({} threads, {} B datagrams): {:.2} Gbit/s, {} packets posted",
            t.name, t.threads, t.datagram_bytes, t.tx_gbps, t.packets_posted
        );
    }
}

fn render_cpus(s: &mut String, r: &Report, detail: Detail) {
    let mut shown: Vec<&crate::report::CpuReport> = r.cpu.iter().collect();
    let cut = detail == Detail::Summary && r.cpu.len() > 2 * SUMMARY_MAX_LINES;
    if cut {
        let n = r.cpu.len() as f64;
        let _ = writeln!(
            s,
            "CPUs: {}, busy % mean {:.1} max {:.1}, {} interrupts taken; the table shows the {SUMMARY_MAX_LINES} busiest (every CPU with --full)",
            r.cpu.len(),
            r.cpu.iter().map(|c| c.busy_frac).sum::<f64>() / n * 100.0,
            r.cpu.iter().map(|c| c.busy_frac).fold(0.0, f64::max) * 100.0,
            r.cpu.iter().map(|c| c.interrupts_taken).sum::<u64>()
        );
        // Busiest first; a stable sort keeps equally busy CPUs in index order.
        shown.sort_by(|a, b| b.busy_frac.total_cmp(&a.busy_frac));
        shown.truncate(SUMMARY_MAX_LINES);
        shown.sort_by_key(|c| c.cpu);
    }
    let mut t = Table::new([
        "cpu",
        "apic",
        "busy%",
        "entry_ns",
        "exit_ns",
        "handlers_ns",
        "pid_ns",
        "eoi_ns",
        "irqs",
    ]);
    for c in shown {
        t.row([
            c.cpu.to_string(),
            c.apic_id.to_string(),
            format!("{:.1}", c.busy_frac * 100.0),
            format!("{:.0}", c.irq_entry_ns),
            format!("{:.0}", c.irq_exit_ns),
            format!("{:.0}", c.handlers_ns),
            format!("{:.0}", c.pid_access_ns),
            format!("{:.0}", c.eoi_ns),
            c.interrupts_taken.to_string(),
        ]);
    }
    s.push_str(&t.render());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report_with(drives: usize, cpus: usize) -> Report {
        let sc = crate::system::Scenario::from_toml_str(
            crate::scenarios::embedded("default").expect("embedded default"),
            "default",
        )
        .expect("default parses");
        let mut r = crate::system::System::run_scenario(&sc).expect("default runs");
        r.io.nvme = (0..drives)
            .map(|i| crate::system::io::NvmeReport {
                name: format!("nvme{i}"),
                iops: 1000.0 + i as f64,
                interrupts_per_io: 1.0,
                ..Default::default()
            })
            .collect();
        r.cpu = (0..cpus)
            .map(|i| crate::report::CpuReport {
                cpu: i as u32,
                apic_id: i as u32,
                busy_frac: if i == 3 { 0.9 } else { 0.1 },
                interrupts_taken: 2,
                ..Default::default()
            })
            .collect();
        r
    }

    #[test]
    fn a_large_kind_is_one_line_unless_full() {
        let r = report_with(SUMMARY_MAX_LINES + 1, 2 * SUMMARY_MAX_LINES + 1);
        let summary = render_report(&r);
        let nvme: Vec<&str> = summary.lines().filter(|l| l.starts_with("NVMe")).collect();
        assert_eq!(nvme.len(), 1, "{summary}");
        assert!(
            nvme[0].contains("9 drives") && nvme[0].contains("1000..1008"),
            "{}",
            nvme[0]
        );
        let cpus_line = summary
            .lines()
            .find(|l| l.starts_with("CPUs: 17"))
            .expect(&summary);
        assert!(
            cpus_line.contains("max 90.0") && cpus_line.contains("34 interrupts"),
            "{cpus_line}"
        );
        // The table keeps the busiest, CPU 3, among its SUMMARY_MAX_LINES rows.
        let rows: Vec<&str> = summary
            .lines()
            .skip_while(|l| !l.starts_with("cpu"))
            .skip(2)
            .take_while(|l| !l.starts_with('('))
            .collect();
        assert_eq!(rows.len(), SUMMARY_MAX_LINES, "{summary}");
        assert!(
            rows.iter().any(|l| l.trim_start().starts_with("3 ")),
            "{summary}"
        );

        let full = render_report_with(&r, Detail::Full);
        assert_eq!(
            full.lines().filter(|l| l.starts_with("NVMe nvme")).count(),
            9
        );
        assert!(!full.contains("CPUs: "));
        assert!(full.lines().any(|l| l.trim_start().starts_with("16 ")));
    }

    #[test]
    fn a_small_kind_keeps_its_lines() {
        let r = report_with(SUMMARY_MAX_LINES, 2 * SUMMARY_MAX_LINES);
        assert_eq!(render_report(&r), render_report_with(&r, Detail::Full));
    }

    #[test]
    fn refused_submissions_are_shown_only_when_there_are_some() {
        let mut r = report_with(2, 2);
        assert!(!render_report(&r).contains("found the queue full"));
        r.io.nvme[1].rejected_queue_full = 63;
        let text = render_report(&r);
        let line = text
            .lines()
            .find(|l| l.starts_with("NVMe nvme1"))
            .expect(&text);
        assert!(
            line.ends_with(
                "; 63 submissions found the queue full (jobs' iodepth above its entries)"
            ),
            "{line}"
        );
        // Summarised, the total says it on a line of its own.
        let mut r = report_with(SUMMARY_MAX_LINES + 1, 2);
        r.io.nvme_total.rejected_queue_full = 5;
        let text = render_report(&r);
        assert!(
            text.contains("\n  5 submissions found the queue full"),
            "{text}"
        );
    }

    #[test]
    fn span_merges_equal_values() {
        assert_eq!(span([1.0, 1.0004], 3), "1.000");
        assert_eq!(span([2.0, 1.0], 1), "1.0..2.0");
        assert_eq!(span([], 1), "-");
    }

    #[test]
    fn columns_align_right() {
        let mut t = Table::new(["a", "long"]);
        t.row(["123", "x"]);
        let out = t.render();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "  a  long");
        assert_eq!(lines[2], "123     x");
    }
}
