//! How many connections each client holds open: at most `SECKILL_MAX_CONNECTIONS_PER_CLIENT`
//! per client key (an IPv4 address, an IPv6 network of `SECKILL_IPV6_PREFIX` bits, as the rate
//! limiter groups them). A trusted proxy's connections are not counted: they carry many clients,
//! whom the proxy itself must cap.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::http::client_ip::{TrustedProxies, canonical};
use crate::shop::client_key;

/// The open connections of every client that has one; an entry lives as long as its client has
/// a connection open, so the map is bounded by the open connections.
pub struct ClientConnections {
    open: Mutex<HashMap<IpAddr, u32>>,
    limit: u32,
    ipv6_prefix: u8,
    proxies: TrustedProxies,
}

/// One counted connection; dropping it (the connection closed) gives its place back.
pub struct ConnectionSlot {
    owner: Arc<ClientConnections>,
    client: IpAddr,
}

impl ClientConnections {
    /// At most `limit` open connections per client key (0: no limit).
    pub fn new(limit: u32, ipv6_prefix: u8, proxies: TrustedProxies) -> Arc<Self> {
        Arc::new(Self { open: Mutex::default(), limit, ipv6_prefix, proxies })
    }

    /// A place for a new connection from `peer`: `Ok(None)` when it is not counted (no limit, a
    /// trusted proxy), `Err(())` when the client already holds `limit` connections.
    #[allow(clippy::result_unit_err)]
    pub fn admit(self: &Arc<Self>, peer: IpAddr) -> Result<Option<ConnectionSlot>, ()> {
        let peer = canonical(peer);
        if self.limit == 0 || self.proxies.trusts(peer) {
            return Ok(None);
        }
        let client = client_key(peer, self.ipv6_prefix);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(client).or_insert(0);
        if *count >= self.limit {
            return Err(());
        }
        *count += 1;
        Ok(Some(ConnectionSlot { owner: self.clone(), client }))
    }

    /// Clients holding at least one counted connection.
    pub fn clients(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.owner.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_holds_at_most_the_limit_and_closed_connections_give_their_place_back() {
        let connections = ClientConnections::new(2, 64, TrustedProxies::default());
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let first = connections.admit(a).unwrap().expect("counted");
        let second = connections.admit(a).unwrap().expect("counted");
        assert!(connections.admit(a).is_err(), "a third one is refused");
        assert!(connections.admit("192.0.2.2".parse().unwrap()).is_ok(), "another client is not");
        drop(first);
        let third = connections.admit(a).unwrap();
        assert!(third.is_some(), "a closed connection gave its place back");
        drop((second, third));
        assert_eq!(connections.clients(), 0, "no entry outlives its client's last connection");
    }

    #[test]
    fn ipv6_clients_share_their_network_and_mapped_ipv4_is_ipv4() {
        let connections = ClientConnections::new(1, 64, TrustedProxies::default());
        let _one = connections.admit("2001:db8::1".parse().unwrap()).unwrap();
        assert!(connections.admit("2001:db8::ffff:2".parse().unwrap()).is_err(), "same /64");
        assert!(connections.admit("2001:db8:0:1::1".parse().unwrap()).is_ok(), "another /64");
        let _v4 = connections.admit("192.0.2.9".parse().unwrap()).unwrap();
        assert!(connections.admit("::ffff:192.0.2.9".parse().unwrap()).is_err(), "the same IPv4 client");
    }

    #[test]
    fn trusted_proxies_and_a_zero_limit_are_not_counted() {
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()]);
        let connections = ClientConnections::new(1, 64, proxies);
        for _ in 0..3 {
            assert!(connections.admit("10.1.2.3".parse().unwrap()).unwrap().is_none());
        }
        let unlimited = ClientConnections::new(0, 64, TrustedProxies::default());
        assert!(unlimited.admit("192.0.2.1".parse().unwrap()).unwrap().is_none());
        assert_eq!((connections.clients(), unlimited.clients()), (0, 0));
    }
}
