//! A NIC's transmit path on an Arm host with the SMMU in strict mode: the sending
//! thread maps every buffer it hands the NIC, and the TX-completion NAPI poll unmaps
//! each one, which in strict mode invalidates the IOTLB and waits for a CMD_SYNC per
//! unmap ([`crate::kernel::smmu::dma_unmap`]).
//!
//! The sender follows a UDP `sendmsg` of one datagram without GSO (netperf
//! `UDP_STREAM`): `__ip_append_data` builds one linear skb per IP fragment (only UDP
//! GSO makes paged skbs), so each fragment is one buffer and one `dma_map_single` in
//! the driver (hns3 `hns3_fill_skb_to_desc` maps the head, then each page fragment,
//! of which there are none here). The socket may hold `sk_sndbuf` bytes of skbs
//! (their truesize) not yet freed; past that, `sock_alloc_send_skb` sleeps until TX
//! completion frees some. Each fragment goes to the driver separately and rings the
//! doorbell (no `xmit_more` batching across a datagram's fragments).
//!
//! The completion poll follows `hns3_clean_tx_ring`: for each packet the NIC has
//! finished, unmap each of its buffers (`hns3_unmap_buffer`), then free the skb; then
//! `napi_complete` and re-enable the queue's interrupt.
//!
//! Every step is one operation of [`TxOp`] through the same port as the SMMU
//! algorithms, so a CPU's TX work and its CMD_SYNC waits interleave with interrupts
//! exactly where Linux lets them.

use crate::kernel::smmu::{dma_unmap, CmdqDriver, SmmuCpuPort};

/// IPv4 header bytes (no options).
pub const IPV4_HEADER_BYTES: u32 = 20;
/// UDP header bytes.
pub const UDP_HEADER_BYTES: u32 = 8;
/// Ethernet header (14) and FCS (4) bytes around an IP packet.
pub const ETHERNET_FRAME_OVERHEAD_BYTES: u32 = 18;
/// Preamble with start delimiter (8) and the minimum inter-frame gap (12): wire
/// time every frame costs beyond its own bytes (IEEE 802.3).
pub const ETHERNET_WIRE_GAP_BYTES: u32 = 20;

/// CPU work of the transmit path, priced by the platform's `costs.tx` table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxWork {
    /// The system call and `udp_sendmsg` up to the first fragment, once per datagram.
    Sendmsg,
    /// Copying `bytes` of user data into the skbs.
    CopyBytes(u32),
    /// One fragment through `ip_fragment`/`dev_queue_xmit`/qdisc and the driver's
    /// `ndo_start_xmit` (descriptor fill excluded: that is `PostPacket`).
    PacketXmit,
    /// `dma_map_single` of one buffer: an IOVA from the rcache and the PTE write.
    MapBuffer,
    /// Reading one completed descriptor back in the clean loop.
    ReclaimDesc,
    /// Returning one unmapped buffer's IOVA (`iommu_dma_free_iova`).
    FreeIova,
    /// `napi_consume_skb` of one transmitted skb.
    FreeSkb,
}

/// One operation of the transmit path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxOp {
    /// CPU work (see [`TxWork`]).
    Work(TxWork),
    /// Sleep until the socket can take `truesize` more bytes of skbs.
    WaitSndbuf {
        /// The skbs' truesize the datagram needs.
        truesize: u32,
    },
    /// Hand one packet of `ip_bytes` in `buffers` mapped buffers (IOVAs given by
    /// `MapBuffer`s before it) to the queue and ring the doorbell; waits while the ring
    /// is full (the queue is stopped). `last` marks a datagram's last fragment.
    PostPacket {
        /// IP packet length.
        ip_bytes: u32,
        /// Buffers (descriptors) of the packet.
        buffers: u32,
        /// Whether this fragment completes its datagram.
        last: bool,
    },
    /// The next packet the NIC finished that this poll has not cleaned: yields its
    /// buffer count, or 0 when there is none.
    NextCompleted,
    /// The IOVA of buffer `index` of the packet being cleaned.
    BufferIova {
        /// Buffer index within the packet.
        index: u32,
    },
    /// Free the packet being cleaned (its truesize returns to the socket).
    FreePacket,
    /// `napi_complete_done` and re-enabling the queue's interrupt.
    NapiComplete,
}

