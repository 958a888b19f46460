//! Linux's SMMUv3 command-queue host algorithms, written against [`SmmuCpuPort`].
//!
//! Source: Linux `drivers/iommu/arm/arm-smmu-v3/arm-smmu-v3.c` (v6.x), followed step by
//! step; every shared-memory access and every register access is one awaited operation
//! so a driver may let other CPUs and the SMMU act between any two.
//!
//! **Insertion** ([`issue_cmdlist`], `arm_smmu_cmdq_issue_cmdlist`): many CPUs share
//! one queue without a lock on the fast path.
//! 1. Reserve slots: read the shared 64-bit `llq` word (prod in the low half, cons in
//!    the high half), check for space, and compare-and-swap prod forward by the number
//!    of commands, setting the OWNED flag (bit 31 of prod). Whoever found OWNED clear is
//!    the *owner* of everything gathered until it clears the flag again.
//! 2. Write the commands (and a CMD_SYNC) into the reserved slots; with a CMD_SYNC,
//!    take the cmdq lock shared so the queue cannot wrap twice unseen.
//! 3. Mark the slots valid in a bitmap whose sense flips every lap.
//! 4. The owner waits for the previous owner (`owner_prod`), clears OWNED (fetch-and-
//!    not, learning how far others have reserved), waits until every gathered slot is
//!    valid, writes SMMU_CMDQ_PROD once for all of them, and hands over `owner_prod`.
//! 5. With a CMD_SYNC, wait for it ([`SyncPollMode`]): either poll the first word of
//!    the CMD_SYNC's own slot, which the SMMU's completion MSI overwrites with 0, or
//!    re-read SMMU_CMDQ_CONS until it passes the CMD_SYNC (WFE between reads if the
//!    SMMU sends SEV, else spin ten times and then `udelay` 1, 2, 4... us). The last
//!    waiter out publishes the CONS it saw into `llq`.
//!
//! A full queue makes the CPU wait in `arm_smmu_cmdq_poll_until_not_full`: try the
//! lock exclusively and refresh `llq.cons` from the register, or else poll `llq` until
//! someone else does. No command is ever dropped.
//!
//! Waiting: `atomic_cond_read_relaxed` / `smp_cond_load_relaxed` on arm64 load the
//! word and, while the condition fails, arm the exclusive monitor on it and WFE until
//! the line is written by someone else (or an event arrives): [`SmmuCpuOp::WaitForChange`].
//!
//! **Unmap** ([`dma_unmap`]): strict-mode `iommu_unmap` clears the PTEs, then
//! `arm_smmu_tlb_inv_range_domain` issues one leaf CMD_TLBI_NH_VA per page (no range
//! invalidation) through a command batch of at most 64, and submits the batch with a
//! CMD_SYNC: one TLBI and one CMD_SYNC for a one-page buffer.
//!
//! Interrupts: Linux masks local interrupts for the whole call, the CMD_SYNC wait
//! included, and unmasks them only while it waits for space in a full queue; the
//! algorithm says so with [`SmmuCpuOp::LocalIrqSave`] / [`SmmuCpuOp::LocalIrqRestore`].
//!
//! Not modelled: ATS invalidation (`arm_smmu_atc_inv_domain`), range invalidation
//! (SMMUv3.2 RIL), the secondary command queues of CMDQV/ECMDQ, memory barriers as
//! costs (their ordering holds because effects apply in completion order).

pub mod arm_msi;

pub use arm_msi::{gic_handle_irq, route_arm_msi, ArmMsiDrop, ArmMsiRoute, GicCpuOp, GicCpuPort};

use crate::engine::{Call, Port};
use iommu_sim::smmuv3::{Command, QueueGeometry, QueuePtr, SyncPollMode, SyncSignal};

/// A command queue the Linux driver would refuse.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SmmuHostError {
    /// A field of the configuration is out of range.
    #[error("smmu field `{field}` = {value}: allowed {allowed}")]
    InvalidConfig {
        /// The field's path, e.g. `smmu.cmdq.log2_entries`.
        field: &'static str,
        /// The value given.
        value: f64,
        /// What the field accepts.
        allowed: &'static str,
    },
}

/// Bit 31 of the shadow prod: the head of the queue is owned (Linux
/// `CMDQ_PROD_OWNED_FLAG`, the queue overflow bit reused).
pub const OWNED_FLAG: u32 = 1 << 31;
/// The exclusive value of the cmdq lock (`INT_MIN`).
pub const LOCK_EXCLUSIVE: u32 = 0x8000_0000;
/// Commands per batch before a batch is issued without a sync (`CMDQ_BATCH_ENTRIES`,
/// `BITS_PER_LONG` on arm64).
pub const BATCH_ENTRIES: usize = 64;
/// Poll iterations that only `cpu_relax()` before backing off (`ARM_SMMU_POLL_SPIN_COUNT`).
pub const POLL_SPIN_COUNT: u32 = 10;
/// Give up waiting after this long (`ARM_SMMU_POLL_TIMEOUT_US`, 1 s).
pub const POLL_TIMEOUT_NS: u64 = 1_000_000_000;
/// Bits per valid-map word (`BITS_PER_LONG`).
pub const VALID_MAP_BITS: u32 = 64;
/// Smallest queue Linux accepts: it must hold more than one batch (2^7 entries).
pub const MIN_LINUX_QUEUE_LOG2: u8 = 7;

