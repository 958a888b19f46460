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

/// The human summary of one run.
pub fn render_report(r: &Report) -> String {
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
    for d in &r.io.nvme {
        let _ = writeln!(
            s,
            "NVMe {}: {:.0} IOPS, {:.3} interrupts/IO, latency (us) p50 {:.1} p99 {:.1} p99.9 {:.1}",
            d.name, d.iops, d.interrupts_per_io, d.latency_us.p50, d.latency_us.p99, d.latency_us.p999
        );
    }
    for v in &r.io.vmd {
        let _ = writeln!(
            s,
            "VMD {} ({}): {} vectors used, {} child handler calls, {} found nothing",
            v.name, v.mode, v.vectors_used, v.child_handler_calls, v.empty_child_handler_calls
        );
    }
    for q in &r.io.nics {
        if q.rx_packets == 0 && q.tx_sent > 0 {
            let _ = writeln!(
                s,
                "NIC {} q{} (cpu {}): {} packets sent, {} interrupts",
                q.name, q.queue, q.cpu, q.tx_sent, q.interrupts
            );
            continue;
        }
        if q.rx_packets == 0 && q.interrupts == 0 {
            continue;
        }
        let _ = writeln!(
            s,
            "NIC {} q{} (cpu {}): {} packets, {} dropped (ring full), {:.3} interrupts/packet, latency (us) p50 {:.1} p99 {:.1}",
            q.name, q.queue, q.cpu, q.rx_packets, q.packets_dropped, q.interrupts_per_packet, q.latency_us.p50, q.latency_us.p99
        );
    }
    if let Some(x) = &r.cross_calls {
        for l in &x.shootdowns {
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
    for p in &r.ioapic {
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
    if let Some(m) = r.smmu.as_ref().filter(|m| m.cmdq.consumed > 0) {
        let c = &m.call_latency_ns;
        let _ = writeln!(
            s,
            "SMMU ({}): {} CMD_SYNCs, {} commands; issue_cmdlist (ns) p50 {:.0} p99 {:.0}",
            m.poll_mode, m.cmdq.sync, m.cmdq.consumed, c.p50, c.p99
        );
        for l in &m.loads {
            let _ = writeln!(
                s,
                "SMMU load {} ({} CPUs): {} calls, latency (ns) p50 {:.0} p99 {:.0}",
                l.name, l.cpus, l.completed, l.latency_ns.p50, l.latency_ns.p99
            );
        }
    }
    for t in &r.transmit {
        let _ = writeln!(
            s,
            "transmit {} ({} threads, {} B datagrams): {:.2} Gbit/s, {} packets posted",
            t.name, t.threads, t.datagram_bytes, t.tx_gbps, t.packets_posted
        );
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
    for c in &r.cpu {
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
    let _ = writeln!(s, "({MODEL_NOTE})");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
