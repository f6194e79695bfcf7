//! The connections a listener holds: at most its budget in all (the descriptors the process can
//! spare for them, `crate::app` derives it from `nofile`), and per client key (an IPv4 address,
//! an IPv6 network of `SECKILL_IPV6_PREFIX` bits, as the rate limiter groups them) at most
//! `SECKILL_MAX_CONNECTIONS_PER_CLIENT` and at most a share of what is still free ([`admits`]), so
//! that no few addresses can take the last descriptors. IPv6 clients also count together by their
//! site, the /48 around their network ([`SITE_PREFIX`]): a site holds at most what one client
//! may (the cap and its share), however many networks it spreads its connections over. A trusted
//! proxy's connections count against the budget but not per client: they carry many clients,
//! whom the proxy must cap. With the setting at 0 no client is limited but by the budget.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::http::client_ip::{TrustedProxies, canonical};
use crate::shop::client_key;

/// A client may hold another connection while it holds fewer than `free / SHARE × free /
/// budget`: a quarter of what is free, scaled down by how full the listener is (docs/operations.md,
/// "The connection budget", has the worst cases).
pub const SHARE: u64 = 4;

/// IPv6 clients of one /48 count together too: a site's allocation, which a tunnel broker hands
/// anyone for free, holds 65,536 networks of 64 bits, each a client of its own to the cap.
/// Without this, one such host could open a first connection from each of its networks and take
/// the whole budget; with it, the site gets what one client may: the cap and its share
/// ([`admits`]). Not applied when `SECKILL_IPV6_PREFIX` is this or shorter: the client is the
/// site or larger already.
pub const SITE_PREFIX: u8 = 48;

/// The largest budget: with it, `SHARE × budget × held` and `free²` fit in a `u64`.
pub const MAX_BUDGET: u32 = 1 << 24;

/// Whether a client holding `held` connections may open another, `free` of the `budget` being
/// free: `held < free² / (SHARE × budget)`, so its first one whenever one is free.
pub fn admits(held: u32, free: u32, budget: u32) -> bool {
    u64::from(held) * SHARE * u64::from(budget) < u64::from(free) * u64::from(free)
}

/// The open connections of a listener and of every client (and IPv6 site) that has one; an entry
/// lives as long as its client or site has a connection open, so the maps are bounded by the
/// budget.
pub struct ClientConnections {
    open: Mutex<Open>,
    budget: u32,
    cap: u32,
    ipv6_prefix: u8,
    proxies: TrustedProxies,
}

#[derive(Default)]
struct Open {
    /// Every open connection, trusted proxies' included.
    total: u32,
    by_client: HashMap<IpAddr, u32>,
    /// IPv6 clients' connections by their site ([`SITE_PREFIX`]): a map of its own, as a site
    /// and a network of it can be written as the same address.
    by_site: HashMap<IpAddr, u32>,
}

/// One counted connection; dropping it (the connection closed) gives its place back.
pub struct ConnectionSlot {
    owner: Arc<ClientConnections>,
    /// The client it counts against, none for a trusted proxy's (or with no limit per client).
    client: Option<IpAddr>,
    /// And the IPv6 site, for a client of a network longer than [`SITE_PREFIX`].
    site: Option<IpAddr>,
}

impl ClientConnections {
    /// At most `budget` open connections (at most [`MAX_BUDGET`]), and per client key at most
    /// `cap` and its share of what is free (`cap` 0: no limit per client).
    pub fn new(budget: u32, cap: u32, ipv6_prefix: u8, proxies: TrustedProxies) -> Arc<Self> {
        let budget = budget.min(MAX_BUDGET);
        Arc::new(Self { open: Mutex::default(), budget, cap, ipv6_prefix, proxies })
    }

    /// A place for a new connection from `peer`, or `None` when the budget is spent or the
    /// client, or its IPv6 site, holds what it may now (trusted proxies: only when the budget is
    /// spent).
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Option<ConnectionSlot> {
        let peer = canonical(peer);
        let limited = self.cap != 0 && !self.proxies.trusts(peer);
        let client = limited.then(|| client_key(peer, self.ipv6_prefix));
        let site = client.filter(|c| c.is_ipv6() && self.ipv6_prefix > SITE_PREFIX).map(|c| client_key(c, SITE_PREFIX));
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let free = self.budget - open.total;
        if free == 0 {
            return None;
        }
        let held_by = |map: &HashMap<IpAddr, u32>, key: Option<IpAddr>| key.map(|k| map.get(&k).copied().unwrap_or(0));
        let (held, site_held) = (held_by(&open.by_client, client), held_by(&open.by_site, site));
        // A site is held as one client is: to the cap and to its share of what is free.
        let full = |held: Option<u32>| held.is_some_and(|held| held >= self.cap || !admits(held, free, self.budget));
        if full(held) || full(site_held) {
            return None;
        }
        if let (Some(client), Some(held)) = (client, held) {
            open.by_client.insert(client, held + 1);
        }
        if let (Some(site), Some(held)) = (site, site_held) {
            open.by_site.insert(site, held + 1);
        }
        open.total += 1;
        Some(ConnectionSlot { owner: self.clone(), client, site })
    }

