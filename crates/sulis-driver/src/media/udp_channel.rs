//! A UDP channel URI resolved to socket addresses.
//!
//! `aeron:udp?endpoint=host:port` names, for a publication, where data is
//! sent and, for a subscription, where it is received; `control` names the
//! publication's control address for multi-destination-cast; `interface`
//! picks the local interface. Host names are resolved here, once, by the
//! conductor. On a response channel (`control-mode=response`) `control` names
//! the server's response port: a response publication binds it, a response
//! subscription sends its setup-eliciting status messages there. Multicast endpoints must have an odd last byte: the control
//! group is the endpoint + 1, as in Aeron.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use sulis_protocol::uri::{ChannelUri, ControlMode, Media};

/// A local interface selection: an address, optionally a subnet prefix and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterfaceSpec {
    /// The address (or subnet address).
    pub addr: IpAddr,
    /// Subnet prefix length (32/128 = exact address).
    pub prefix: u8,
    /// Port to bind (0 = ephemeral).
    pub port: u16,
}

/// A resolved UDP channel.
#[derive(Clone, Debug)]
pub struct UdpChannel {
    /// The parsed URI.
    pub uri: ChannelUri,
    /// Endpoint address (publication: destination; subscription: bind address).
    pub endpoint: Option<SocketAddr>,
    /// Control address (MDC).
    pub control: Option<SocketAddr>,
    /// Local interface.
    pub interface: Option<InterfaceSpec>,
    /// True for a multicast endpoint.
    pub is_multicast: bool,
    /// `control-mode=response`.
    pub is_response: bool,
    /// Multicast control group (endpoint + 1) for multicast channels.
    pub multicast_control: Option<SocketAddr>,
    /// Canonical form used to share one transport between channels that name
    /// the same addresses.
    pub canonical: String,
}

/// Resolves `host:port` (IPv6 in brackets) to one socket address.
pub fn resolve(what: &str, host_port: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = host_port.parse::<SocketAddr>() {
        return Ok(a);
    }
    let mut addrs = host_port
        .to_socket_addrs()
        .map_err(|e| format!("{what}={host_port}: cannot resolve host: {e}"))?;
    // Prefer IPv4, as most Aeron deployments do.
    let all: Vec<SocketAddr> = addrs.by_ref().collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or_else(|| all.first())
        .copied()
        .ok_or_else(|| format!("{what}={host_port}: host resolved to no address"))
}

fn parse_interface(text: &str) -> Result<InterfaceSpec, String> {
    // Forms: ip, ip:port, ip/prefix, ip:port/prefix, ip/prefix:port, [v6]:port/prefix
    let (addr_port, prefix) = match text.rsplit_once('/') {
        Some((a, p)) if !p.contains(':') || p.parse::<u8>().is_ok() => {
            (a.to_string(), Some(p.to_string()))
        }
        Some((a, p)) => {
            // ip/prefix:port
            let (pre, port) = p
                .split_once(':')
                .ok_or_else(|| format!("interface={text}: bad prefix"))?;
            (format!("{a}:{port}"), Some(pre.to_string()))
        }
        None => (text.to_string(), None),
    };
    let (addr, port) = if let Ok(sa) = addr_port.parse::<SocketAddr>() {
        (sa.ip(), sa.port())
    } else if let Ok(ip) = addr_port
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        (ip, 0)
    } else {
        let sa = resolve("interface", &addr_port)?;
        (sa.ip(), sa.port())
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        Some(p) => p
            .parse::<u8>()
            .ok()
            .filter(|&v| v <= max)
            .ok_or_else(|| format!("interface={text}: prefix must be 0..={max}"))?,
        None => max,
    };
    Ok(InterfaceSpec { addr, prefix, port })
}