/// What one sending thread transmits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxFlow {
    /// UDP payload bytes per datagram.
    pub datagram_bytes: u32,
    /// The interface MTU (largest IP packet).
    pub mtu: u32,
    /// Bytes an skb costs the socket beyond its IP packet (its truesize overhead).
    pub skb_overhead_bytes: u32,
    /// Datagrams before the thread stops; `None` sends for ever.
    pub datagrams: Option<u64>,
}

impl TxFlow {
    /// The IP packet lengths of one datagram's fragments: the UDP header and payload
    /// cut into pieces of the largest multiple of 8 bytes that fits the MTU after the
    /// IP header.
    pub fn fragments(&self) -> Vec<u32> {
        let room = (self.mtu.saturating_sub(IPV4_HEADER_BYTES) / 8 * 8).max(8);
        let mut left = self.datagram_bytes + UDP_HEADER_BYTES;
        let mut out = Vec::new();
        while left > 0 {
            let piece = left.min(room);
            out.push(piece + IPV4_HEADER_BYTES);
            left -= piece;
        }
        out
    }

    /// The truesize of one datagram's skbs.
    pub fn truesize(&self) -> u32 {
        self.fragments()
            .iter()
            .map(|b| b + self.skb_overhead_bytes)
            .sum()
    }
}

/// A netperf `UDP_STREAM` sender: datagram after datagram, each fragment mapped and
/// posted to the NIC.
pub async fn udp_send_thread(cpu: SmmuCpuPort, flow: TxFlow) {
    let fragments = flow.fragments();
    let truesize = flow.truesize();
    let mut sent = 0u64;
    while flow.datagrams.is_none_or(|n| sent < n) {
        cpu.tx(TxOp::WaitSndbuf { truesize }).await;
        cpu.tx(TxOp::Work(TxWork::Sendmsg)).await;
        cpu.tx(TxOp::Work(TxWork::CopyBytes(flow.datagram_bytes)))
            .await;
        for (i, &ip_bytes) in fragments.iter().enumerate() {
            cpu.tx(TxOp::Work(TxWork::PacketXmit)).await;
            cpu.tx(TxOp::Work(TxWork::MapBuffer)).await;
            cpu.tx(TxOp::PostPacket {
                ip_bytes,
                buffers: 1,
                last: i + 1 == fragments.len(),
            })
            .await;
        }
        sent += 1;
    }
}

/// The TX-completion NAPI poll of one queue (`hns3_clean_tx_ring`): unmap and free
/// every finished packet, then re-enable the interrupt. Each buffer of `pages` 4 KiB
/// pages in address space `asid` is a strict-mode unmap with its own CMD_SYNC.
pub async fn tx_clean(cpu: SmmuCpuPort, drv: CmdqDriver, asid: u16, pages: u32) {
    loop {
        let buffers = cpu.tx(TxOp::NextCompleted).await as u32;
        if buffers == 0 {
            break;
        }
        cpu.tx(TxOp::Work(TxWork::ReclaimDesc)).await;
        for index in 0..buffers {
            let iova = cpu.tx(TxOp::BufferIova { index }).await;
            dma_unmap(&cpu, &drv, asid, iova, pages).await;
            cpu.tx(TxOp::Work(TxWork::FreeIova)).await;
        }
        cpu.tx(TxOp::Work(TxWork::FreeSkb)).await;
        cpu.tx(TxOp::FreePacket).await;
    }
    cpu.tx(TxOp::NapiComplete).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_32k_datagram_is_23_fragments_of_at_most_the_mtu() {
        let flow = TxFlow {
            datagram_bytes: 32768,
            mtu: 1500,
            skb_overhead_bytes: 0,
            datagrams: None,
        };
        let f = flow.fragments();
        assert_eq!(f.len(), 23);
        assert!(f.iter().all(|&b| b <= 1500));
        assert_eq!(f[0], 1500);
        // Payload and headers add up: 32768 + 8 (UDP) + 23 x 20 (IP).
        assert_eq!(f.iter().sum::<u32>(), 32768 + 8 + 23 * 20);
        let one = TxFlow {
            datagram_bytes: 1,
            ..flow
        };
        assert_eq!(one.fragments(), vec![29]);
    }
}
