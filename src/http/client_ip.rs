//! Which address a request comes from, for rate limiting.
//!
//! The socket peer is the client, unless the peer is a trusted proxy: then `X-Forwarded-For` is
//! read from the right (the hop nearest to us) and the first address that is not itself a trusted
//! proxy is the client. Headers from untrusted peers are ignored, so a client cannot pick its own
//! address.

use std::net::IpAddr;

use actix_web::HttpRequest;
use actix_web::http::header::HeaderMap;
use ipnet::IpNet;

use crate::shop::client_key;

/// The key a request's client is limited by: its address behind the trusted proxies, an IPv6
/// address grouped by its network (`crate::limiter::client_key`).
#[derive(Debug, Clone)]
pub struct ClientKeys {
    /// The proxies whose `X-Forwarded-For` names the client.
    pub proxies: TrustedProxies,
    /// IPv6 clients are limited by their network of this many bits.
    pub ipv6_prefix: u8,
}

impl ClientKeys {
    /// The key of `req`'s client (the unspecified address when actix knows no peer).
    pub fn of(&self, req: &HttpRequest) -> IpAddr {
        let ip = self.proxies.client_ip(req).unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
        client_key(ip, self.ipv6_prefix)
    }
}

/// The proxies whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Believes the proxies in `nets`.
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self(nets)
    }

    /// Whether `ip` is one of the trusted proxies.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client address of `req` (None only when actix knows no peer, e.g. in unit tests).
    pub fn client_ip(&self, req: &HttpRequest) -> Option<IpAddr> {
        let peer = canonical(req.peer_addr()?.ip());
        Some(self.resolve(peer, req.headers()))
    }

    /// The client address given the socket peer and the request headers.
    pub fn resolve(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        // A hop that is not text is garbage: the walk stops there, it does not skip it (skipping
        // a whole line would shorten the chain from the right).
        let hops: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .flat_map(|v| v.as_bytes().split(|b| *b == b','))
            .map(|hop| std::str::from_utf8(hop).map_or("", str::trim))
            .collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop_address(hop) {
                Some(ip) => {
                    client = canonical(ip);
                    if !self.trusts(client) {
                        return client;
                    }
                }
                // Garbage in the chain: stop at the last address we could vouch for.
                None => return client,
            }
        }
        client
    }
}

/// One hop of `X-Forwarded-For`: an address, or an address with its port as some proxies
/// write it (`203.0.113.5:4711`, `[2001:db8::1]:4711`), the port dropped.
fn hop_address(hop: &str) -> Option<IpAddr> {
    hop.parse::<IpAddr>().ok().or_else(|| hop.parse::<std::net::SocketAddr>().ok().map(|addr| addr.ip()))
}

/// IPv4-mapped IPv6 addresses (::ffff:a.b.c.d) count as the IPv4 address.
/// An IPv4-mapped IPv6 address as the IPv4 address it is; any other as it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderName, HeaderValue};

    use super::*;

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in xff {
            map.append(HeaderName::from_static("x-forwarded-for"), HeaderValue::from_str(v).unwrap());
        }
        map
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn untrusted_peer_is_the_client_whatever_the_header_says() {
        let proxies = TrustedProxies::default();
        assert_eq!(proxies.resolve(ip("203.0.113.7"), &headers(&["1.2.3.4"])), ip("203.0.113.7"));
    }

    #[test]
    fn trusted_proxy_forwards_the_nearest_untrusted_hop() {
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()]);
        // The client may prepend anything; only the hop our proxy appended counts.
        let h = headers(&["6.6.6.6, 198.51.100.9", "10.1.1.1"]);
        assert_eq!(proxies.resolve(ip("10.0.0.2"), &h), ip("198.51.100.9"));
    }

    #[test]
    fn trusted_proxy_without_header_or_with_garbage_is_the_client() {
        let proxies = TrustedProxies::new(vec!["10.0.0.2/32".parse().unwrap()]);
        assert_eq!(proxies.resolve(ip("10.0.0.2"), &headers(&[])), ip("10.0.0.2"));
        assert_eq!(proxies.resolve(ip("10.0.0.2"), &headers(&["not-an-ip"])), ip("10.0.0.2"));
    }

    /// Some proxies write each hop with its port: the address is the client's, not garbage
    /// (every client behind such a proxy had been the proxy, one rate limit for all).
    #[test]
    fn a_hop_with_its_port_is_its_address() {
        let proxies = TrustedProxies::new(vec!["10.0.0.2/32".parse().unwrap()]);
        assert_eq!(proxies.resolve(ip("10.0.0.2"), &headers(&["203.0.113.5:4711"])), ip("203.0.113.5"));
        assert_eq!(proxies.resolve(ip("10.0.0.2"), &headers(&["[2001:db8::1]:4711"])), ip("2001:db8::1"));
    }

    /// A line that is not text stops the walk where it stands, as garbage does: skipped, it would
    /// let a client's own earlier line pass for the hop our proxy appended to it.
    #[test]
    fn an_unreadable_line_stops_the_walk_and_is_not_skipped() {
        let proxies = TrustedProxies::new(vec!["10.0.0.2/32".parse().unwrap()]);
        let mut h = headers(&["6.6.6.6"]);
        h.append(HeaderName::from_static("x-forwarded-for"), HeaderValue::from_bytes(b"\xff, 198.51.100.9").unwrap());
        assert_eq!(proxies.resolve(ip("10.0.0.2"), &h), ip("198.51.100.9"), "the hop our proxy appended");
        let mut h = headers(&["6.6.6.6"]);
        h.append(HeaderName::from_static("x-forwarded-for"), HeaderValue::from_bytes(b"\xff").unwrap());
        h.append(HeaderName::from_static("x-forwarded-for"), HeaderValue::from_static("10.0.0.2"));
        assert_eq!(proxies.resolve(ip("10.0.0.2"), &h), ip("10.0.0.2"), "stopped at the unreadable hop, not 6.6.6.6");
    }

    #[test]
    fn mapped_ipv6_peers_match_ipv4_proxies() {
        let proxies = TrustedProxies::new(vec!["127.0.0.1/32".parse().unwrap()]);
        assert_eq!(proxies.resolve(ip("::ffff:127.0.0.1"), &headers(&["192.0.2.1"])), ip("192.0.2.1"));
    }
}