impl InterfaceSpec {
    /// True if `ip` lies in this subnet (the exact address for a /32 or /128).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let bits = |a: IpAddr| -> u128 {
            match a {
                IpAddr::V4(v4) => u32::from(v4) as u128,
                IpAddr::V6(v6) => u128::from(v6),
            }
        };
        if self.addr.is_ipv4() != ip.is_ipv4() {
            return false;
        }
        let width = if ip.is_ipv4() { 32 } else { 128 };
        let shift = width - u32::from(self.prefix);
        shift >= 128 || (bits(self.addr) >> shift) == (bits(ip) >> shift)
    }

    /// The local interface this spec picks for multicast: its address and
    /// index, the first interface that is up and has an address in the
    /// subnet (as Aeron picks one). `Err` names the spec when none has.
    pub fn resolve_local(&self) -> Result<(IpAddr, u32), String> {
        local_addresses()
            .into_iter()
            .find(|(ip, _)| self.contains(*ip))
            .ok_or_else(|| {
                format!(
                    "interface={}/{}: no local interface that is up has an address there",
                    self.addr, self.prefix
                )
            })
    }
}

/// Every address of a local interface that is up, with the interface's index.
fn local_addresses() -> Vec<(IpAddr, u32)> {
    let mut out = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list we walk and free.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return out;
    }
    let mut cursor = list;
    while !cursor.is_null() {
        // SAFETY: a node of the list getifaddrs returned, valid until freed.
        let ifa = unsafe { &*cursor };
        cursor = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: ifa_addr points at a sockaddr of the family it names.
        let ip = unsafe {
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)))
                }
                libc::AF_INET6 => {
                    let a = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    IpAddr::V6(a.sin6_addr.s6_addr.into())
                }
                _ => continue,
            }
        };
        // SAFETY: ifa_name is the interface's NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(ifa.ifa_name) };
        out.push((ip, index));
    }
    // SAFETY: the list getifaddrs allocated, freed once.
    unsafe { libc::freeifaddrs(list) };
    out
}

fn plus_one(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], o[3].wrapping_add(1))),
                addr.port(),
            )
        }
        IpAddr::V6(v6) => {
            let mut o = v6.octets();
            o[15] = o[15].wrapping_add(1);
            SocketAddr::new(IpAddr::V6(o.into()), addr.port())
        }
    }
}

impl UdpChannel {
    /// Parses and resolves a UDP channel; errors name the offending part.
    pub fn parse(channel: &str) -> Result<UdpChannel, String> {
        let uri = ChannelUri::parse(channel).map_err(|e| e.to_string())?;
        Self::from_uri(uri)
    }

