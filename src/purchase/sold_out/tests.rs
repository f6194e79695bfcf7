//! The sold-out flags' unit tests.

use super::*;
use crate::purchase::OrderStatus;

fn sale(id: &str) -> SaleId {
    SaleId::parse(id).unwrap()
}

fn user(id: &str) -> UserId {
    UserId::parse(id).unwrap()
}

fn receipt(status: OrderStatus) -> Receipt {
    Receipt { order_id: uuid::Uuid::now_v7(), created_at_ms: 1, status, pay_by_ms: None, quantity: 1 }
}

fn loaded(ids: &[&str], status: OrderStatus) -> Buyers {
    let buyers = ids.iter().map(|u| (Box::from(*u), Some(receipt(status)))).collect();
    Buyers::Loaded(Arc::new(BuyerCopy { buyers, settled: status == OrderStatus::Confirmed }))
}

#[test]
fn a_flag_answers_from_the_buyers_it_holds_until_cleared() {
    let flags = SoldOutFlags::default();
    assert_eq!(flags.check(&sale("a"), &user("u")), None);
    let epoch = flags.set(&sale("a")).expect("the first flag asks for the buyers");
    assert_eq!(flags.check(&sale("a"), &user("u")), Some(Flagged::AskRedis), "while they load");
    assert!(flags.set(&sale("a")).is_none(), "one load at a time");
    let confirmed = loaded(&["u"], OrderStatus::Confirmed);
    let Buyers::Loaded(copy) = &confirmed else { unreachable!() };
    let receipt = copy.buyers["u"];
    flags.store_buyers(&sale("a"), epoch, confirmed);
    assert_eq!(flags.check(&sale("a"), &user("u")), Some(Flagged::AlreadyPurchased(receipt)));
    assert_eq!(flags.check(&sale("a"), &user("v")), Some(Flagged::SoldOut));
    assert!(flags.set(&sale("a")).is_none(), "a sale with buyers keeps them");
    assert_eq!(flags.check(&sale("b"), &user("u")), None);
    flags.clear("a");
    assert_eq!(flags.check(&sale("a"), &user("u")), None);
    flags.set(&sale("b"));
    flags.clear_all();
    assert_eq!(flags.check(&sale("b"), &user("u")), None);
}

#[test]
fn an_empty_or_missing_copy_is_loaded_again_on_the_next_sold_out() {
    let flags = SoldOutFlags::default();
    let epoch = flags.set(&sale("a")).unwrap();
    flags.store_buyers(&sale("a"), epoch, loaded(&[], OrderStatus::Confirmed));
    assert!(flags.set(&sale("a")).is_some(), "no buyers yet: a re-seed could still add some");
    flags.store_buyers(&sale("a"), epoch, Buyers::Absent);
    assert!(flags.set(&sale("a")).is_some());
}

#[test]
fn a_copy_with_queued_orders_is_copied_again_and_answers_meanwhile() {
    let flags = SoldOutFlags::default();
    let epoch = flags.set(&sale("a")).unwrap();
    flags.store_buyers(&sale("a"), epoch, loaded(&["u"], OrderStatus::Queued));
    assert!(flags.set(&sale("a")).is_some(), "queued orders: copy again");
    fn queued(f: Option<Flagged>) -> bool {
        matches!(f, Some(Flagged::AlreadyPurchased(Some(r))) if r.status == OrderStatus::Queued)
    }
    assert!(queued(flags.check(&sale("a"), &user("u"))), "the old copy answers while the new one loads");
    flags.store_buyers(&sale("a"), epoch, Buyers::Absent);
    assert!(queued(flags.check(&sale("a"), &user("u"))), "a failed copy keeps the old one");
    assert!(flags.set(&sale("a")).is_some());
    flags.store_buyers(&sale("a"), epoch, loaded(&["u"], OrderStatus::Confirmed));
    assert!(flags.set(&sale("a")).is_none(), "all confirmed: the copy is final");
}

