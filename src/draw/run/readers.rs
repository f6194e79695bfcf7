//! Who reads a drawn draw's record now (`GET /drops/{drop}/draw`, public): at most
//! [`MAX_CONCURRENT`] records stream from one instance at once, and at most one to each client
//! (its address as the limiters key it: an IPv6 client by its network), so that neither one
//! address nor a few together can hold every place while others wait.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The most records one instance streams at once: each holds a page in memory and queries
/// Postgres a page at a time, for as long as its reader takes a chunk every write deadline.
pub const MAX_CONCURRENT: usize = 16;

/// The places, and the clients holding one.
#[derive(Clone)]
pub struct Readers {
    places: Arc<Semaphore>,
    /// At most [`MAX_CONCURRENT`] entries: one is added only with a place held.
    clients: Arc<Mutex<HashSet<IpAddr>>>,
}

/// A reader's place, given back when it is dropped (with the stream that carries it).
pub struct Reader {
    _place: OwnedSemaphorePermit,
    client: IpAddr,
    clients: Arc<Mutex<HashSet<IpAddr>>>,
}

impl Default for Readers {
    fn default() -> Self {
        Self { places: Arc::new(Semaphore::new(MAX_CONCURRENT)), clients: Arc::default() }
    }
}

impl Readers {
    /// A place for `client`; `None` when every place is taken or `client` holds one already.
    pub fn admit(&self, client: IpAddr) -> Option<Reader> {
        let place = self.places.clone().try_acquire_owned().ok()?;
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        // The place just taken goes back with `place` when the client holds one already.
        clients.insert(client).then(|| Reader { _place: place, client, clients: self.clients.clone() })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(n: usize) -> IpAddr {
        IpAddr::from([10, 0, (n / 256) as u8, (n % 256) as u8])
    }

    #[test]
    fn a_client_holds_one_place_and_the_instance_at_most_its_cap() {
        let readers = Readers::default();
        let first = readers.admit(client(0)).expect("a place");
        assert!(readers.admit(client(0)).is_none(), "a second place for the same client");
        let mut held: Vec<Reader> = (1..MAX_CONCURRENT).map(|n| readers.admit(client(n)).expect("a place")).collect();
        assert!(readers.admit(client(MAX_CONCURRENT)).is_none(), "every place taken");
        drop(first);
        let again = readers.admit(client(MAX_CONCURRENT)).expect("the place given back");
        held.push(again);
        assert!(readers.admit(client(0)).is_none(), "full again");
        held.clear();
        assert_eq!(readers.clients.lock().unwrap().len(), 0, "every client let go");
        assert_eq!(readers.places.available_permits(), MAX_CONCURRENT);
    }

    #[test]
    fn a_refused_second_place_gives_back_the_place_it_took() {
        let readers = Readers::default();
        let _first = readers.admit(client(0)).expect("a place");
        for _ in 0..3 * MAX_CONCURRENT {
            assert!(readers.admit(client(0)).is_none());
        }
        assert_eq!(readers.places.available_permits(), MAX_CONCURRENT - 1);
    }
}
