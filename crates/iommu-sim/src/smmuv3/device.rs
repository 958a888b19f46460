//! One SMMU: the Command queue and the translation side together, so that a consumed
//! invalidation reaches the caches it names.

use super::cmdq::{CmdqConfig, CommandQueue, ConsumeEffect, ConsumeOutcome, ConsumeStart};
use super::error::SmmuError;
use super::regs::{SmmuFeatures, SyncPollMode};
use super::translate::{DmaRequest, TranslateConfig, TranslateOutcome, Translator};
use serde::{Deserialize, Serialize};
use sim_core::{Duration, SimTime};

/// Everything that configures one SMMU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SmmuConfig {
    /// SMMU_IDR0 features (MSI, COHACC, SEV).
    pub features: SmmuFeatures,
    /// Firmware's coherency attribute (IORT / `dma-coherent`), which Linux prefers
    /// over SMMU_IDR0.COHACC. `None`: same as COHACC.
    pub firmware_coherent: Option<bool>,
    /// The inverse of Linux's `arm_smmu_v3.disable_msipolling` module parameter.
    /// Default true (the parameter defaults to off).
    pub msi_polling_enabled: bool,
    pub cmdq: CmdqConfig,
    pub translate: TranslateConfig,
}

impl Default for SmmuConfig {
    fn default() -> Self {
        SmmuConfig {
            features: SmmuFeatures::default(),
            firmware_coherent: None,
            msi_polling_enabled: true,
            cmdq: CmdqConfig::default(),
            translate: TranslateConfig::default(),
        }
    }
}

impl SmmuConfig {
    pub fn validate(&self) -> Result<(), SmmuError> {
        self.cmdq.validate()?;
        self.translate.validate()
    }

    /// Whether Linux treats this SMMU as coherent.
    pub fn coherent(&self) -> bool {
        self.firmware_coherent.unwrap_or(self.features.cohacc)
    }

    /// How Linux will wait for CMD_SYNC on this SMMU.
    pub fn sync_poll_mode(&self) -> SyncPollMode {
        SyncPollMode::linux(self.features, self.coherent(), self.msi_polling_enabled)
    }
}

/// One SMMU. The engine drives the Command queue through [`Smmu::next_consume`] and
/// [`Smmu::complete_consume`], which also applies consumed invalidations to the
/// translation caches; device transactions go through [`Smmu::translate`].
#[derive(Clone, Debug)]
pub struct Smmu {
    pub cmdq: CommandQueue,
    pub translator: Translator,
    poll_mode: SyncPollMode,
}

impl Smmu {
    pub fn new(config: &SmmuConfig) -> Result<Smmu, SmmuError> {
        config.validate()?;
        Ok(Smmu {
            cmdq: CommandQueue::new(&config.cmdq, config.features)?,
            translator: Translator::new(config.translate.clone())?,
            poll_mode: config.sync_poll_mode(),
        })
    }

    /// How Linux waits for CMD_SYNC here (fixed at probe, like the driver's options).
    pub fn sync_poll_mode(&self) -> SyncPollMode {
        self.poll_mode
    }

    /// See [`CommandQueue::next_consume`].
    pub fn next_consume(&mut self, now: SimTime) -> Option<ConsumeStart> {
        self.cmdq.next_consume(now)
    }

    /// See [`CommandQueue::next_consume_with_fetch`].
    pub fn next_consume_with_fetch(
        &mut self,
        now: SimTime,
        memory_path: Duration,
    ) -> Option<ConsumeStart> {
        self.cmdq.next_consume_with_fetch(now, memory_path)
    }

    /// Completes the command in flight and applies an invalidation to the caches.
    pub fn complete_consume(&mut self, now: SimTime) -> Result<ConsumeOutcome, SmmuError> {
        let out = self.cmdq.complete_consume(now)?;
        if let ConsumeEffect::Invalidate(inv) = &out.effect {
            self.translator.apply(inv);
        }
        Ok(out)
    }

    /// See [`Translator::translate`].
    pub fn translate(&mut self, now: SimTime, req: DmaRequest) -> TranslateOutcome {
        self.translator.translate(now, req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smmuv3::{Command, Perm, QueuePtr, Ste, SyncSignal, TranslateResult};

    #[test]
    fn config_validation_covers_the_queue_and_the_translation_side() {
        assert!(SmmuConfig::default().validate().is_ok());
        let mut bad_queue = SmmuConfig::default();
        bad_queue.cmdq.log2_entries = 30;
        assert!(matches!(
            bad_queue.validate(),
            Err(SmmuError::InvalidQueueSize { .. })
        ));
        assert!(Smmu::new(&bad_queue).is_err());
        let mut bad_walk = SmmuConfig::default();
        bad_walk.translate.stream_table_log2 = 25;
        assert!(bad_walk.validate().is_err());
        assert!(Smmu::new(&bad_walk).is_err());
    }

    #[test]
    fn consumed_tlbi_reaches_the_iotlb_and_config_serde_defaults() {
        let mut smmu = Smmu::new(&SmmuConfig::default()).unwrap();
        assert_eq!(smmu.sync_poll_mode(), SyncPollMode::MsiWrite);
        let t = &mut smmu.translator;
        t.add_context(1, 9);
        t.map(1, 0x4000, 0x10_0000, Perm::RW).unwrap();
        t.set_ste(2, Ste::stage1(1)).unwrap();
        let req = DmaRequest {
            stream_id: 2,
            iova: 0x4000,
            write: true,
        };
        let _ = smmu.translate(SimTime::ZERO, req);
        smmu.translator.unmap(1, 0x4000).unwrap();
        assert!(smmu.translator.iotlb_contains(9, 0x4000));
        smmu.cmdq
            .write_entry(QueuePtr(0), Command::tlbi_nh_va(9, 0x4000).encode());
        let sync = Command::Sync {
            cs: SyncSignal::Sev,
            msi_addr: 0,
            msi_data: 0,
        };
        smmu.cmdq.write_entry(QueuePtr(1), sync.encode());
        smmu.cmdq.write_prod(SimTime::ZERO, 2).unwrap();
        let mut now = SimTime::ZERO;
        // The first command fetches the line: the memory path is added to it.
        let fetch_path = Duration::from_ns(500);
        let first = smmu.next_consume_with_fetch(now, fetch_path).unwrap();
        assert!(first.done_at >= now + fetch_path);
        now = first.done_at;
        let _ = smmu.complete_consume(now).unwrap();
        while let Some(s) = smmu.next_consume(now) {
            now = s.done_at;
            let _ = smmu.complete_consume(now).unwrap();
        }
        assert!(!smmu.translator.iotlb_contains(9, 0x4000));
        assert!(matches!(
            smmu.translate(now, req).result,
            TranslateResult::Fault { .. }
        ));

        let cfg: SmmuConfig = serde_json::from_str(r#"{"msi_polling_enabled": false}"#).unwrap();
        assert_eq!(cfg.sync_poll_mode(), SyncPollMode::ConsPoll { wfe: true });
        let cfg: SmmuConfig = serde_json::from_str(r#"{"firmware_coherent": false}"#).unwrap();
        assert_eq!(cfg.sync_poll_mode(), SyncPollMode::ConsPoll { wfe: true });
        assert!(serde_json::from_str::<SmmuConfig>(r#"{"msipoll": true}"#).is_err());
    }
}