    /// Resolves an already parsed URI.
    pub fn from_uri(uri: ChannelUri) -> Result<UdpChannel, String> {
        if uri.media() != Media::Udp {
            return Err(format!("channel '{uri}' is not a UDP channel"));
        }
        let p = uri.params().clone();
        let endpoint = p
            .endpoint
            .as_deref()
            .map(|e| resolve("endpoint", e))
            .transpose()?;
        let control = p
            .control
            .as_deref()
            .map(|c| resolve("control", c))
            .transpose()?;
        let interface = p.interface.as_deref().map(parse_interface).transpose()?;
        let is_multicast = endpoint.is_some_and(|e| e.ip().is_multicast());
        let multicast_control = if is_multicast {
            let e = endpoint.unwrap();
            let last = match e.ip() {
                IpAddr::V4(v4) => v4.octets()[3],
                IpAddr::V6(v6) => v6.octets()[15],
            };
            if last % 2 == 0 {
                return Err(format!(
                    "invalid channel URI '{uri}': endpoint={}: a multicast data address must end in an odd number (the control group is that + 1)",
                    p.endpoint.as_deref().unwrap_or_default()
                ));
            }
            Some(plus_one(e))
        } else {
            None
        };
        if endpoint.is_none()
            && control.is_none()
            && !matches!(
                p.control_mode,
                Some(ControlMode::Manual) | Some(ControlMode::Response)
            )
            && p.tags.is_none()
            && !uri.is_spy()
        {
            return Err(format!(
                "invalid channel URI '{uri}': a UDP channel needs an endpoint or a control address"
            ));
        }
        let is_response = p.control_mode == Some(ControlMode::Response);
        let mut canonical = format!(
            "UDP-{}-{}",
            interface
                .map(|i| format!("{}:{}", i.addr, i.port))
                .unwrap_or_else(|| "0.0.0.0:0".into()),
            endpoint
                .map(|e| e.to_string())
                .unwrap_or_else(|| "0.0.0.0:0".into())
        );
        if is_response {
            // Every response channel naming the same control address shares
            // one socket; sessions tell the streams apart.
            canonical.push_str(&format!(
                "-RSP-{}",
                control
                    .map(|c| c.to_string())
                    .unwrap_or_else(|| "0.0.0.0:0".into())
            ));
        } else {
            // Multi-destination-cast, or a unicast channel that binds its
            // control address: publications share such an endpoint (and an
            // MDC endpoint's destinations) only with the same ones.
            if let Some(c) = control {
                canonical.push_str(&format!("-CTL-{c}"));
            }
            match p.control_mode {
                Some(ControlMode::Dynamic) => canonical.push_str("-MDC-dynamic"),
                Some(ControlMode::Manual) => canonical.push_str("-MDC-manual"),
                _ => {}
            }
        }
        Ok(UdpChannel {
            uri,
            endpoint,
            control,
            interface,
            is_multicast,
            is_response,
            multicast_control,
            canonical,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn should_resolve_unicast_endpoint_and_hostnames() {
        let c = UdpChannel::parse("aeron:udp?endpoint=localhost:40123").unwrap();
        assert_eq!(c.endpoint, Some("127.0.0.1:40123".parse().unwrap()));
        assert!(!c.is_multicast);
        let c = UdpChannel::parse("aeron:udp?endpoint=[::1]:40124|interface=127.0.0.1").unwrap();
        assert_eq!(c.endpoint, Some("[::1]:40124".parse().unwrap()));
        assert_eq!(c.interface.unwrap().prefix, 32);
    }

    #[test]
    fn should_derive_the_multicast_control_group() {
        let c = UdpChannel::parse("aeron:udp?endpoint=224.10.9.7:40456").unwrap();
        assert!(c.is_multicast);
        assert_eq!(
            c.multicast_control,
            Some("224.10.9.8:40456".parse().unwrap())
        );
        let e = UdpChannel::parse("aeron:udp?endpoint=224.10.9.8:40456").unwrap_err();
        assert!(
            e.contains("endpoint=224.10.9.8:40456") && e.contains("odd"),
            "{e}"
        );
    }

    #[test]
    fn should_parse_interface_forms() {
        let i = parse_interface("192.168.1.0/24").unwrap();
        assert_eq!(
            (i.addr, i.prefix, i.port),
            ("192.168.1.0".parse().unwrap(), 24, 0)
        );
        let i = parse_interface("127.0.0.1:40000").unwrap();
        assert_eq!((i.prefix, i.port), (32, 40000));
        assert!(parse_interface("10.0.0.1/40")
            .unwrap_err()
            .contains("prefix"));
    }

    #[test]
    fn should_match_subnets_and_find_the_loopback_interface() {
        let spec = parse_interface("10.1.2.0/24").unwrap();
        assert!(spec.contains("10.1.2.77".parse().unwrap()));
        assert!(!spec.contains("10.1.3.1".parse().unwrap()));
        assert!(!spec.contains("::1".parse().unwrap()));
        assert!(parse_interface("0.0.0.0/0")
            .unwrap()
            .contains("192.0.2.1".parse().unwrap()));
        let (ip, index) = parse_interface("127.0.0.0/8")
            .unwrap()
            .resolve_local()
            .unwrap();
        assert!(ip.is_loopback() && index > 0);
        let e = parse_interface("192.0.2.1")
            .unwrap()
            .resolve_local()
            .unwrap_err();
        assert!(e.contains("interface=192.0.2.1/32"), "{e}");
    }

    #[test]
    fn should_name_unresolvable_hosts() {
        let e = UdpChannel::parse("aeron:udp?endpoint=no-such-host.invalid:40123").unwrap_err();
        assert!(e.contains("endpoint=no-such-host.invalid:40123"), "{e}");
        assert!(UdpChannel::parse("aeron:ipc")
            .unwrap_err()
            .contains("not a UDP channel"));
    }
}