/// How the command-queue lock's exclusive holder lets go, which decides whether
/// CPUs waiting for space can starve the CPUs waiting for the shared lock.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum CmdqLock {
    /// Linux v5.5 (commit 587e6c10a7ce) to 2025: the exclusive unlock is
    /// `atomic_set_release(&lock, 0)`, discarding the increments of shared waiters,
    /// who retry with `cmpxchg` once they see the lock non-negative. A CPU that keeps
    /// retaking the exclusive lock while it waits for space can starve them
    /// indefinitely (soft lockups on a nearly full queue).
    #[serde(rename = "set-release")]
    SetRelease,
    /// Linux commit df180b1a4cc5 (2026, "Improve CMDQ lock fairness and
    /// efficiency"): the exclusive unlock clears only the sign bit
    /// (`atomic_fetch_andnot_release(INT_MIN, &lock)`), so the waiters' increments
    /// survive as a shared hold that blocks the next exclusive trylock, and a waiter
    /// proceeds as soon as the sign bit is clear, without a `cmpxchg`.
    #[default]
    #[serde(rename = "andnot-release")]
    AndNotRelease,
}

impl CmdqLock {
    /// The scenario spelling.
    pub fn label(self) -> &'static str {
        match self {
            CmdqLock::SetRelease => "set-release",
            CmdqLock::AndNotRelease => "andnot-release",
        }
    }
}

/// A shared host word the algorithm touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostWord {
    /// `cmdq->q.llq.val`: prod (low 32 bits, with OWNED) and cons (high 32 bits).
    Llq,
    /// `cmdq->owner_prod`.
    OwnerProd,
    /// `cmdq->lock` (an `atomic_t`, kept as its 32-bit pattern).
    Lock,
    /// Word `i` of `cmdq->valid_map`.
    ValidMap(u32),
    /// The first 32-bit word of queue slot `i` (what MSI polling reads).
    CmdqSlot(u32),
}

/// One operation of the SMMU host algorithms. Every value travels as a `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SmmuCpuOp {
    /// `READ_ONCE` of a word; yields its value.
    Load(HostWord),
    /// A plain or release store of a whole word.
    Store {
        /// The word accessed.
        word: HostWord,
        /// The value stored.
        value: u64,
    },
    /// `WRITE_ONCE(cmdq->q.llq.cons, cons)`: a 32-bit store to the high half of llq.
    StoreLlqCons(u32),
    /// `cmpxchg`: yields the previous value; stores `new` if it equalled `old`.
    Cas {
        /// The word accessed.
        word: HostWord,
        /// The value expected.
        old: u64,
        /// The value stored if the word held `old`.
        new: u64,
    },
    /// `atomic_fetch_add` on a 32-bit word (the lock); yields the previous value.
    FetchAdd {
        /// The word accessed.
        word: HostWord,
        /// Added, wrapping, to the 32-bit value.
        delta: i32,
    },
    /// `atomic_long_xor`; yields the previous value.
    FetchXor {
        /// The word accessed.
        word: HostWord,
        /// Bits flipped.
        mask: u64,
    },
    /// `atomic_fetch_andnot_release` on the lock; yields its previous value.
    FetchAndNotLock {
        /// Bits cleared (the sign bit, [`LOCK_EXCLUSIVE`]).
        mask: u32,
    },
    /// `atomic_fetch_andnot` on the prod half of llq; yields the previous llq.
    FetchAndNotProd {
        /// Bits cleared in prod (the OWNED flag).
        mask: u32,
    },
    /// Store of one 16-byte command into queue slot `index` (index and wrap).
    WriteEntry {
        /// Raw queue pointer of the slot (index and wrap bit).
        index: u32,
        /// The command's two 64-bit words.
        cmd: [u64; 2],
    },
    /// `writel_relaxed(prod, SMMU_CMDQ_PROD)`: a posted MMIO write.
    WriteProd(u32),
    /// `readl(SMMU_CMDQ_CONS)`: an MMIO read; yields the register.
    ReadCons,
    /// arm64 `__cmpwait_relaxed(word, seen)`: clear the event register, load-exclusive
    /// the word, and if it still equals `seen`, WFE until the line is written by another
    /// agent, an event (SEV) arrives, or the event stream ticks. Yields nothing.
    WaitForChange {
        /// The word waited on.
        word: HostWord,
        /// The value last loaded; the wait ends at once if the word differs.
        seen: u64,
    },
    /// `wfe()`: returns at once if the event register is set, else sleeps until SEV or
    /// the event stream.
    Wfe,
    /// `cpu_relax()`.
    CpuRelax,
    /// `udelay(us)`.
    Udelay(u32),
    /// `ktime_get()` in nanoseconds.
    ReadClockNs,
    /// io-pgtable clearing the PTEs of `pages` pages from `iova` in ASID `asid`'s table.
    ClearPtes {
        /// Address space of the mapping.
        asid: u16,
        /// First I/O virtual address unmapped.
        iova: u64,
        /// Number of 4 KiB pages.
        pages: u32,
    },
    /// Not an instruction: `arm_smmu_cmdq_poll_until_sync` returned. Costs nothing;
    /// the host measures the poll window (from this CPU's PROD write) with it.
    SyncPolled,
    /// Not an instruction: `arm_smmu_cmdq_issue_cmdlist` returned. Costs nothing;
    /// the host measures the call (from its first `local_irq_save`) with it.
    CmdlistReturned,
    /// `local_irq_save()`: mask interrupts on this CPU (nests).
    LocalIrqSave,
    /// `local_irq_restore()`: undo the matching save.
    LocalIrqRestore,
    /// An operation of the NIC driver that maps and unmaps through the SMMU.
    Tx(crate::kernel::nic_tx::TxOp),
}