#[test]
fn the_flags_hold_a_bounded_number_of_buyers_and_drop_idle_ones() {
    let flags = SoldOutFlags::bounded(Duration::from_secs(60), 1_000, Duration::from_secs(60));
    for i in 0..20 {
        let sale = sale(&format!("s{i}"));
        let epoch = flags.set(&sale).unwrap();
        let ids: Vec<String> = (0..100).map(|u| format!("u{u}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        flags.store_buyers(&sale, epoch, loaded(&ids, OrderStatus::Confirmed));
    }
    let held = flags.held_buyers();
    assert!(held <= 1_000, "20 copies of 100 buyers, bound 1,000: {held} held");
    assert!(held >= 101, "the latest copy stays: {held} held");

    let idle = SoldOutFlags::bounded(Duration::from_secs(60), 1_000, Duration::from_millis(500));
    let epoch = idle.set(&sale("a")).unwrap();
    idle.store_buyers(&sale("a"), epoch, loaded(&["u"], OrderStatus::Confirmed));
    assert_eq!(idle.held_buyers(), 2);
    std::thread::sleep(Duration::from_millis(1_200));
    assert_eq!(idle.held_buyers(), 0, "an idle flag is dropped with its copy");
    assert_eq!(idle.check(&sale("a"), &user("u")), None);
}

#[test]
fn an_answer_asked_before_a_clear_does_not_set_the_flag_again() {
    let flags = SoldOutFlags::default();
    let asked = Instant::now();
    flags.clear("a");
    assert!(flags.set_since(&sale("a"), asked).is_none(), "sold out before the top-up");
    assert_eq!(flags.check(&sale("a"), &user("u")), None);
    assert!(flags.set_since(&sale("a"), Instant::now()).is_some(), "sold out after it");
    let asked = Instant::now();
    flags.clear_all();
    assert!(flags.set_since(&sale("b"), asked).is_none());
}

/// A set or a copy stored that held the flag across a clear puts it back in the cache: it
/// must not answer (it did, sold out, until it lapsed), and the next set replaces it.
#[test]
fn a_flag_put_back_after_its_clear_answers_nothing() {
    let flags = SoldOutFlags::default();
    let epoch = flags.set(&sale("a")).unwrap();
    let held = flags.flags.get("a").unwrap(); // what a racing set or store_buyers holds
    flags.clear("a");
    flags.flags.insert("a".into(), held); // its late re-insert
    assert_eq!(flags.check(&sale("a"), &user("u")), None, "a cleared flag put back");
    flags.store_buyers(&sale("a"), epoch, loaded(&["u"], OrderStatus::Confirmed));
    assert_eq!(flags.check(&sale("a"), &user("v")), None, "nor does a copy revive it (sold out, it said)");
    assert!(flags.set(&sale("a")).is_some(), "a later sold-out sets a new flag");
    assert_eq!(flags.check(&sale("a"), &user("v")), Some(Flagged::AskRedis));

    flags.set(&sale("b"));
    let held = flags.flags.get("b").unwrap();
    flags.clear_all();
    flags.flags.insert("b".into(), held);
    assert_eq!(flags.check(&sale("b"), &user("u")), None, "after a clear of every flag too");
}

#[test]
fn a_flag_lapses_after_its_time_to_live() {
    let flags = SoldOutFlags::with_ttl(Duration::from_millis(300));
    flags.set(&sale("a"));
    assert!(flags.check(&sale("a"), &user("u")).is_some());
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(flags.check(&sale("a"), &user("u")), None);
}

#[test]
fn a_flag_set_again_after_it_lapsed_drops_its_copy_and_keeps_none_made_for_the_old_flag() {
    let flags = SoldOutFlags::with_ttl(Duration::from_millis(100));
    let first = flags.set(&sale("a")).unwrap();
    flags.store_buyers(&sale("a"), first, loaded(&["u"], OrderStatus::Confirmed));
    assert_eq!(flags.held_buyers(), 2);
    while flags.check(&sale("a"), &user("u")).is_some() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let second = flags.set(&sale("a")).expect("a lapsed flag set again is copied afresh");
    assert_eq!(flags.held_buyers(), 1, "without the old copy (the sale may have sold since)");
    flags.store_buyers(&sale("a"), first, loaded(&["u"], OrderStatus::Confirmed));
    assert_eq!(flags.held_buyers(), 1, "a copy made for the lapsed flag is not kept");
    flags.store_buyers(&sale("a"), second, loaded(&["u", "v"], OrderStatus::Confirmed));
    assert_eq!(flags.held_buyers(), 3);
}
