//! Configuration and cost tables of the local APIC.

use crate::ApicError;
use serde::{Deserialize, Serialize};
use sim_core::{Duration, Freq};

/// Clocks a local APIC needs to turn register values into time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LapicConfig {
    /// Clock of the APIC timer (the SDM's "bus clock"), MHz, before the divide
    /// configuration. Default 25 MHz. Assumption: on Skylake-SP and later Xeons the
    /// timer runs at the core crystal clock that CPUID leaf 0x15 reports, 25 MHz on
    /// those parts (Linux `native_calibrate_tsc` uses 25 MHz for Skylake-X). Older
    /// parts used the 100/133 MHz bus clock.
    pub timer_clock: Freq,
    /// TSC frequency, MHz, for TSC-deadline mode. Default 2000 MHz. Assumption: set it
    /// to the simulated CPU's nominal frequency; the TSC reads 0 at time 0.
    pub tsc: Freq,
}

impl Default for LapicConfig {
    fn default() -> Self {
        LapicConfig {
            timer_clock: Freq::from_mhz(25).expect("non-zero"),
            tsc: Freq::from_mhz(2000).expect("non-zero"),
        }
    }
}

impl LapicConfig {
    /// Checks the configuration: 0 MHz (which `Freq` deserialization lets through) and
    /// clocks too fast to be real, which usually means a unit mistake (Hz for MHz).
    pub fn validate(&self) -> Result<(), ApicError> {
        for (field, f) in [("timer_clock", self.timer_clock), ("tsc", self.tsc)] {
            if f.mhz() == 0 || f.mhz() > 100_000 {
                return Err(ApicError::InvalidConfig {
                    field,
                    value: format!("{} MHz", f.mhz()),
                    allowed: "1..=100000 MHz",
                });
            }
        }
        Ok(())
    }
}

/// Costs of local APIC operations, charged by the kernel model (the APIC itself only
/// changes state). CPU-side costs are in core cycles, fabric latencies in time.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LapicCosts {
    /// WRMSR to ICR (x2APIC), core cycles. Default 150. Assumption: no published
    /// bare-metal figure (COST-SOURCES.md lists it as missing); DESIGN.md section 3
    /// gives "on the order of 100+ cycles".
    pub wrmsr_icr_cycles: u32,
    /// WRMSR to EOI, core cycles. Default 100. Assumption, same basis as above.
    pub wrmsr_eoi_cycles: u32,
    /// Any other x2APIC RDMSR/WRMSR (TPR, SELF_IPI, timer registers), core cycles.
    /// Default 100. Assumption, same basis as above.
    pub msr_access_cycles: u32,
    /// From the ICR write on the sender until the vector is in the target's IRR.
    /// Default 1 us. Assumption: DESIGN.md section 3 gives 0.5-1.5 us; the published
    /// figure (4,338 cycles send-to-handler, in a VM, COST-SOURCES.md) includes the
    /// receiver's interrupt entry and VM exits, so it is an upper bound.
    pub ipi_latency_ns: f64,
}

impl Default for LapicCosts {
    fn default() -> Self {
        LapicCosts {
            wrmsr_icr_cycles: 150,
            wrmsr_eoi_cycles: 100,
            msr_access_cycles: 100,
            ipi_latency_ns: 1000.0,
        }
    }
}

impl LapicCosts {
    /// Core cycles of one RDMSR/WRMSR to `msr`.
    pub fn msr_cycles(&self, msr: u32) -> u32 {
        match msr {
            crate::msr::MSR_ICR => self.wrmsr_icr_cycles,
            crate::msr::MSR_EOI => self.wrmsr_eoi_cycles,
            _ => self.msr_access_cycles,
        }
    }
    /// From the ICR write until the vector is in the target's IRR.
    pub fn ipi_latency(&self) -> Duration {
        Duration::from_ns_f64(self.ipi_latency_ns)
    }
    /// Time of one access to `msr` on a core running at `cpu`.
    pub fn msr_time(&self, msr: u32, cpu: Freq) -> Duration {
        cpu.cycles(self.msr_cycles(msr) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msr::{MSR_EOI, MSR_ICR, MSR_TPR};

    #[test]
    fn clocks_from_1_to_100000_mhz_are_accepted() {
        let with = |timer, tsc| LapicConfig {
            timer_clock: Freq::from_mhz(timer).unwrap(),
            tsc: Freq::from_mhz(tsc).unwrap(),
        };
        assert!(with(1, 100_000).validate().is_ok());
        assert!(with(100_000, 1).validate().is_ok());
        let err = with(100_001, 2000).validate().unwrap_err();
        assert!(
            matches!(
                err,
                ApicError::InvalidConfig {
                    field: "timer_clock",
                    ..
                }
            ),
            "{err:?}"
        );
        let err = with(25, 100_001).validate().unwrap_err();
        assert!(
            matches!(err, ApicError::InvalidConfig { field: "tsc", .. }),
            "{err:?}"
        );
    }

    #[test]
    fn each_msr_is_charged_its_own_field() {
        let costs = LapicCosts {
            wrmsr_icr_cycles: 300,
            wrmsr_eoi_cycles: 70,
            msr_access_cycles: 11,
            ipi_latency_ns: 812.5,
        };
        assert_eq!(costs.msr_cycles(MSR_ICR), 300);
        assert_eq!(costs.msr_cycles(MSR_EOI), 70);
        assert_eq!(costs.msr_cycles(MSR_TPR), 11);
        let cpu = Freq::from_mhz(2000).unwrap();
        assert_eq!(costs.msr_time(MSR_ICR, cpu), Duration::from_ns(150));
        assert_eq!(costs.msr_time(MSR_EOI, cpu), Duration::from_ns(35));
        assert_eq!(costs.ipi_latency(), Duration::from_ps(812_500));
    }
}