/// The algorithm's handle on the CPU it runs on.
#[derive(Clone)]
pub struct SmmuCpuPort {
    port: Port<SmmuCpuOp, u64>,
}

impl SmmuCpuPort {
    /// Wraps the port the driver gave the algorithm.
    pub fn new(port: Port<SmmuCpuOp, u64>) -> Self {
        SmmuCpuPort { port }
    }
    fn op(&self, op: SmmuCpuOp) -> Call<SmmuCpuOp, u64> {
        self.port.call(op)
    }
    /// [`SmmuCpuOp::Load`]: yields the word's value.
    pub async fn load(&self, word: HostWord) -> u64 {
        self.op(SmmuCpuOp::Load(word)).await
    }
    /// [`SmmuCpuOp::Store`].
    pub async fn store(&self, word: HostWord, value: u64) {
        self.op(SmmuCpuOp::Store { word, value }).await;
    }
    /// [`SmmuCpuOp::StoreLlqCons`].
    pub async fn store_llq_cons(&self, cons: u32) {
        self.op(SmmuCpuOp::StoreLlqCons(cons)).await;
    }
    /// [`SmmuCpuOp::Cas`]: yields the previous value.
    pub async fn cas(&self, word: HostWord, old: u64, new: u64) -> u64 {
        self.op(SmmuCpuOp::Cas { word, old, new }).await
    }
    /// [`SmmuCpuOp::FetchAdd`]: yields the previous 32-bit value.
    pub async fn fetch_add(&self, word: HostWord, delta: i32) -> u32 {
        self.op(SmmuCpuOp::FetchAdd { word, delta }).await as u32
    }
    /// [`SmmuCpuOp::FetchXor`]: yields the previous value.
    pub async fn fetch_xor(&self, word: HostWord, mask: u64) -> u64 {
        self.op(SmmuCpuOp::FetchXor { word, mask }).await
    }
    /// [`SmmuCpuOp::FetchAndNotLock`]: yields the previous lock value.
    pub async fn fetch_andnot_lock(&self, mask: u32) -> u64 {
        self.op(SmmuCpuOp::FetchAndNotLock { mask }).await
    }
    /// [`SmmuCpuOp::FetchAndNotProd`]: yields the previous llq.
    pub async fn fetch_andnot_prod(&self, mask: u32) -> u64 {
        self.op(SmmuCpuOp::FetchAndNotProd { mask }).await
    }
    /// [`SmmuCpuOp::WriteEntry`] of `cmd` into the slot of `index`.
    pub async fn write_entry(&self, index: QueuePtr, cmd: [u64; 2]) {
        self.op(SmmuCpuOp::WriteEntry {
            index: index.0,
            cmd,
        })
        .await;
    }
    /// [`SmmuCpuOp::WriteProd`].
    pub async fn write_prod(&self, prod: u32) {
        self.op(SmmuCpuOp::WriteProd(prod)).await;
    }
    /// [`SmmuCpuOp::ReadCons`]: yields SMMU_CMDQ_CONS.
    pub async fn read_cons(&self) -> u32 {
        self.op(SmmuCpuOp::ReadCons).await as u32
    }
    /// [`SmmuCpuOp::WaitForChange`].
    pub async fn wait_for_change(&self, word: HostWord, seen: u64) {
        self.op(SmmuCpuOp::WaitForChange { word, seen }).await;
    }
    /// [`SmmuCpuOp::Wfe`].
    pub async fn wfe(&self) {
        self.op(SmmuCpuOp::Wfe).await;
    }
    /// [`SmmuCpuOp::CpuRelax`].
    pub async fn cpu_relax(&self) {
        self.op(SmmuCpuOp::CpuRelax).await;
    }
    /// [`SmmuCpuOp::Udelay`]: busy-waits `us` microseconds.
    pub async fn udelay(&self, us: u32) {
        self.op(SmmuCpuOp::Udelay(us)).await;
    }
    /// [`SmmuCpuOp::ReadClockNs`]: yields the time in ns.
    pub async fn read_clock_ns(&self) -> u64 {
        self.op(SmmuCpuOp::ReadClockNs).await
    }
    /// [`SmmuCpuOp::ClearPtes`].
    pub async fn clear_ptes(&self, asid: u16, iova: u64, pages: u32) {
        self.op(SmmuCpuOp::ClearPtes { asid, iova, pages }).await;
    }
    /// [`SmmuCpuOp::SyncPolled`].
    pub async fn sync_polled(&self) {
        self.op(SmmuCpuOp::SyncPolled).await;
    }
    /// [`SmmuCpuOp::CmdlistReturned`].
    pub async fn cmdlist_returned(&self) {
        self.op(SmmuCpuOp::CmdlistReturned).await;
    }
    /// [`SmmuCpuOp::LocalIrqSave`].
    pub async fn local_irq_save(&self) {
        self.op(SmmuCpuOp::LocalIrqSave).await;
    }
    /// [`SmmuCpuOp::LocalIrqRestore`].
    pub async fn local_irq_restore(&self) {
        self.op(SmmuCpuOp::LocalIrqRestore).await;
    }
    /// [`SmmuCpuOp::Tx`]: yields the operation's value.
    pub async fn tx(&self, op: crate::kernel::nic_tx::TxOp) -> u64 {
        self.op(SmmuCpuOp::Tx(op)).await
    }