    /// The most connections this listener holds.
    pub fn budget(&self) -> u32 {
        self.budget
    }

    /// The connections open now, and the clients holding at least one (trusted proxies not
    /// counted).
    pub fn open(&self) -> (u32, usize) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        (open.total, open.by_client.len())
    }

    /// The IPv6 sites holding at least one connection now.
    pub fn sites(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).by_site.len()
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.owner.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total -= 1;
        let Open { by_client, by_site, .. } = &mut *open;
        for (map, key) in [(by_client, self.client), (by_site, self.site)] {
            if let Some(key) = key
                && let Some(held) = map.get_mut(&key)
            {
                *held -= 1;
                if *held == 0 {
                    map.remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    fn address(i: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0xC000_0200 + i))
    }

    /// Opens connections from `client` until one is refused; returns those admitted.
    fn fill(connections: &Arc<ClientConnections>, client: IpAddr) -> Vec<ConnectionSlot> {
        std::iter::from_fn(|| connections.admit(client)).collect()
    }

    #[test]
    fn a_client_holds_at_most_the_cap_and_closed_connections_give_their_place_back() {
        let connections = ClientConnections::new(1000, 2, 64, TrustedProxies::default());
        let a = address(1);
        let first = connections.admit(a).expect("counted");
        let second = connections.admit(a).expect("counted");
        assert!(connections.admit(a).is_none(), "a third one is refused");
        let other = connections.admit(address(2));
        assert!(other.is_some(), "another client is not");
        drop(first);
        let third = connections.admit(a);
        assert!(third.is_some(), "a closed connection gave its place back");
        assert_eq!(connections.open(), (3, 2));
        drop((second, third, other));
        assert_eq!(connections.open(), (0, 0), "no entry outlives its client's last connection");
    }

    #[test]
    fn ipv6_clients_share_their_network_and_mapped_ipv4_is_ipv4() {
        let connections = ClientConnections::new(1000, 1, 64, TrustedProxies::default());
        let _one = connections.admit("2001:db8::1".parse().unwrap()).unwrap();
        assert!(connections.admit("2001:db8::ffff:2".parse().unwrap()).is_none(), "same /64");
        // (Another /64 of the same /48 counts with it too, as its site: the tests below.)
        assert!(connections.admit("2001:db8:1:1::1".parse().unwrap()).is_some(), "another /64, of another site");
        let _v4 = connections.admit("192.0.2.9".parse().unwrap()).unwrap();
        assert!(connections.admit("::ffff:192.0.2.9".parse().unwrap()).is_none(), "the same IPv4 client");
    }

    /// The `i`-th /64 network of the site `2001:db8:<site>::/48`, its address `::1`.
    fn network(site: u16, i: u16) -> IpAddr {
        format!("2001:db8:{site:x}:{i:x}::1").parse().unwrap()
    }

    #[test]
    fn an_ipv6_site_holds_one_clients_share_however_many_networks_it_spreads_over() {
        let connections = ClientConnections::new(920, 256, 64, TrustedProxies::default());
        let site: Vec<_> = (0..=u16::MAX).map_while(|i| connections.admit(network(1, i))).collect();
        // What one client alone holds of 920 (the test above): a first connection from each of
        // 158 networks, not one from each of 920.
        assert_eq!(site.len(), 158);
        assert_eq!((connections.open(), connections.sites()), ((158, 158), 1));
        assert!(connections.admit(network(1, 60_000)).is_none(), "a network of the site not seen before");
        let _other_site = connections.admit(network(2, 0)).expect("another site's client gets in");
        let _v4 = connections.admit(address(1)).expect("an IPv4 client gets in");
        assert_eq!(connections.sites(), 2);
        drop(site);
        assert_eq!((connections.open(), connections.sites()), ((2, 2), 1), "entries end with their connections");
        assert!(connections.admit(network(1, 7)).is_some(), "the site's places came back");
    }

    #[test]
    fn with_a_prefix_of_a_site_or_shorter_the_client_is_the_site() {
        let connections = ClientConnections::new(920, 256, SITE_PREFIX, TrustedProxies::default());
        let held = fill(&connections, network(1, 0));
        assert_eq!(held.len(), 158, "the /48 is one client");
        assert!(connections.admit(network(1, 9)).is_none(), "another /64 of it is the same client");
        assert_eq!(connections.sites(), 0, "no second count");
    }

    #[test]
    fn trusted_proxies_skip_the_per_client_limits_but_count_against_the_budget() {
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()]);
        let connections = ClientConnections::new(10, 1, 64, proxies);
        let proxy = "10.1.2.3".parse().unwrap();
        let held: Vec<_> = (0..9).map(|_| connections.admit(proxy).expect("a proxy is not capped")).collect();
        assert_eq!(connections.open(), (9, 0), "counted in the total, not per client");
        let last = connections.admit(address(1)).expect("a client's first connection takes the last place");
        assert!(connections.admit(proxy).is_none(), "over the budget even a proxy is refused");
        drop((held, last));
        assert_eq!(connections.open(), (0, 0));
    }

    #[test]
    fn a_client_alone_holds_a_sixth_of_the_budget_and_every_client_its_first_while_one_is_free() {
        let connections = ClientConnections::new(920, 1000, 64, TrustedProxies::default());
        let alone = fill(&connections, address(1));
        // held < free² / (4 × 920) stops at held = 158, free = 762 (762² / 3680 = 157.8).
        assert_eq!(alone.len(), 158);
        let crowd: Vec<_> = (2..).map_while(|i| connections.admit(address(i))).collect();
        assert_eq!(crowd.len(), 762, "one each for as many clients as there are free places");
        assert!(connections.admit(address(1)).is_none());
        assert_eq!(connections.open(), (920, 763));
    }

    /// The worst order for the rule: each address fills up in turn while the most is free. The
    /// figures docs/operations.md gives for a budget of 920 (`nofile` 1024).
    #[test]
    fn a_few_addresses_leave_a_fraction_of_the_budget_free_for_everyone_else() {
        for (addresses, least_free) in [(1, 762), (4, 494), (16, 195), (64, 47)] {
            let connections = ClientConnections::new(920, 256, 64, TrustedProxies::default());
            let held: Vec<_> = (0..addresses).flat_map(|i| fill(&connections, address(i))).collect();
            assert_eq!(920 - connections.open().0, least_free, "{addresses} addresses in turn");
            // Taking turns one connection at a time leaves more free.
            let turns = ClientConnections::new(920, 256, 64, TrustedProxies::default());
            let mut round: Vec<ConnectionSlot> = Vec::new();
            loop {
                let before = round.len();
                round.extend((0..addresses).filter_map(|i| turns.admit(address(i))));
                if round.len() == before {
                    break;
                }
            }
            assert!(920 - turns.open().0 >= least_free, "{addresses} addresses taking turns");
            assert!(connections.admit(address(1000)).is_some(), "a new client still gets in");
            drop((held, round));
        }
    }

    #[test]
    fn with_no_limit_per_client_only_the_budget_counts() {
        let connections = ClientConnections::new(500, 0, 64, TrustedProxies::default());
        let held = fill(&connections, address(1));
        assert_eq!((held.len(), connections.open()), (500, (500, 0)), "the whole budget, no entry per client");
        assert!(connections.admit(address(2)).is_none());
    }

    #[test]
    fn the_cap_binds_when_the_budget_is_large() {
        let connections = ClientConnections::new(65_000, 256, 64, TrustedProxies::default());
        let held: Vec<_> = (0..16).flat_map(|i| fill(&connections, address(i))).collect();
        assert_eq!(held.len(), 16 * 256, "16 addresses at their cap of 256 each");
        let huge = ClientConnections::new(u32::MAX, 256, 64, TrustedProxies::default());
        assert_eq!(huge.budget(), MAX_BUDGET, "clamped so the rule's products fit");
        assert!(admits(0, 1, 1) && !admits(0, 0, 1) && !admits(1, 2, 1));
        assert!(admits(MAX_BUDGET / 4 - 1, MAX_BUDGET, MAX_BUDGET), "no overflow at the largest budget");
        assert!(!admits(MAX_BUDGET, MAX_BUDGET, MAX_BUDGET));
    }

    /// With a budget where the share allows more than the cap (`nofile` 65,536), a site spread
    /// over its networks is held to the cap, as one client is: its share alone would be 11,153.
    #[test]
    fn an_ipv6_site_is_held_to_the_cap_when_the_budget_is_large() {
        let connections = ClientConnections::new(65_000, 256, 64, TrustedProxies::default());
        let site: Vec<_> = (0..=u16::MAX).map_while(|i| connections.admit(network(1, i))).collect();
        assert_eq!(site.len(), 256, "one connection from each of 256 networks, then none");
        assert!(connections.admit(network(2, 0)).is_some(), "another site still gets in");
    }
}
