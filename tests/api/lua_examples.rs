//! The `redis-cli --eval` example in each Lua file's header runs and answers as documented. The
//! scripts an example assembles (`sed … > /tmp/seckill-<name>.lua`) go to a directory of this
//! run's own instead of `/tmp`, removed at the end: concurrent runs (another checkout's scripts
//! too) never share a file.

use std::path::PathBuf;
use std::process::Command;

use redis::AsyncCommands;
use seckill::limiter::Algorithm;
use seckill::redis::keys::rate_limit_key;

use crate::common::{first_redis_url, testbed};
use crate::helpers::redis_url;

/// The example command of `lua/<file>`, with its arguments split as a shell would (single quotes).
fn example(file: &str) -> Vec<String> {
    let source = std::fs::read_to_string(format!("{}/lua/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let line = source
        .lines()
        .find_map(|l| l.trim_start_matches("--").trim().strip_prefix("redis-cli "))
        .unwrap_or_else(|| panic!("lua/{file} has no redis-cli example"));
    let mut args = vec![];
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('\'') {
            let end = quoted.find('\'').expect("closing quote");
            args.push(quoted[..end].to_owned());
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            args.push(rest[..end].to_owned());
            rest = rest[end..].trim_start();
        }
    }
    args
}

/// The directory the headers' examples write to.
const EXAMPLES_DIR: &str = "/tmp/";

/// This run's own directory for the assembled scripts, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let unique = format!("seckill-lua-examples-{}-{}", std::process::id(), uuid::Uuid::now_v7().simple());
        let dir = std::env::temp_dir().join(unique);
        std::fs::create_dir(&dir).unwrap();
        Self(dir)
    }

    /// `text` with the examples' directory replaced by this one.
    fn place(&self, text: &str) -> String {
        text.replace(EXAMPLES_DIR, &format!("{}/", self.0.display()))
    }

    /// Runs the `sed` line of `lua/<file>`'s example, which assembles the script the example runs.
    fn assemble(&self, file: &str) {
        let source = std::fs::read_to_string(format!("{}/lua/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let line = source
            .lines()
            .find_map(|l| l.trim_start_matches("--").trim().strip_prefix("sed ").map(|rest| format!("sed {rest}")))
            .unwrap_or_else(|| panic!("lua/{file} has no sed line"));
        assert!(
            line.contains(&format!("> {EXAMPLES_DIR}seckill-")),
            "lua/{file} assembles into {EXAMPLES_DIR}: {line}"
        );
        let line = self.place(&line);
        let status = Command::new("sh").arg("-c").arg(&line).current_dir(env!("CARGO_MANIFEST_DIR")).status().unwrap();
        assert!(status.success(), "{line}");
    }

    /// Runs `lua/<file>`'s example (an assembled script from this directory).
    fn run(&self, file: &str) -> String {
        let output = Command::new(&testbed().tools.redis_cli)
            .arg("-c") // on a cluster, follow MOVED to the node that owns the key
            .arg("-u")
            .arg(first_redis_url())
            .args(example(file).iter().map(|arg| self.place(arg)))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("redis-cli runs");
        assert!(output.status.success(), "{file}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn every_lua_header_example_works_as_documented() {
    let scratch = Scratch::new();
    let (run, assemble) = (|file: &str| scratch.run(file), |file: &str| scratch.assemble(file));
    // The examples use the default "seckill" prefix and sale "demo": start from a clean slate.
    let mut redis =
        seckill::redis::connection::connect(&redis_url().into(), std::time::Duration::from_secs(5)).unwrap();
    let keys = ["meta", "stock", "buyers", "orders", "receipts", "queue:state", "queue", "queue:late", "queue:admits"]
        .map(|k| format!("seckill:{{sale:demo}}:{k}"));
    let _: () = redis.del(&keys).await.unwrap();
    // Each limiter's script is lua/<its name, with underscores>.lua; its example is client 127.0.0.1.
    let limiters = Algorithm::ALL.map(|a| format!("{}.lua", a.name().replace('-', "_")));
    let limiter_keys = Algorithm::ALL.map(|a| rate_limit_key("seckill", a.name(), "127.0.0.1".parse().unwrap()));
    let _: () = redis.del(&limiter_keys).await.unwrap();

    assert_eq!(run("seed.lua").trim(), "ok");
    assemble("buy.lua");
    assert_eq!(run("buy.lua").trim(), "ok");
    let again: Vec<String> = run("buy.lua").lines().map(str::to_owned).collect();
    assert_eq!(again[0], "already_purchased", "{again:?}");
    assert_eq!(again[1], "0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69", "the receipt's order id: {again:?}");
    assert_eq!(again[3], "queued", "not acknowledged yet: {again:?}");
    assert_eq!(run("trim.lua").trim(), "0", "nothing delivered yet: nothing deleted");
    // Two consumers with nothing pending: the example's own name stays, the other goes.
    seckill::redis::order_stream::create_group(&mut redis, &keys[3]).await.unwrap();
    for consumer in ["host-8080", "gone-worker"] {
        let _: i64 = redis::cmd("XGROUP")
            .arg("CREATECONSUMER")
            .arg(&keys[3])
            .arg("seckill-workers")
            .arg(consumer)
            .query_async(&mut redis)
            .await
            .unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(run("prune_consumers.lua").trim(), "gone-worker", "idle past 10 ms, nothing pending");
    assert_eq!(run("prune_consumers.lua").trim(), "", "nothing left to remove");
    assemble("restore.lua");
    let restore = || -> Vec<i64> { run("restore.lua").split_whitespace().map(|n| n.parse().unwrap()).collect() };
    assert_eq!(restore(), [1, 0, 0], "bob restored as a buyer (a live order), nothing overdrawn");
    assert_eq!(restore(), [0, 0, 0], "a second restore changes nothing");
    for limiter in &limiters {
        assemble(limiter);
        let reply: Vec<i64> = run(limiter).split_whitespace().map(|n| n.parse().unwrap()).collect();
        assert_eq!(reply[..3], [1, 19, 0], "{limiter}: admitted, 19 left of 20, no wait");
        assert!((1..=2_000_000).contains(&reply[3]), "{limiter}: reset {} us", reply[3]);
    }
    let _: () = redis.del(&limiter_keys).await.unwrap();
    let per_sale_key = "seckill:{sale:demo}:ratelimit:gcra:127.0.0.1";
    let _: () = redis.del(per_sale_key).await.unwrap();
    assemble("buy_limited.lua");
    let reply: Vec<String> = run("buy_limited.lua").lines().map(str::to_owned).collect();
    assert_eq!(reply[..3], ["1", "19", "0"], "the client's limit admitted, 19 left of 20: {reply:?}");
    assert_eq!(reply[4..], ["0", "ok"], "no buyer limit asked; carol bought: {reply:?}");
    let _: () = redis.del(per_sale_key).await.unwrap();
    assemble("buy_batch.lua");
    let reply: Vec<String> = run("buy_batch.lua").lines().map(str::to_owned).collect();
    assert_eq!(reply.len(), 12, "two purchases, each {{client, buyer, purchase}}: {reply:?}");
    assert_eq!(reply[..3], ["1", "19", "0"], "dave: the client's limit admitted, 19 left: {reply:?}");
    assert_eq!(reply[4..6], ["0", "ok"], "dave bought: {reply:?}");
    assert_eq!(reply[6..9], ["1", "18", "0"], "erin, from the same client: 18 left: {reply:?}");
    assert_eq!(reply[10..], ["0", "ok"], "erin bought: {reply:?}");
    let _: () = redis.del(per_sale_key).await.unwrap();

    let stock: i64 = redis.get(&keys[1]).await.unwrap();
    let entries: redis::streams::StreamRangeReply = redis.xrange_all(&keys[3]).await.unwrap();
    let queued: Vec<String> = entries.ids.iter().flat_map(seckill::redis::order_stream::users).collect();
    assert_eq!(
        (stock, queued),
        (95, ["alice", "carol", "dave", "erin"].map(String::from).to_vec()),
        "alice, carol, dave and erin bought, bob was restored; dave and erin in one entry"
    );
    assert_eq!(entries.ids.len(), 3, "dave's and erin's orders share their call's entry");

    // The waiting room's scripts, on the demo sale made a queued one that has started.
    let _: () = redis
        .hset_multiple(
            &keys[0],
            &[("starts_at_ms", "0"), ("queue_opens_at_ms", "0"), ("queue_rate", "10"), ("queue_ttl_ms", "60000")],
        )
        .await
        .unwrap();
    let _: () = redis.hset(&keys[5], "seed", "00".repeat(32)).await.unwrap();
    assemble("queue_join.lua");
    assert_eq!(run("queue_join.lua").split_whitespace().collect::<Vec<_>>(), ["placed", "1"], "alice is first in line");
    assert_eq!(run("queue_join.lua").split_whitespace().collect::<Vec<_>>(), ["placed", "1"], "and stays so");
    assemble("admit.lua");
    let admitted: Vec<i64> = run("admit.lua").split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!(admitted[1..5], [1, 0, 1, 95], "upto 1 (alice), none lapsed, one place, 95 left: {admitted:?}");
    assert_eq!(admitted[9], 1, "alice's admission is listed: {admitted:?}");
    let buy = run("buy.lua");
    assert!(buy.starts_with("already_purchased"), "alice bought before: she hears of it before the line: {buy}");
    let _: () = redis.srem(&keys[2], "alice").await.unwrap();
    let buy = run("buy.lua");
    assert_eq!(buy.trim(), "not_admitted", "a queued sale wants a place");
    let _: () = redis.del(&keys).await.unwrap();

    // The proof of work's scripts: an address's count, a solution spent once.
    let spent = ["seckill:challenges:{127.0.0.1}", "seckill:{sale:demo}:challenges"];
    let _: () = redis.del(&spent).await.unwrap();
    assert_eq!((run("challenge_count.lua").trim(), run("challenge_count.lua").trim()), ("1", "2"));
    assemble("challenge_spend.lua");
    assert_eq!((run("challenge_spend.lua").trim(), run("challenge_spend.lua").trim()), ("1", "0"), "once");
    let _: () = redis.del(&spent).await.unwrap();

    // The janitor's lock: its owner's kept, another owner's left alone.
    let lock = "seckill:retire-lock";
    let set = |owner: &str| redis::cmd("SET").arg(lock).arg(owner).arg("PX").arg(2_000).clone();
    let _: () = set("host-8080").query_async(&mut redis).await.unwrap();
    assert_eq!(run("lock_keep.lua").trim(), "1", "held: kept");
    let ttl: i64 = redis.pttl(lock).await.unwrap();
    assert!(ttl > 5_000, "kept for 10 s: {ttl} ms left");
    let _: () = set("another-host").query_async(&mut redis).await.unwrap();
    assert_eq!(run("lock_keep.lua").trim(), "0", "another owner's");
    let ttl: i64 = redis.pttl(lock).await.unwrap();
    assert!((1..=2_000).contains(&ttl), "left as it was: {ttl} ms left");
    let _: () = redis.del(lock).await.unwrap();
}

#[tokio::test]
async fn the_sale_day_controls_examples_work_as_documented() {
    let scratch = Scratch::new();
    let run = |file: &str| scratch.run(file);
    // On a sale "drop" of their own: a pause of "demo" would stop the other examples' purchases.
    let mut redis =
        seckill::redis::connection::connect(&redis_url().into(), std::time::Duration::from_secs(5)).unwrap();
    let (meta, stock) = ("seckill:{sale:drop}:meta", "seckill:{sale:drop}:stock");
    let _: () = redis.del(&[meta, stock]).await.unwrap();
    let _: () = redis.hset_multiple(meta, &[("stock_initial", "100"), ("shards", "1")]).await.unwrap();
    let _: () = redis.set(stock, 100).await.unwrap();
    scratch.assemble("restock.lua");
    assert_eq!(run("restock.lua").split_whitespace().collect::<Vec<_>>(), ["ok", "105", "105"], "5 more units");
    assert_eq!(run("control.lua").split_whitespace().collect::<Vec<_>>(), ["ok", "0"], "paused, not before; no end");
    let paused: Option<String> = redis.hget(meta, "paused").await.unwrap();
    assert_eq!(paused.as_deref(), Some("price typo"));
    let _: () = redis.del(&[meta, stock]).await.unwrap();

    // A drop's scripts, on the drop "kicks" (sizes 40 and 41, 3 pairs each).
    let drop = seckill::redis::keys::DropKeys::new("seckill", &seckill::domain::DropId::parse("kicks").unwrap());
    let sizes: Vec<_> = ["kicks.40", "kicks.41"]
        .iter()
        .map(|id| seckill::redis::keys::SaleKeys::new("seckill", &seckill::domain::SaleId::parse(id).unwrap()))
        .collect();
    let every: Vec<&str> = [&drop.meta, &drop.sales, &drop.line_meta, &drop.line_state, &drop.draw]
        .into_iter()
        .chain([&drop.entries, &drop.entry_stream])
        .chain(sizes.iter().flat_map(|s| [&s.meta, &s.stock, &s.buyers]))
        .map(String::as_str)
        .collect();
    let _: () = redis.del(&every).await.unwrap();
    assert_eq!(run("drop_seed.lua").trim(), "ok");
    let control = run("drop_control.lua");
    assert_eq!(control.split_whitespace().take(2).collect::<Vec<_>>(), ["ok", "0"], "paused, none before");
    let paused: Vec<Option<String>> = redis::pipe()
        .hget(&sizes[0].meta, "paused")
        .hget(&sizes[1].meta, "paused")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(paused, [Some("price typo".into()), Some("price typo".into())], "both sizes at once");
    scratch.assemble("drop_restock.lua");
    let restocked: Vec<String> = run("drop_restock.lua").split_whitespace().map(str::to_owned).collect();
    assert_eq!(restocked, ["ok", "5", "5", "2", "2"], "40: 3 + 2; 41: 3 - 1");
    // A draw's entry, on the same drop put in draw mode with its entries open.
    let window = [("opens_at_ms", "0"), ("closes_at_ms", "99999999999999"), ("per_buyer", "2"), ("sizes", "40,41")];
    let _: () = redis.hset_multiple(&drop.draw, &window).await.unwrap();
    scratch.assemble("draw_enter.lua");
    assert_eq!(run("draw_enter.lua").split_whitespace().next(), Some("entered"), "alice entered");
    let again: Vec<String> = run("draw_enter.lua").split_whitespace().map(str::to_owned).collect();
    assert_eq!(again[..2], ["duplicate", "41,40"], "once: {again:?}");
    // A winner's award in size 40, put in draw mode: made once, then answered already_purchased.
    let _: () = redis.hset(&sizes[0].meta, "line", "draw").await.unwrap();
    let _: () = redis.hdel(&sizes[0].meta, "paused").await.unwrap();
    scratch.assemble("draw_award.lua");
    assert_eq!(run("draw_award.lua").trim(), "ok", "awarded (no payment window in the example)");
    let again: Vec<String> = run("draw_award.lua").lines().map(str::to_owned).collect();
    assert_eq!(again[0], "already_purchased", "{again:?}");
    // The waitlist, bob at place 1; alice's award cancelled goes to him, once.
    assert_eq!(run("draw_waitlist.lua").trim(), "1", "one place written");
    assert_eq!(run("draw_waitlist.lua").trim(), "0", "written once");
    scratch.assemble("draw_release.lua");
    let released: Vec<String> = run("draw_release.lua").lines().map(str::to_owned).collect();
    assert_eq!(released[2..], ["1", "0", "1", "bob", "0190b7a3-0000-7000-8000-000000000001", "1"], "{released:?}");
    let again: Vec<String> = run("draw_release.lua").lines().map(str::to_owned).collect();
    assert_eq!((again[0].as_str(), again.len()), ("0", 4), "released once: {again:?}");
    let waitlist = [&drop.waitlist, &drop.waiting("40"), &drop.waiting("41")];
    let _: () = redis.del(&waitlist).await.unwrap();
    let released = "seckill:{group:kicks}:sale:kicks.40:released";
    let _: () = redis.del(released).await.unwrap();
    let _: () = redis.hdel("seckill:{group:kicks}:held", "bob").await.unwrap();
    let extra = ["orders", "receipts"].map(|k| format!("seckill:{{group:kicks}}:sale:kicks.40:{k}"));
    let _: () = redis.del(&extra).await.unwrap();
    let _: () = redis.del(&every).await.unwrap();

    // The repair's floor of the buyers' holdings in the group: raised, never lowered.
    let held = "seckill:{group:kicks}:held";
    let _: () = redis.hset(held, "alice", 3).await.unwrap();
    assert_eq!(run("held_floor.lua").trim(), "1", "bob raised to 1, alice's 3 kept");
    let units: (i64, i64) =
        redis::cmd("HMGET").arg(held).arg("alice").arg("bob").query_async(&mut redis).await.unwrap();
    assert_eq!(units, (3, 1));
    let _: () = redis.del(held).await.unwrap();
}