    /// `smp_cond_load_relaxed(word, cond)` on arm64: load; while `cond` fails, wait
    /// for the word's line to change; yields the value that satisfied it.
    pub async fn cond_load(&self, word: HostWord, cond: impl Fn(u64) -> bool) -> u64 {
        loop {
            let v = self.load(word).await;
            if cond(v) {
                return v;
            }
            self.wait_for_change(word, v).await;
        }
    }
}

/// The 64-bit `llq` word: prod in bits \[31:0\], cons in bits \[63:32\].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Llq(pub u64);

impl Llq {
    /// The word holding `prod` and `cons`.
    pub fn new(prod: u32, cons: u32) -> Llq {
        Llq(prod as u64 | (cons as u64) << 32)
    }
    /// Prod (low 32 bits, OWNED flag included).
    pub fn prod(self) -> u32 {
        self.0 as u32
    }
    /// Cons (high 32 bits).
    pub fn cons(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// What the driver knows about its command queue (fixed at probe).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdqDriver {
    /// Size of the ring (log2 entries), which sets the index and wrap bits.
    pub geometry: QueueGeometry,
    /// Physical base of the ring (for the CMD_SYNC's MSI address).
    pub base: u64,
    /// How CMD_SYNC completion is awaited (`ARM_SMMU_OPT_MSIPOLL`, `FEAT_SEV`).
    pub poll: SyncPollMode,
    /// Which kernel's command-queue lock.
    pub lock: CmdqLock,
}

impl CmdqDriver {
    /// The driver for a queue of 2^geometry.log2() entries at `base`. Linux refuses a
    /// queue that cannot hold a batch of 64 plus a sync; so does this (its valid-map
    /// walk assumes whole 64-bit words).
    pub fn new(
        geometry: QueueGeometry,
        base: u64,
        poll: SyncPollMode,
    ) -> Result<CmdqDriver, SmmuHostError> {
        if geometry.log2() < MIN_LINUX_QUEUE_LOG2 {
            return Err(SmmuHostError::InvalidConfig {
                field: "smmu.cmdq.log2_entries",
                value: geometry.log2() as f64,
                allowed: "7..=19 (Linux needs room for a 64-command batch and a CMD_SYNC)",
            });
        }
        Ok(CmdqDriver {
            geometry,
            base,
            poll,
            lock: CmdqLock::default(),
        })
    }

    /// The same driver with `lock`'s command-queue lock.
    pub fn with_lock(self, lock: CmdqLock) -> CmdqDriver {
        CmdqDriver { lock, ..self }
    }

    /// The CMD_SYNC for slot `at` (`arm_smmu_cmdq_build_sync_cmd`): with MSI polling,
    /// SIG_IRQ with the MSI aimed at the slot itself and data 0; otherwise SIG_SEV.
    pub fn sync_command(&self, at: QueuePtr) -> Command {
        match self.poll {
            SyncPollMode::MsiWrite => Command::Sync {
                cs: SyncSignal::Irq,
                msi_addr: self.base + self.geometry.idx(at) as u64 * 16,
                msi_data: 0,
            },
            SyncPollMode::ConsPoll { .. } => Command::Sync {
                cs: SyncSignal::Sev,
                msi_addr: 0,
                msi_data: 0,
            },
        }
    }

