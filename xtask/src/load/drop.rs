//! A drop with k6 (`load-tests/k6/drop.js`): a product in sizes (a group of sales) with a
//! per-customer limit across them, by default seeded whole as a drop with one line (`--line`);
//! a crowd joins the line once and buys random quantities of random sizes with its one admission
//! token while an operator pauses the whole drop and tops one size up (`--line=false`: sales
//! seeded one by one, no line, one size paused). Afterwards each size's invariants in units,
//! every 201 in Postgres, no buyer over the limit across the group, and the top-up added.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::{Load, k6, orders, secs};
use crate::measure::checks::psql;
use crate::measure::clock::rfc3339;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The sizes, one sale each in the group `drop`.
    #[arg(long, default_value_t = 5)]
    sizes: u32,
    /// Units per size.
    #[arg(long, default_value_t = 200)]
    stock: u64,
    /// Units one buyer may buy across the sizes.
    #[arg(long, default_value_t = 2)]
    per_buyer: u32,
    /// New users a second.
    #[arg(long, default_value_t = 200)]
    arrival_rps: u32,
    /// How long users keep arriving.
    #[arg(long, default_value = "10s")]
    duration: String,
    /// When the first size is paused, and for how long.
    #[arg(long, default_value = "2s")]
    pause_at: String,
    #[arg(long, default_value = "2s")]
    pause_for: String,
    /// When the second size gets `--top-up` more units.
    #[arg(long, default_value = "5s")]
    top_up_at: String,
    #[arg(long, default_value_t = 50)]
    top_up: u64,
    /// The buy_duration p99 threshold, ms: a stall, not slowness (it holds on 2 cores with a
    /// cargo build running).
    #[arg(long, default_value_t = 2000)]
    p99_ms: u32,
    /// Run it as a drop with one line (issue 52; the default): seeded whole with
    /// `PUT /admin/drops/drop` with a waiting room letting in `--line-rate` users a second and no
    /// proof of work; each user joins the line once and buys its sizes with its one admission
    /// token; the operator pauses, resumes and tops up the whole drop
    /// (`POST /admin/drops/drop/...`). `--line=false`: the sizes seeded one by one as sales of a
    /// group, no line, the first size paused alone.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    line: bool,
    #[arg(long, default_value_t = 1000)]
    line_rate: u32,
    /// The crowd's source addresses.
    #[arg(long, default_value = "127.0.0.2-127.0.0.250")]
    local_ips: String,
}

pub fn run(a: &Args, mut load: Load) -> anyhow::Result<Load> {
    let app = load.app(&[])?;
    let sizes: Vec<String> = (0..a.sizes).map(|s| format!("drop.{}", 38 + s)).collect();
    if a.line {
        let each: serde_json::Map<String, serde_json::Value> =
            sizes.iter().map(|size| (size["drop.".len()..].to_owned(), json!({"stock": a.stock}))).collect();
        // A waiting room needs a start after its opening: both just past, so the line runs at once.
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64;
        let waiting_room = json!({"opens_at": rfc3339(now - 2), "rate": a.line_rate});
        let body = json!({"sizes": each, "per_buyer": a.per_buyer, "starts_at": rfc3339(now - 1),
            "waiting_room": waiting_room, "challenge": {"cost": 0}});
        app.put_drop("drop", &body)?;
    } else {
        for size in &sizes {
            app.put_sale(size, &json!({"stock": a.stock, "group": "drop", "per_buyer": a.per_buyer}))?;
        }
    }
    let paused = if a.line { "the drop (one line)" } else { sizes[0].as_str() };
    load.log(&format!(
        "seeded {} sizes of {} units, {} per buyer across them; {} users/s for {}, {paused} paused at {} for {}, {} more units of {} at {}",
        a.sizes, a.stock, a.per_buyer, a.arrival_rps, a.duration, a.pause_at, a.pause_for, a.top_up, sizes[1], a.top_up_at
    ));
    let env = [
        ("BASE_URL", app.url.clone()),
        ("RUN_ID", SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs().to_string()),
        ("SIZES", sizes.join(",")),
        ("PER_BUYER", a.per_buyer.to_string()),
        ("ADMIN_TOKEN", app.admin_token.clone()),
        ("ARRIVAL_RPS", a.arrival_rps.to_string()),
        ("DURATION_S", secs(&a.duration)?.to_string()),
        ("PAUSE_AT_S", secs(&a.pause_at)?.to_string()),
        ("PAUSE_S", secs(&a.pause_for)?.to_string()),
        ("TOPUP_AT_S", secs(&a.top_up_at)?.to_string()),
        ("TOPUP", a.top_up.to_string()),
        ("P99_MS", a.p99_ms.to_string()),
        ("DROP_LINE", if a.line { "drop".to_owned() } else { String::new() }),
    ];
    let extra = ["--local-ips".to_string(), a.local_ips.clone()];
    let limit = secs(&a.duration)? + 120;
    let name = "k6-drop";
    load.failures += u32::from(k6::run_script(&load, name, "drop.js", &env, &extra, limit)? != 0);

    let mut persisted = 0;
    for size in &sizes {
        persisted += load.check_sale(&app, size)?;
    }
    load.expect_created("drop (k6)", k6::created(&load, name), persisted);
    let console = orders::read(&load.results.join(format!("{name}-console.log")))?;
    let stored = orders::postgres_orders(&load, &sizes.iter().map(String::as_str).collect::<Vec<_>>())?;
    let seen: std::collections::HashSet<(String, String)> =
        console.created.iter().map(|o| (o.sale.clone(), o.order_id.clone())).collect();
    let kept: std::collections::HashSet<(String, String)> =
        stored.iter().map(|((sale, _), (order, _))| (sale.clone(), order.clone())).collect();
    let same = seen == kept;
    println!(
        "invariant drop orders: the 201s' orders {} = Postgres's {} [{}]",
        seen.len(),
        kept.len(),
        if same { "ok" } else { "BROKEN" }
    );
    load.failures += u32::from(!same);

    // No buyer over the limit across the group, in Postgres's units.
    let rows = psql(
        &load.services,
        &format!(
            "select user_id, sum(quantity) from orders where sale_id like 'drop.%' group by user_id having sum(quantity) > {}",
            a.per_buyer
        ),
    )?;
    let over: Vec<&str> = rows.lines().filter(|l| !l.trim().is_empty()).collect();
    let holders = psql(&load.services, "select count(distinct user_id) from orders where sale_id like 'drop.%'")?;
    println!(
        "invariant drop limit: buyers over {} units across the group: {} of {} [{}]",
        a.per_buyer,
        over.len(),
        holders.trim(),
        if over.is_empty() { "ok" } else { "BROKEN" }
    );
    load.failures += u32::from(!over.is_empty());

    // The top-up was added to the second size, once.
    let status: HashMap<String, serde_json::Value> =
        sizes.iter().map(|size| Ok((size.clone(), app.sale_status(size)?))).collect::<anyhow::Result<_>>()?;
    let topped = status[&sizes[1]]["stock_initial"].as_u64().unwrap_or(0);
    let ok = topped == a.stock + a.top_up;
    println!(
        "invariant drop top-up: {} holds {topped} units in all = {} + {} [{}]",
        sizes[1],
        a.stock,
        a.top_up,
        if ok { "ok" } else { "BROKEN" }
    );
    load.failures += u32::from(!ok);
    Ok(load)
}
