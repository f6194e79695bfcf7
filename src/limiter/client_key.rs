//! The one place that turns a client's resolved address into the key it is limited by.

use std::net::{IpAddr, Ipv6Addr};

/// The default IPv6 prefix length clients are grouped by: one /64 is what one subscriber, or
/// one host with privacy addresses, commonly holds.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// The address a client is limited as: an IPv4 address (an IPv4-mapped IPv6 address counts as
/// its IPv4 address) stands for itself; an IPv6 address stands for its network of
/// `ipv6_prefix` bits (1-128, clamped), so every address of one /64 (by default) shares one
/// limiter bucket and one refusal-memory entry. The network is written as its first address,
/// e.g. `2001:db8:1:2::` for any address of `2001:db8:1:2::/64`.
pub fn client_key(ip: IpAddr, ipv6_prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let bits = u32::from(ipv6_prefix.clamp(1, 128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str, prefix: u8) -> String {
        client_key(s.parse().unwrap(), prefix).to_string()
    }

    #[test]
    fn ipv6_addresses_of_one_prefix_share_a_key_and_ipv4_stays_per_address() {
        assert_eq!(key("2001:db8:1:2:aaaa::1", 64), "2001:db8:1:2::");
        assert_eq!(key("2001:db8:1:2:ffff:ffff:ffff:ffff", 64), "2001:db8:1:2::");
        assert_eq!(key("2001:db8:1:3::1", 64), "2001:db8:1:3::");
        assert_eq!(key("2001:db8:1:2::1", 48), "2001:db8:1::");
        assert_eq!(key("2001:db8::7", 128), "2001:db8::7");
        assert_eq!(key("2001:db8::7", 1), "::");
        assert_eq!(key("192.0.2.1", 64), "192.0.2.1");
        assert_eq!(key("192.0.2.2", 1), "192.0.2.2");
        assert_eq!(key("::ffff:192.0.2.1", 64), "192.0.2.1", "IPv4-mapped counts as IPv4");
    }
}