    /// Number of valid-map words.
    pub fn valid_map_words(&self) -> u32 {
        self.geometry.entries().div_ceil(VALID_MAP_BITS)
    }
}

/// A wait that hit [`POLL_TIMEOUT_NS`] (Linux logs "CMD_SYNC timeout" / "CMDQ timeout"
/// and carries on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PollTimeout;

/// What one [`issue_cmdlist`] call saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IssueReport {
    /// This CPU published PROD for the gathered range.
    pub owner: bool,
    /// Waits that timed out (queue full or CMD_SYNC).
    pub timeouts: u32,
}

/// `struct arm_smmu_queue_poll` and `queue_poll()`.
struct QueuePoll {
    delay_us: u32,
    spin: u32,
    wfe: bool,
    deadline_ns: u64,
}

impl QueuePoll {
    async fn init(cpu: &SmmuCpuPort, wfe: bool) -> QueuePoll {
        let now = cpu.read_clock_ns().await;
        QueuePoll {
            delay_us: 1,
            spin: 0,
            wfe,
            deadline_ns: now + POLL_TIMEOUT_NS,
        }
    }

    async fn poll(&mut self, cpu: &SmmuCpuPort) -> Result<(), PollTimeout> {
        if cpu.read_clock_ns().await > self.deadline_ns {
            return Err(PollTimeout);
        }
        if self.wfe {
            cpu.wfe().await;
        } else {
            self.spin += 1;
            if self.spin < POLL_SPIN_COUNT {
                cpu.cpu_relax().await;
            } else {
                cpu.udelay(self.delay_us).await;
                self.delay_us = self.delay_us.saturating_mul(2);
                self.spin = 0;
            }
        }
        Ok(())
    }
}

fn wfe_allowed(poll: SyncPollMode) -> bool {
    matches!(poll, SyncPollMode::ConsPoll { wfe: true })
}

/// `arm_smmu_cmdq_shared_lock`.
async fn shared_lock(cpu: &SmmuCpuPort, lock: CmdqLock) {
    if (cpu.fetch_add(HostWord::Lock, 1).await as i32) >= 0 {
        return;
    }
    match lock {
        CmdqLock::SetRelease => loop {
            // The exclusive unlock threw our increment away: take it again.
            let v = cpu
                .cond_load(HostWord::Lock, |v| (v as u32 as i32) >= 0)
                .await;
            let seen = cpu
                .cas(HostWord::Lock, v, (v as u32).wrapping_add(1) as u64)
                .await;
            if seen == v {
                return;
            }
        },
        CmdqLock::AndNotRelease => {
            // Our increment survives the exclusive unlock: the lock is ours once
            // the sign bit clears.
            cpu.cond_load(HostWord::Lock, |v| (v as u32 as i32) >= 0)
                .await;
        }
    }
}

/// `arm_smmu_cmdq_exclusive_unlock_irqrestore`, without the interrupt restore.
async fn exclusive_unlock(cpu: &SmmuCpuPort, lock: CmdqLock) {
    match lock {
        CmdqLock::SetRelease => cpu.store(HostWord::Lock, 0).await,
        CmdqLock::AndNotRelease => {
            cpu.fetch_andnot_lock(LOCK_EXCLUSIVE).await;
        }
    }
}

/// `arm_smmu_cmdq_shared_tryunlock`: fails if this CPU looks like the last holder.
async fn shared_tryunlock(cpu: &SmmuCpuPort) -> bool {
    if cpu.load(HostWord::Lock).await as u32 == 1 {
        return false;
    }
    cpu.fetch_add(HostWord::Lock, -1).await;
    true
}

/// `arm_smmu_cmdq_poll_until_not_full`: returns a fresh llq.
async fn poll_until_not_full(
    cpu: &SmmuCpuPort,
    drv: &CmdqDriver,
) -> (Llq, Result<(), PollTimeout>) {
    let g = drv.geometry;
    if cpu.cas(HostWord::Lock, 0, LOCK_EXCLUSIVE as u64).await == 0 {
        let cons = cpu.read_cons().await;
        cpu.store_llq_cons(cons).await;
        exclusive_unlock(cpu, drv.lock).await;
        return (Llq(cpu.load(HostWord::Llq).await), Ok(()));
    }
    let mut qp = QueuePoll::init(cpu, wfe_allowed(drv.poll)).await;
    loop {
        let llq = Llq(cpu.load(HostWord::Llq).await);
        if !g.is_full(QueuePtr(llq.prod()), QueuePtr(llq.cons())) {
            return (llq, Ok(()));
        }
        if let Err(e) = qp.poll(cpu).await {
            return (llq, Err(e));
        }
    }
}

