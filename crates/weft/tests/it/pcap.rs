//! Reading a tcpdump capture (classic pcap of Ethernet frames, as `tcpdump -w` writes on a Linux
//! bridge) into the byte stream of each TCP direction, so a test can look for text that crossed
//! the wire even when it was split over several segments.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4};

/// The bytes one side of a TCP connection sent, in sequence order as captured.
#[derive(Debug)]
pub(crate) struct Flow {
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    pub bytes: Vec<u8>,
    /// Where the next new byte is expected (retransmitted bytes are not added twice).
    next_seq: Option<u32>,
}

impl Flow {
    /// Whether either end of the flow is `port`.
    pub(crate) fn touches(&self, port: u16) -> bool {
        self.src.port() == port || self.dst.port() == port
    }

    pub(crate) fn contains(&self, needle: &[u8]) -> bool {
        contains(&self.bytes, needle)
    }

    /// Adds a segment's payload, skipping what an earlier segment already carried.
    fn add(&mut self, seq: u32, payload: &[u8]) {
        let skip = match self.next_seq {
            // `seq` before the expected byte (wrapping): a retransmission, maybe with new bytes.
            Some(next) if next.wrapping_sub(seq) < (1 << 31) => next.wrapping_sub(seq) as usize,
            _ => 0,
        };
        if skip < payload.len() {
            self.bytes.extend_from_slice(&payload[skip..]);
            self.next_seq = Some(seq.wrapping_add(payload.len() as u32));
        }
    }
}

/// Whether `needle` occurs in `hay`.
pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Reads a capture into its IPv4 TCP flows (one per direction, in order of their first packet),
/// and the number of packets read. Other packets count but add no flow.
pub(crate) fn tcp_flows(capture: &[u8]) -> Result<(Vec<Flow>, usize), String> {
    let header = capture.get(..24).ok_or("shorter than a pcap header")?;
    let little = match header[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return Err("not a classic pcap file".into()),
    };
    let u32_at = |b: &[u8], at: usize| {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if little {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    let link = u32_at(header, 20);
    if link != 1 {
        return Err(format!("link type {link}, not Ethernet (1)"));
    }
    let mut flows: Vec<Flow> = Vec::new();
    let mut index: HashMap<(SocketAddrV4, SocketAddrV4), usize> = HashMap::new();
    let (mut at, mut packets) = (24, 0);
    while at + 16 <= capture.len() {
        let len = u32_at(capture, at + 8) as usize;
        let frame = capture
            .get(at + 16..at + 16 + len)
            .ok_or("a packet runs past the end of the capture")?;
        at += 16 + len;
        packets += 1;
        let Some((src, dst, seq, payload)) = tcp_segment(frame) else {
            continue;
        };
        let i = *index.entry((src, dst)).or_insert_with(|| {
            flows.push(Flow {
                src,
                dst,
                bytes: Vec::new(),
                next_seq: None,
            });
            flows.len() - 1
        });
        flows[i].add(seq, payload);
    }
    Ok((flows, packets))
}

/// The addresses, sequence number and payload of an Ethernet frame that holds an IPv4 TCP segment.
fn tcp_segment(frame: &[u8]) -> Option<(SocketAddrV4, SocketAddrV4, u32, &[u8])> {
    let be16 = |b: &[u8], at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let mut ip = frame.get(14..)?;
    let mut ethertype = be16(frame, 12);
    if ethertype == 0x8100 {
        // An 802.1Q tag sits before the real type.
        ethertype = be16(frame, 16);
        ip = frame.get(18..)?;
    }
    if ethertype != 0x0800 || ip.len() < 20 || ip[9] != 6 {
        return None;
    }
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    // Offloaded segments may say 0; Ethernet padding follows short ones.
    let total = match usize::from(be16(ip, 2)) {
        t if t >= ihl && t <= ip.len() => t,
        _ => ip.len(),
    };
    let tcp = ip.get(ihl..total)?;
    let offset = usize::from(*tcp.get(12)? >> 4) * 4;
    let payload = tcp.get(offset..)?;
    let addr = |a: &[u8], port: u16| SocketAddrV4::new(Ipv4Addr::new(a[0], a[1], a[2], a[3]), port);
    let src = addr(&ip[12..16], be16(tcp, 0));
    let dst = addr(&ip[16..20], be16(tcp, 2));
    let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
    Some((src, dst, seq, payload))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pcap file of Ethernet frames, each an IPv4 TCP segment (seq, payload) from 10.0.0.1:1000
    /// to 10.0.0.2:2000.
    fn capture(segments: &[(u32, &[u8])]) -> Vec<u8> {
        let mut out = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0];
        out.extend([0; 8]);
        out.extend(65535u32.to_le_bytes());
        out.extend(1u32.to_le_bytes());
        for (seq, payload) in segments {
            let mut frame = vec![0; 12];
            frame.extend([0x08, 0x00]);
            let total = (20 + 20 + payload.len()) as u16;
            frame.extend([0x45, 0]);
            frame.extend(total.to_be_bytes());
            frame.extend([0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
            frame.extend(1000u16.to_be_bytes());
            frame.extend(2000u16.to_be_bytes());
            frame.extend(seq.to_be_bytes());
            frame.extend([0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
            frame.extend(*payload);
            out.extend([0; 8]);
            out.extend((frame.len() as u32).to_le_bytes());
            out.extend((frame.len() as u32).to_le_bytes());
            out.extend(frame);
        }
        out
    }

    #[test]
    fn text_split_over_segments_is_found_and_retransmissions_are_not_doubled() {
        let pcap = capture(&[(100, b"GET /sec"), (108, b"ret HTTP"), (104, b" /secret H")]);
        let (flows, packets) = tcp_flows(&pcap).unwrap();
        assert_eq!(packets, 3);
        assert_eq!(flows.len(), 1);
        assert_eq!(flows[0].bytes, b"GET /secret HTTP");
        assert!(flows[0].contains(b"/secret") && flows[0].touches(2000));
        assert!(!flows[0].touches(3000));
    }

    #[test]
    fn other_files_are_refused() {
        assert!(tcp_flows(b"not a capture at all, not at all").is_err());
    }
}