/// The (word, mask, wrap) chunks of `[sprod, eprod)` in the valid map, as
/// `__arm_smmu_cmdq_poll_set_valid_map` walks them.
pub fn valid_map_chunks(
    g: QueueGeometry,
    sprod: QueuePtr,
    eprod: QueuePtr,
) -> Vec<(u32, u64, bool)> {
    let (s, e) = (g.clean(sprod), g.clean(eprod));
    let (ewidx, ebidx) = (g.idx(e) / VALID_MAP_BITS, g.idx(e) % VALID_MAP_BITS);
    let mut p = s;
    let mut out = Vec::new();
    while p != e {
        let (swidx, sbidx) = (g.idx(p) / VALID_MAP_BITS, g.idx(p) % VALID_MAP_BITS);
        let limit = if swidx == ewidx && sbidx < ebidx {
            ebidx
        } else {
            VALID_MAP_BITS
        };
        let upper = if limit == 64 {
            u64::MAX
        } else {
            (1u64 << limit) - 1
        };
        let mask = upper & !((1u64 << sbidx) - 1);
        out.push((swidx, mask, g.wrap(p)));
        p = g.inc(p, limit - sbidx);
    }
    out
}

/// `arm_smmu_cmdq_set_valid_map`: flips the bits of `[sprod, eprod)`.
async fn set_valid_map(cpu: &SmmuCpuPort, g: QueueGeometry, sprod: QueuePtr, eprod: QueuePtr) {
    for (w, mask, _) in valid_map_chunks(g, sprod, eprod) {
        cpu.fetch_xor(HostWord::ValidMap(w), mask).await;
    }
}

/// `arm_smmu_cmdq_poll_valid_map`: waits until every slot of `[sprod, eprod)` is valid
/// for its lap (bits set on even laps, clear on odd ones).
async fn poll_valid_map(cpu: &SmmuCpuPort, g: QueueGeometry, sprod: QueuePtr, eprod: QueuePtr) {
    for (w, mask, wrap) in valid_map_chunks(g, sprod, eprod) {
        let want = if wrap { 0 } else { mask };
        cpu.cond_load(HostWord::ValidMap(w), move |v| v & mask == want)
            .await;
    }
}

/// `arm_smmu_cmdq_poll_until_sync`: returns the CONS value seen (to publish).
async fn poll_until_sync(
    cpu: &SmmuCpuPort,
    drv: &CmdqDriver,
    sync_at: QueuePtr,
) -> (u32, Result<(), PollTimeout>) {
    let g = drv.geometry;
    match drv.poll {
        SyncPollMode::MsiWrite => {
            // __arm_smmu_cmdq_poll_until_msi: the MSI does not send an event, so
            // queue_poll spins (qp.wfe = false) between monitor waits.
            let word = HostWord::CmdqSlot(g.idx(sync_at));
            let mut qp = QueuePoll::init(cpu, false).await;
            loop {
                let v = cpu.load(word).await as u32;
                if v == 0 {
                    return (g.inc(sync_at, 1).0, Ok(()));
                }
                if let Err(e) = qp.poll(cpu).await {
                    return (sync_at.0, Err(e));
                }
                cpu.wait_for_change(word, v as u64).await;
            }
        }
        SyncPollMode::ConsPoll { wfe } => {
            // __arm_smmu_cmdq_poll_until_consumed.
            let mut qp = QueuePoll::init(cpu, wfe).await;
            let mut cons = Llq(cpu.load(HostWord::Llq).await).cons();
            loop {
                if g.consumed(QueuePtr(cons), sync_at) {
                    return (cons, Ok(()));
                }
                let r = qp.poll(cpu).await;
                cons = cpu.read_cons().await;
                if let Err(e) = r {
                    return (cons, Err(e));
                }
            }
        }
    }
}

/// `arm_smmu_cmdq_issue_cmdlist`: inserts `cmds` (and a CMD_SYNC if `sync`) as one
/// contiguous run of the queue and, with a sync, waits for it to complete.
pub async fn issue_cmdlist(
    cpu: &SmmuCpuPort,
    drv: &CmdqDriver,
    cmds: &[Command],
    sync: bool,
) -> IssueReport {
    let g = drv.geometry;
    let n = cmds.len() as u32;
    let need = n + sync as u32;
    let mut report = IssueReport::default();

    // 1. Reserve, with interrupts masked until the end (they are unmasked only while
    //    waiting for space).
    cpu.local_irq_save().await;
    let mut llq = Llq(cpu.load(HostWord::Llq).await);
    let head = loop {
        while !g.has_space(QueuePtr(llq.prod()), QueuePtr(llq.cons()), need) {
            cpu.local_irq_restore().await;
            let (fresh, r) = poll_until_not_full(cpu, drv).await;
            cpu.local_irq_save().await;
            llq = fresh;
            report.timeouts += r.is_err() as u32;
        }
        let head_prod = g.inc(QueuePtr(llq.prod()), need).0 | OWNED_FLAG;
        let head = Llq::new(head_prod, llq.cons());
        let seen = cpu.cas(HostWord::Llq, llq.0, head.0).await;
        if seen == llq.0 {
            break head;
        }
        llq = Llq(seen);
    };
    report.owner = llq.prod() & OWNED_FLAG == 0;
    let start = QueuePtr(llq.prod() & !OWNED_FLAG);
    let end = QueuePtr(head.prod() & !OWNED_FLAG);

    // 2. Write the commands, then the CMD_SYNC, and hold the lock shared.
    for (i, c) in cmds.iter().enumerate() {
        cpu.write_entry(g.inc(start, i as u32), c.encode()).await;
    }
    let sync_at = g.inc(start, n);
    if sync {
        cpu.write_entry(sync_at, drv.sync_command(sync_at).encode())
            .await;
        shared_lock(cpu, drv.lock).await;
    }

    // 3. Publish the slots in the valid map.
    set_valid_map(cpu, g, start, end).await;

    // 4. The owner advances the hardware PROD for everything gathered.
    if report.owner {
        cpu.cond_load(HostWord::OwnerProd, |v| v as u32 == start.0)
            .await;
        let prod = Llq(cpu.fetch_andnot_prod(OWNED_FLAG).await).prod() & !OWNED_FLAG;
        poll_valid_map(cpu, g, start, QueuePtr(prod)).await;
        cpu.write_prod(prod).await;
        cpu.store(HostWord::OwnerProd, prod as u64).await;
    }

    // 5. Wait for our CMD_SYNC; the last waiter publishes CONS.
    if sync {
        let (cons, r) = poll_until_sync(cpu, drv, sync_at).await;
        cpu.sync_polled().await;
        report.timeouts += r.is_err() as u32;
        if !shared_tryunlock(cpu).await {
            cpu.store_llq_cons(cons).await;
            cpu.fetch_add(HostWord::Lock, -1).await;
        }
    }
    cpu.local_irq_restore().await;
    cpu.cmdlist_returned().await;
    report
}

/// `arm_smmu_cmdq_issue_cmdlist(.., NULL, 0, true)`: a CMD_SYNC alone.
pub async fn issue_sync(cpu: &SmmuCpuPort, drv: &CmdqDriver) -> IssueReport {
    issue_cmdlist(cpu, drv, &[], true).await
}

/// `arm_smmu_tlb_inv_range_asid` without range invalidation: one leaf CMD_TLBI_NH_VA
/// per 4 KB page, gathered in batches of [`BATCH_ENTRIES`] (a full batch is issued
/// without a sync), the last batch submitted with a CMD_SYNC.
pub async fn tlb_inv_range(
    cpu: &SmmuCpuPort,
    drv: &CmdqDriver,
    asid: u16,
    iova: u64,
    pages: u32,
) -> IssueReport {
    let mut batch: Vec<Command> = Vec::with_capacity(BATCH_ENTRIES);
    let mut report = IssueReport::default();
    for p in 0..pages as u64 {
        if batch.len() == BATCH_ENTRIES {
            let r = issue_cmdlist(cpu, drv, &batch, false).await;
            report.timeouts += r.timeouts;
            batch.clear();
        }
        batch.push(Command::tlbi_nh_va(asid, iova + (p << 12)));
    }
    let r = issue_cmdlist(cpu, drv, &batch, true).await;
    report.owner = r.owner;
    report.timeouts += r.timeouts;
    report
}

/// A strict-mode DMA unmap of one buffer of `pages` pages: clear the PTEs, then
/// invalidate the IOTLB and wait for the CMD_SYNC (`iommu_unmap` ->
/// `arm_smmu_iotlb_sync` -> `arm_smmu_tlb_inv_range_domain`).
pub async fn dma_unmap(
    cpu: &SmmuCpuPort,
    drv: &CmdqDriver,
    asid: u16,
    iova: u64,
    pages: u32,
) -> IssueReport {
    cpu.clear_ptes(asid, iova, pages).await;
    tlb_inv_range(cpu, drv, asid, iova, pages).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Coroutine, Step};

    fn drv(poll: SyncPollMode) -> CmdqDriver {
        CmdqDriver::new(QueueGeometry::new(7).unwrap(), 0x8000_0000, poll).unwrap()
    }

    #[test]
    fn valid_map_chunks_split_at_words_and_wrap() {
        let g = QueueGeometry::new(7).unwrap();
        // 3 slots inside word 0.
        assert_eq!(
            valid_map_chunks(g, QueuePtr(5), QueuePtr(8)),
            vec![(0, 0b1110_0000, false)]
        );
        // Crossing from word 1 (lap 0) over the wrap into word 0 (lap 1).
        let s = g.ptr(126, false);
        let e = g.ptr(2, true);
        assert_eq!(
            valid_map_chunks(g, s, e),
            vec![(1, 0b11 << 62, false), (0, 0b11, true)]
        );
        assert!(valid_map_chunks(g, s, s).is_empty());
    }

    #[test]
    fn sync_command_targets_its_own_slot_only_with_msi_polling() {
        let d = drv(SyncPollMode::MsiWrite);
        let at = d.geometry.ptr(3, true);
        assert_eq!(
            d.sync_command(at),
            Command::Sync {
                cs: SyncSignal::Irq,
                msi_addr: 0x8000_0030,
                msi_data: 0
            }
        );
        let d = drv(SyncPollMode::ConsPoll { wfe: false });
        assert!(matches!(
            d.sync_command(at),
            Command::Sync {
                cs: SyncSignal::Sev,
                ..
            }
        ));
        assert!(
            CmdqDriver::new(QueueGeometry::new(6).unwrap(), 0, SyncPollMode::MsiWrite).is_err()
        );
    }

    /// One CPU alone, the SMMU completing the sync instantly: the exact operation
    /// sequence of an unmap with MSI polling.
    #[test]
    fn uncontended_unmap_operation_sequence() {
        let d = drv(SyncPollMode::MsiWrite);
        let mut co: Coroutine<SmmuCpuOp, u64> = Coroutine::new(|port| async move {
            let cpu = SmmuCpuPort::new(port);
            let r = dma_unmap(&cpu, &d, 5, 0x7000, 1).await;
            assert!(r.owner);
        });
        let (mut llq, mut owner, mut lock) = (0u64, 0u64, 0u32);
        let mut valid = [0u64; 2];
        let mut slots = [0u32; 128];
        let mut ops = Vec::new();
        let mut resp = None;
        while let Step::Request(op) = co.resume(resp.take()) {
            ops.push(op);
            resp = Some(match op {
                SmmuCpuOp::Load(HostWord::Llq) => llq,
                SmmuCpuOp::Load(HostWord::OwnerProd) => owner,
                SmmuCpuOp::Load(HostWord::Lock) => lock as u64,
                SmmuCpuOp::Load(HostWord::ValidMap(w)) => valid[w as usize],
                SmmuCpuOp::Load(HostWord::CmdqSlot(i)) => slots[i as usize] as u64,
                SmmuCpuOp::Cas {
                    word: HostWord::Llq,
                    old,
                    new,
                } => {
                    let prev = llq;
                    if prev == old {
                        llq = new;
                    }
                    prev
                }
                SmmuCpuOp::FetchAdd { delta, .. } => {
                    let prev = lock;
                    lock = lock.wrapping_add(delta as u32);
                    prev as u64
                }
                SmmuCpuOp::FetchXor {
                    word: HostWord::ValidMap(w),
                    mask,
                } => {
                    let prev = valid[w as usize];
                    valid[w as usize] ^= mask;
                    prev
                }
                SmmuCpuOp::FetchAndNotProd { mask } => {
                    let prev = llq;
                    llq &= !(mask as u64);
                    prev
                }
                SmmuCpuOp::WriteEntry { index, cmd } => {
                    slots[(index & 127) as usize] = cmd[0] as u32;
                    0
                }
                SmmuCpuOp::Store {
                    word: HostWord::OwnerProd,
                    value,
                } => {
                    owner = value;
                    0
                }
                SmmuCpuOp::WriteProd(p) => {
                    // The SMMU consumes both commands and its MSI clears the sync slot.
                    assert_eq!(p, 2);
                    slots[1] = 0;
                    0
                }
                SmmuCpuOp::StoreLlqCons(c) => {
                    llq = Llq::new(Llq(llq).prod(), c).0;
                    0
                }
                _ => 0,
            });
        }
        use SmmuCpuOp::*;
        assert_eq!(
            ops[..7],
            [
                ClearPtes {
                    asid: 5,
                    iova: 0x7000,
                    pages: 1
                },
                LocalIrqSave,
                Load(HostWord::Llq),
                Cas {
                    word: HostWord::Llq,
                    old: 0,
                    new: 2 | OWNED_FLAG as u64
                },
                WriteEntry {
                    index: 0,
                    cmd: Command::tlbi_nh_va(5, 0x7000).encode()
                },
                WriteEntry {
                    index: 1,
                    cmd: d.sync_command(QueuePtr(1)).encode()
                },
                FetchAdd {
                    word: HostWord::Lock,
                    delta: 1
                },
            ]
        );
        assert!(ops.contains(&WriteProd(2)));
        assert!(ops.contains(&Load(HostWord::CmdqSlot(1))));
        // Last (only) waiter out: tryunlock fails, it publishes cons = 2 and unlocks.
        assert_eq!(
            ops[ops.len() - 3..],
            [
                FetchAdd {
                    word: HostWord::Lock,
                    delta: -1
                },
                LocalIrqRestore,
                CmdlistReturned
            ]
        );
        assert_eq!(
            (Llq(llq).prod(), Llq(llq).cons(), owner, lock),
            (2, 2, 2, 0)
        );
        assert_eq!(valid[0], 0b11);
    }
}
